#include "backend/cuda/step_queue.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "common/log.h"

namespace kvasir::cuda {
namespace {

constexpr size_t kInitialArena = size_t{4} << 20;
constexpr size_t kAlign = 16;

}  // namespace

StepQueue::StepQueue(cudaStream_t stream, ExecuteFn fn, void* ctx, bool enable_graphs, int max_graphs, bool profile)
    : stream_(stream), fn_(fn), ctx_(ctx), enable_graphs_(enable_graphs), max_graphs_(max_graphs), profile_(profile) {
  KVASIR_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_arena_), kInitialArena));
  host_cap_ = kInitialArena;
  ensure_device_arena(kInitialArena);
  for (StepEvents& e : slots_) {
    KVASIR_CUDA_CHECK(cudaEventCreate(&e.start));
    KVASIR_CUDA_CHECK(cudaEventCreate(&e.end));
  }
  KVASIR_CUDA_CHECK(cudaEventCreateWithFlags(&arena_copied_, cudaEventDisableTiming));
  ops_.reserve(1024);
  staged_.reserve(64);
}

StepQueue::~StepQueue() {
  clear_graphs();
  if (host_arena_ != nullptr) cudaFreeHost(host_arena_);
  if (dev_arena_ != nullptr) cudaFree(dev_arena_);
  for (StepEvents& e : slots_) {
    if (e.start != nullptr) cudaEventDestroy(e.start);
    if (e.end != nullptr) cudaEventDestroy(e.end);
  }
  if (arena_copied_ != nullptr) cudaEventDestroy(arena_copied_);
  for (cudaEvent_t e : prof_events_) cudaEventDestroy(e);
}

void StepQueue::clear_graphs() {
  for (auto& [sig, list] : graphs_) {
    for (Graph& g : list) cudaGraphExecDestroy(g.exec);
  }
  graphs_.clear();
  sightings_.clear();
  num_graphs_ = 0;
}

void StepQueue::ensure_device_arena(size_t bytes) {
  if (bytes <= dev_cap_) return;
  // Captured graphs point into the old arena: they go with it.
  KVASIR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  clear_graphs();
  if (dev_arena_ != nullptr) KVASIR_CUDA_CHECK(cudaFree(dev_arena_));
  size_t cap = std::max(bytes, dev_cap_ * 2);
  KVASIR_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dev_arena_), cap));
  dev_cap_ = cap;
}

OpRecord& StepQueue::add(OpKind kind, bool graphable) {
  ops_.emplace_back();
  OpRecord& r = ops_.back();
  std::memset(&r, 0, sizeof(r));
  r.kind = kind;
  graphable_ = graphable_ && graphable;
  return r;
}

OpRecord& StepQueue::insert(size_t at, OpKind kind, bool graphable) {
  KVASIR_CHECK(at <= ops_.size());
  OpRecord& r = *ops_.emplace(ops_.begin() + static_cast<std::ptrdiff_t>(at));
  std::memset(&r, 0, sizeof(r));
  r.kind = kind;
  graphable_ = graphable_ && graphable;
  return r;
}

int64_t StepQueue::stage(const void* host, size_t bytes, uint64_t version) {
  // A new step reuses the arena from its start: the step before (overlapped, so maybe not yet
  // waited for) must have copied it out first. Its copy leads that step, so this rarely waits.
  if (used_ == 0 && arena_in_flight_) {
    KVASIR_CUDA_CHECK(cudaEventSynchronize(arena_copied_));
    arena_in_flight_ = false;
  }
  // The same (pointer, size) staged earlier in this step is the same array (the backend's contract:
  // host inputs stay unchanged until the next read-back), so a block table read by every layer is
  // copied once. Small arrays are also compared, and copied again if they differ: a freed array
  // whose address a new one of the same size took, or one refilled between two ops, must not
  // hand an op the earlier contents (an EAGLE head's pass once read the target's positions as its
  // row indices that way). Large ones (block tables) keep the contract unchecked: comparing them
  // would cost what copying them does; arrays the backend refills itself (a plan cache re-planning
  // an entry in place) come with a version instead, equal only for the same contents.
  for (auto it = staged_.rbegin(); it != staged_.rend(); ++it) {
    if (it->host != host || it->bytes != bytes) continue;
    if (it->version == version &&
        (version != 0 || bytes > kComparedStageBytes || std::memcmp(host_arena_ + it->offset, host, bytes) == 0)) {
      return it->offset;
    }
    break;  // changed: copy it again below (later lookups find the newer copy first)
  }
  const size_t off = (used_ + kAlign - 1) / kAlign * kAlign;
  if (off + bytes > host_cap_) {
    // Grow the pinned arena; only happens until the largest step has been seen.
    size_t cap = std::max(off + bytes, host_cap_ * 2);
    uint8_t* bigger = nullptr;
    KVASIR_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&bigger), cap));
    // A submitted part of this step may still be copying out of the old arena.
    if (copied_ > 0) KVASIR_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(bigger, host_arena_, used_);
    KVASIR_CUDA_CHECK(cudaFreeHost(host_arena_));
    host_arena_ = bigger;
    host_cap_ = cap;
  }
  if (bytes > 0) std::memcpy(host_arena_ + off, host, bytes);
  used_ = off + bytes;
  staged_.push_back({host, bytes, version, static_cast<int64_t>(off)});
  return static_cast<int64_t>(off);
}

