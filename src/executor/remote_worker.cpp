#include "executor/remote_worker.h"

#include <string>

#include "sched/runner_output_codec.h"

namespace kvasir {
namespace {

// Every reply is a fixed header, then `bytes` bytes: an encoded ModelRunnerOutput, or the text of
// the Status that failed the step (its code in `code`).
struct ReplyHeader {
  uint32_t magic = 0;
  uint32_t kind = 0;  // kOutput | kError
  int32_t code = 0;
  uint32_t reserved = 0;
  uint64_t bytes = 0;
};
constexpr uint32_t kReplyMagic = 0x3152504b;  // "KPR1"
constexpr uint32_t kOutput = 1;
constexpr uint32_t kError = 2;
constexpr uint64_t kMaxReplyBytes = uint64_t{1} << 32;

struct InfoMessage {
  uint32_t magic = 0;
  int32_t num_kv_blocks = 0;
  int32_t max_model_len = 0;
  uint32_t reserved = 0;
};
constexpr uint32_t kInfoMagic = 0x3149524b;     // "KRI1"
constexpr uint32_t kLoadingMagic = 0x314c524b;  // "KRL1": still loading, the info follows

Status send_reply(dist::Communicator& comm, int dest, uint32_t kind, int32_t code, const uint8_t* data, size_t size) {
  ReplyHeader h;
  h.magic = kReplyMagic;
  h.kind = kind;
  h.code = code;
  h.bytes = size;
  KVASIR_RETURN_IF_ERROR(comm.send(&h, sizeof(h), dest));
  return size == 0 ? Status() : comm.send(data, size, dest);
}

}  // namespace

RemoteWorker::RemoteWorker(dist::Communicator& comm, int source) : comm_(comm), source_(source) {}

StepResult RemoteWorker::execute_model(const SchedulerOutput&, const GrammarBitmaskFuture&) {
  ReplyHeader h;
  Status s = comm_.recv(&h, sizeof(h), source_);
  if (!s.ok()) return unavailable("model rank 0 did not answer the step: " + s.message());
  if (h.magic != kReplyMagic || (h.kind != kOutput && h.kind != kError) || h.bytes > kMaxReplyBytes)
    return data_loss("model rank 0 answered the step with a corrupt header");
  message_.resize(h.bytes);
  if (h.bytes != 0) {
    s = comm_.recv(message_.data(), message_.size(), source_);
    if (!s.ok()) return unavailable("model rank 0's answer to the step was cut off: " + s.message());
  }
  if (h.kind == kError) {
    const StatusCode code = h.code > 0 && h.code <= static_cast<int32_t>(StatusCode::kCancelled)
                                ? static_cast<StatusCode>(h.code)
                                : StatusCode::kInternal;
    return Status(code, "model rank 0: " + std::string(message_.begin(), message_.end()));
  }
  return decode_runner_output(message_.data(), message_.size());
}

ReplyingWorker::ReplyingWorker(dist::Communicator& comm, int dest, std::unique_ptr<Worker> local)
    : comm_(comm), dest_(dest), local_(std::move(local)) {}

StepResult ReplyingWorker::execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) {
  StepResult r = local_->execute_model(so, bitmask);
  Status sent;
  if (r.ok()) {
    encode_runner_output(*r, message_);
    sent = send_reply(comm_, dest_, kOutput, 0, message_.data(), message_.size());
  } else {
    const std::string& why = r.status().message();
    sent = send_reply(comm_, dest_, kError, static_cast<int32_t>(r.status().code()),
                      reinterpret_cast<const uint8_t*>(why.data()), why.size());
  }
  if (!sent.ok() && r.ok()) return sent;
  return r;
}

ModelRankInfoSender::ModelRankInfoSender(dist::Communicator& comm, int dest, std::chrono::milliseconds interval)
    : comm_(comm), dest_(dest) {
  thread_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      if (wake_.wait_for(lock, interval, [this] { return done_; })) break;
      InfoMessage loading;
      loading.magic = kLoadingMagic;
      Status s = comm_.send(&loading, sizeof(loading), dest_);
      if (!s.ok()) {
        failed_ = s;
        return;
      }
    }
  });
}

ModelRankInfoSender::~ModelRankInfoSender() { stop(); }

void ModelRankInfoSender::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status ModelRankInfoSender::send(const ModelRankInfo& info) {
  stop();
  if (!failed_.ok()) return failed_;
  InfoMessage m;
  m.magic = kInfoMagic;
  m.num_kv_blocks = info.num_kv_blocks;
  m.max_model_len = info.max_model_len;
  return comm_.send(&m, sizeof(m), dest_);
}

StatusOr<ModelRankInfo> recv_model_rank_info(dist::Communicator& comm, int source) {
  InfoMessage m;
  do {
    KVASIR_RETURN_IF_ERROR(comm.recv(&m, sizeof(m), source));
  } while (m.magic == kLoadingMagic);
  if (m.magic != kInfoMagic || m.num_kv_blocks <= 0 || m.max_model_len <= 0)
    return data_loss("model rank 0 sent a corrupt setup message");
  return ModelRankInfo{m.num_kv_blocks, m.max_model_len};
}

}  // namespace kvasir
