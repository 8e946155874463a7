#include "executor/step_broadcast.h"

#include <future>

#include "sched/scheduler_output_codec.h"

namespace kvasir {
namespace {

// Each step is two broadcasts: its length, then its bytes. Length 0 is the stop message (an
// encoded step is never empty: it starts with a magic word).
// The keep-alive is a length with no bytes after it.
constexpr uint64_t kStop = 0;
constexpr uint64_t kKeepAlive = ~uint64_t{0};
constexpr uint64_t kMaxStepBytes = uint64_t{1} << 32;

}  // namespace

BroadcastingWorker::BroadcastingWorker(dist::Communicator& comm, std::unique_ptr<Worker> local,
                                       std::chrono::milliseconds keep_alive_interval)
    : comm_(comm),
      local_(std::move(local)),
      keep_alive_interval_(keep_alive_interval),
      last_sent_(std::chrono::steady_clock::now()) {
  keeper_ = std::thread([this] { keep_alive(); });
}

BroadcastingWorker::~BroadcastingWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  keeper_.join();
  if (!failed_.ok()) return;
  uint64_t stop = kStop;
  (void)comm_.broadcast(&stop, sizeof(stop), 0);  // a broken group already ended the others
}

void BroadcastingWorker::keep_alive() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto due = last_sent_ + keep_alive_interval_;
    if (std::chrono::steady_clock::now() < due) {
      wake_.wait_until(lock, due);
      continue;
    }
    if (!failed_.ok()) return;
    uint64_t alive = kKeepAlive;
    Status s = comm_.broadcast(&alive, sizeof(alive), 0);
    if (!s.ok()) failed_ = unavailable("the worker processes were lost while idle: " + s.message());
    last_sent_ = std::chrono::steady_clock::now();
  }
}

StepResult BroadcastingWorker::execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) {
  std::shared_ptr<const GrammarBitmask> masks;
  if (bitmask.valid()) masks = bitmask.get();  // before the lock: the keep-alive may go meanwhile
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  last_sent_ = std::chrono::steady_clock::now();
  encode_step(so, masks.get(), message_);
  uint64_t size = message_.size();
  Status s = comm_.broadcast(&size, sizeof(size), 0);
  if (s.ok()) s = comm_.broadcast(message_.data(), message_.size(), 0);
  if (!s.ok()) {
    failed_ = unavailable("the step could not reach the worker processes: " + s.message());
    return failed_;
  }
  StepResult r = local_->execute_model(so, bitmask);
  if (!r.ok()) failed_ = r.status();
  last_sent_ = std::chrono::steady_clock::now();  // the ranks waited in this step, not idle
  return r;
}

Status serve_steps(dist::Communicator& comm, Worker& worker) {
  std::vector<uint8_t> message;
  for (;;) {
    uint64_t size = 0;
    Status s = comm.broadcast(&size, sizeof(size), 0);
    if (!s.ok()) return s;
    if (size == kStop) return Status();
    if (size == kKeepAlive) continue;
    if (size > kMaxStepBytes) return data_loss("tensor-parallel step of " + std::to_string(size) + " bytes");
    message.resize(size);
    s = comm.broadcast(message.data(), message.size(), 0);
    if (!s.ok()) return s;
    KVASIR_ASSIGN_OR_RETURN(StepMessage step, decode_step(message.data(), message.size()));
    GrammarBitmaskFuture masks;
    if (step.grammar_bitmask) {
      std::promise<std::shared_ptr<const GrammarBitmask>> ready;
      ready.set_value(std::make_shared<const GrammarBitmask>(std::move(*step.grammar_bitmask)));
      masks = ready.get_future().share();
    }
    StepResult r = worker.execute_model(step.scheduler_output, masks);
    if (!r.ok()) return r.status();
  }
}

}  // namespace kvasir