uint64_t StepQueue::signature() const {
  const auto* w = reinterpret_cast<const uint64_t*>(ops_.data());
  const size_t words = ops_.size() * sizeof(OpRecord) / sizeof(uint64_t);
  uint64_t h = 0xcbf29ce484222325ull ^ ops_.size();
  for (size_t i = 0; i < words; ++i) {
    h ^= w[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

void StepQueue::run_eager(const uint8_t* arena) {
  if (!profile_) {
    for (const OpRecord& op : ops_) fn_(ctx_, op, arena, stream_);
    return;
  }
  const size_t base = prof_pending_.size() * 2;
  while (prof_events_.size() < base + ops_.size() * 2) {
    cudaEvent_t e;
    KVASIR_CUDA_CHECK(cudaEventCreate(&e));
    prof_events_.push_back(e);
  }
  for (size_t i = 0; i < ops_.size(); ++i) {
    KVASIR_CUDA_CHECK(cudaEventRecord(prof_events_[base + 2 * i], stream_));
    fn_(ctx_, ops_[i], arena, stream_);
    KVASIR_CUDA_CHECK(cudaEventRecord(prof_events_[base + 2 * i + 1], stream_));
    prof_pending_.push_back(ops_[i].kind);
  }
}

std::string StepQueue::profile_report() const {
  static const char* kNames[] = {"embedding", "linear(cuBLASLt/gemv)", "gemv(multi)", "gemv(gate/up)", "rms_norm",
                                 "add_rms_norm", "add", "rope", "write_kv", "rope+write_kv", "attention(decode)",
                                 "attention(prefill)", "gated_act", "softcap", "gather_rows", "sample", "verify_drafts", "token_bitmask",
                                 "moe_route", "moe_experts", "write_latent_kv", "mla_attention", "all_reduce", "all_gather_columns",
                                 "fp8_linear", "gguf_linear(gemv/dequant+cuBLASLt)", "w4a16_linear",
                                 "l2_prefetch"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(OpKind::kNumKinds), "one name per kind");
  if (!profile_) return {};
  std::string out = "profile (device ms, calls):";
  char buf[128];
  for (int i = 0; i < static_cast<int>(OpKind::kNumKinds); ++i) {
    if (prof_count_[i] == 0) continue;
    std::snprintf(buf, sizeof(buf), " %s=%.1f(%lld)", kNames[i], prof_ms_[i], static_cast<long long>(prof_count_[i]));
    out += buf;
  }
  return out;
}

bool StepQueue::capture(uint64_t sig, const uint8_t* arena) {
  KVASIR_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  run_eager(arena);
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    KVASIR_LOG_WARN("CUDA graph capture failed (%s); running eagerly from now on", cudaGetErrorString(err));
    enable_graphs_ = false;
    return false;
  }
  graphs_[sig].push_back(Graph{ops_, exec});
  ++num_graphs_;
  ++stats_.captures;
  KVASIR_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  return true;
}

bool StepQueue::flush() { return launch(/*end_of_step=*/true); }
bool StepQueue::submit() { return launch(/*end_of_step=*/false); }

bool StepQueue::launch(bool end_of_step) {
  if (ops_.empty()) {
    if (end_of_step) used_ = copied_ = 0, staged_.clear();
    return false;
  }
  const size_t cap_before = dev_cap_;
  ensure_device_arena(std::max<size_t>(used_, 1));
  if (dev_cap_ != cap_before) copied_ = 0;  // a new device arena holds nothing yet
  if (!step_open_) {
    while (next_ticket_ - completed_ >= kMaxEnded) complete_one();
    KVASIR_CUDA_CHECK(cudaEventRecord(slots_[next_ticket_ % kSlots].start, stream_));
  }
  if (used_ > copied_) {
    KVASIR_CUDA_CHECK(cudaMemcpyAsync(dev_arena_ + copied_, host_arena_ + copied_, used_ - copied_,
                                      cudaMemcpyHostToDevice, stream_));
    KVASIR_CUDA_CHECK(cudaEventRecord(arena_copied_, stream_));
    arena_in_flight_ = true;
  }
  const uint8_t* arena = dev_arena_;
  bool ran_graph = false;
  if (enable_graphs_ && graphable_ && !profile_) {
    const uint64_t sig = signature();
    auto it = graphs_.find(sig);
    if (it != graphs_.end()) {
      for (const Graph& g : it->second) {
        if (g.ops.size() == ops_.size() && std::memcmp(g.ops.data(), ops_.data(), ops_.size() * sizeof(OpRecord)) == 0) {
          KVASIR_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
          ran_graph = true;
          break;
        }
      }
    }
    if (!ran_graph) {
      int& seen = sightings_[sig];
      ++seen;
      // The first sighting runs eagerly, so lazily created state (GEMM plans) exists before capture.
      if (seen >= 2 && num_graphs_ < max_graphs_) ran_graph = capture(sig, arena);
    }
  }
  if (!ran_graph) run_eager(arena);
  step_is_graph_ = (step_open_ ? step_is_graph_ : true) && ran_graph;
  step_open_ = true;
  ops_.clear();
  graphable_ = true;
  if (end_of_step) {
    staged_.clear();
    used_ = copied_ = 0;
  } else {
    copied_ = used_;  // staged offsets stay valid: the rest of the step may still refer to them
  }
  return true;
}

uint64_t StepQueue::end_step() {
  if (!step_open_) return next_ticket_ == 0 ? 0 : next_ticket_ - 1;
  StepEvents& e = slots_[next_ticket_ % kSlots];
  KVASIR_CUDA_CHECK(cudaEventRecord(e.end, stream_));
  e.is_graph = step_is_graph_;
  step_open_ = false;
  return next_ticket_++;
}

void StepQueue::complete(uint64_t ticket) {
  while (completed_ <= ticket && completed_ < next_ticket_) complete_one();
}

// Waits for the oldest ended step and adds its device time (and the idle time before it) to the stats.
void StepQueue::complete_one() {
  const uint64_t t = completed_;
  const StepEvents& e = slots_[t % kSlots];
  KVASIR_CUDA_CHECK(cudaEventSynchronize(e.end));
  float busy = 0.0f;
  KVASIR_CUDA_CHECK(cudaEventElapsedTime(&busy, e.start, e.end));
  ++stats_.steps;
  stats_.busy_ms += busy;
  if (e.is_graph) {
    ++stats_.graph_steps;
    stats_.graph_busy_ms += busy;
  }
  if (t > 0) {
    // The step before ended in the slot behind; no step has reused it (see kSlots).
    float idle = 0.0f;
    KVASIR_CUDA_CHECK(cudaEventElapsedTime(&idle, slots_[(t - 1) % kSlots].end, e.start));
    stats_.idle_ms += idle;
    if (e.is_graph && prev_was_graph_) stats_.graph_idle_ms += idle;
  }
  prev_was_graph_ = e.is_graph;
  ++completed_;
}

void StepQueue::finish() {
  end_step();
  while (completed_ < next_ticket_) complete_one();
  // Copies enqueued while no step was open are behind no event.
  KVASIR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < prof_pending_.size(); ++i) {
    float ms = 0.0f;
    KVASIR_CUDA_CHECK(cudaEventElapsedTime(&ms, prof_events_[2 * i], prof_events_[2 * i + 1]));
    prof_ms_[static_cast<int>(prof_pending_[i])] += ms;
    ++prof_count_[static_cast<int>(prof_pending_[i])];
  }
  prof_pending_.clear();
}

}  // namespace kvasir::cuda
