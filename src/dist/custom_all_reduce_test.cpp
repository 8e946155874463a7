// The custom all-reduce and the DeviceCommunicator on the GPUs this machine has: every size class
// (one-shot, two-shot, the largest message, element-wise tails and an unaligned output) in f32 and
// bf16, and the all-gather, at world size 1 and, in forked processes over an shm bootstrap, at
// 2..8 ranks when there are that many GPUs; a capture of several calls into a CUDA graph replayed
// with new inputs; the DeviceCommunicator's NCCL path above the custom buffer's size. Inputs have
// full mantissas: the kernels sum in rank order, so results must equal the host's rank-order sum
// bit for bit. Skips, loudly, without a GPU. Every CUDA call happens in a forked child.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/communicator_test_util.h"
#include "dist/custom_all_reduce.h"
#include "dist/device_communicator.h"
#include "dist/rank_order_sum.h"
#include "dist/shm_communicator.h"

namespace kvasir::dist {
namespace {

int device_count() {
  const auto codes = testing::run_ranks(1, [](int) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? std::min(n, 100) : 0;
  });
  return codes[0] >= 0 && codes[0] <= 100 ? codes[0] : 0;
}

#define RANK_CUDA(expr)                                                                       \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    RANK_CHECK(e_ == cudaSuccess, "%s failed: %s", #expr, cudaGetErrorString(e_));            \
  } while (0)

constexpr size_t kMaxBytes = size_t{1} << 20;
constexpr size_t kOneShotMax = size_t{64} << 10;

// Rank r's input bytes for a call of `count` elements (salt tells calls apart).
std::vector<uint8_t> input_bytes(int r, size_t count, DType dtype, uint64_t salt) {
  const size_t elem = reduce_element_bytes(dtype);
  std::vector<uint8_t> out(count * elem);
  for (size_t i = 0; i < count; ++i) {
    const float v = testing::input_value(r, i, salt);
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const uint16_t b = f32_to_bf16(v);
      std::memcpy(out.data() + i * 2, &b, 2);
    }
  }
  return out;
}

// The host's rank-order sum of every rank's input.
std::vector<uint8_t> expected_sum(int n, size_t count, DType dtype, uint64_t salt) {
  std::vector<std::vector<uint8_t>> in;
  std::vector<const void*> ptrs;
  for (int r = 0; r < n; ++r) in.push_back(input_bytes(r, count, dtype, salt));
  for (auto& v : in) ptrs.push_back(v.data());
  std::vector<uint8_t> out(count * reduce_element_bytes(dtype));
  sum_in_rank_order(ptrs.data(), n, out.data(), count, dtype);
  return out;
}

struct Call {
  size_t count;
  DType dtype;
  size_t offset_bytes;  // the output's offset into its allocation (unaligned outputs)
  CustomAllReduce::Algorithm algorithm;
};

std::vector<Call> size_classes() {
  using A = CustomAllReduce::Algorithm;
  std::vector<Call> calls;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const size_t e = reduce_element_bytes(dt);
    calls.push_back({1, dt, 0, A::kOneShot});                        // one element (element-wise path)
    calls.push_back({7, dt, 0, A::kOneShot});                        // a tail shorter than a pack
    calls.push_back({4096, dt, 0, A::kOneShot});                     // whole 16-byte packs
    calls.push_back({4096, dt, e, A::kOneShot});                     // packs, output not 16-aligned
    calls.push_back({kOneShotMax / e, dt, 0, A::kOneShot});          // the largest one-shot
    calls.push_back({kOneShotMax / e + 8, dt, 0, A::kTwoShot});      // the smallest two-shot in packs
    calls.push_back({kOneShotMax / e + 8, dt, e, A::kTwoShot});      // two-shot, unaligned output
    calls.push_back({100003, dt, 0, A::kTwoShot});                   // two-shot element-wise (odd)
    calls.push_back({kMaxBytes / e, dt, 0, A::kTwoShot});            // the whole buffer
  }
  return calls;
}

// A host-to-device copy that has landed: cudaMemcpy from pageable memory may return before its
// DMA finishes, and the calls below run on non-blocking streams that do not wait for it.
cudaError_t upload(void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { cudaMalloc(&p, std::max<size_t>(bytes, 16)); }
  ~DeviceBuffer() { cudaFree(p); }
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(p) + off; }
};

std::unique_ptr<ShmCommunicator> bootstrap_for(int rank, int n, const std::string& group) {
  if (n == 1) return nullptr;
  ShmCommunicatorOptions so;
  so.group_id = group;
  so.rank = rank;
  so.world_size = n;
  auto b = ShmCommunicator::create(so);
  if (!b.ok()) {
    std::fprintf(stderr, "rank %d: bootstrap: %s\n", rank, b.status().to_string().c_str());
    return nullptr;
  }
  return std::move(b).value();
}

// Every size class, twice (the flag counters must carry over), and the all-gather.
int every_size_class(int rank, int n, const std::string& group) {
  RANK_CUDA(cudaSetDevice(rank));
  auto boot = bootstrap_for(rank, n, group);
  RANK_CHECK(n == 1 || boot != nullptr, "no bootstrap");
  CustomAllReduceOptions o;
  o.rank = rank;
  o.world_size = n;
  o.device = rank;
  o.max_bytes = kMaxBytes;
  o.one_shot_max_bytes = kOneShotMax;
  auto c = CustomAllReduce::create(o, boot.get());
  RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
  CustomAllReduce& car = **c;
  cudaStream_t stream;
  RANK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer d(kMaxBytes + 64);
  uint64_t salt = 1;
  for (int round = 0; round < 2; ++round) {
    for (const Call& call : size_classes()) {
      const size_t bytes = call.count * reduce_element_bytes(call.dtype);
      RANK_CHECK(car.algorithm_for(bytes) == call.algorithm, "%zu bytes: unexpected algorithm", bytes);
      const auto in = input_bytes(rank, call.count, call.dtype, salt);
      const auto want = expected_sum(n, call.count, call.dtype, salt);
      ++salt;
      RANK_CUDA(upload(d.at(call.offset_bytes), in.data(), bytes));
      RANK_OK(car.all_reduce_sum(d.at(call.offset_bytes), call.count, call.dtype, stream));
      RANK_CUDA(cudaStreamSynchronize(stream));
      std::vector<uint8_t> got(bytes);
      RANK_CUDA(cudaMemcpy(got.data(), d.at(call.offset_bytes), bytes, cudaMemcpyDeviceToHost));
      RANK_CHECK(got == want, "%s all-reduce of %zu elements (offset %zu) differs from the rank-order sum",
                 std::string(dtype_name(call.dtype)).c_str(), call.count, call.offset_bytes);
    }
  }
  RANK_CHECK(car.algorithm_for(kMaxBytes + 4) == CustomAllReduce::Algorithm::kNone, "oversize message accepted");
  RANK_CHECK(car.all_reduce_sum(d.p, kMaxBytes / 4 + 1, DType::kF32, stream).code() == StatusCode::kInvalidArgument,
             "oversize all-reduce accepted");
  RANK_CHECK(car.all_reduce_sum(d.p, 8, DType::kI32, stream).code() == StatusCode::kInvalidArgument,
             "int32 all-reduce accepted");

  for (size_t bytes : {size_t{12345}, size_t{4096} * 16, kMaxBytes}) {
    DeviceBuffer send(bytes), recv(bytes * n);
    std::vector<uint8_t> mine(bytes);
    for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<uint8_t>(i * 31 + rank * 7);
    RANK_CUDA(upload(send.p, mine.data(), bytes));
    RANK_OK(car.all_gather(send.p, recv.p, bytes, stream));
    RANK_CUDA(cudaStreamSynchronize(stream));
    std::vector<uint8_t> all(bytes * n);
    RANK_CUDA(cudaMemcpy(all.data(), recv.p, bytes * n, cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < bytes; ++i)
        RANK_CHECK(all[r * bytes + i] == static_cast<uint8_t>(i * 31 + r * 7), "all_gather of %zu bytes: rank %d's byte %zu",
                   bytes, r, i);
  }
  cudaStreamDestroy(stream);
  return 0;
}

// A one-shot f32, a two-shot bf16 and an all-gather captured into one graph, replayed three times
// with new inputs each time.
int graph_replay(int rank, int n, const std::string& group) {
  RANK_CUDA(cudaSetDevice(rank));
  auto boot = bootstrap_for(rank, n, group);
  RANK_CHECK(n == 1 || boot != nullptr, "no bootstrap");
  CustomAllReduceOptions o;
  o.rank = rank;
  o.world_size = n;
  o.device = rank;
  o.max_bytes = kMaxBytes;
  o.one_shot_max_bytes = kOneShotMax;
  auto c = CustomAllReduce::create(o, boot.get());
  RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
  CustomAllReduce& car = **c;
  cudaStream_t stream;
  RANK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t small = 2048, medium = 300000, gather_bytes = 5000;
  DeviceBuffer a(small * 4), b(medium * 2), send(gather_bytes), recv(gather_bytes * n);
  // One eager call first, so the graph starts from counters that are already past zero.
  RANK_OK(car.all_reduce_sum(a.p, small, DType::kF32, stream));
  RANK_CUDA(cudaStreamSynchronize(stream));

  cudaGraph_t graph;
  RANK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  RANK_OK(car.all_reduce_sum(a.p, small, DType::kF32, stream));
  RANK_OK(car.all_reduce_sum(b.p, medium, DType::kBF16, stream));
  RANK_OK(car.all_gather(send.p, recv.p, gather_bytes, stream));
  RANK_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  RANK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (uint64_t replay = 0; replay < 3; ++replay) {
    const uint64_t salt = 1000 + replay * 2;
    const auto in_a = input_bytes(rank, small, DType::kF32, salt);
    const auto in_b = input_bytes(rank, medium, DType::kBF16, salt + 1);
    std::vector<uint8_t> mine(gather_bytes);
    for (size_t i = 0; i < gather_bytes; ++i) mine[i] = static_cast<uint8_t>(i + rank * 13 + replay);
    RANK_CUDA(upload(a.p, in_a.data(), in_a.size()));
    RANK_CUDA(upload(b.p, in_b.data(), in_b.size()));
    RANK_CUDA(upload(send.p, mine.data(), gather_bytes));
    RANK_CUDA(cudaGraphLaunch(exec, stream));
    RANK_CUDA(cudaStreamSynchronize(stream));
    std::vector<uint8_t> got_a(in_a.size()), got_b(in_b.size()), all(gather_bytes * n);
    RANK_CUDA(cudaMemcpy(got_a.data(), a.p, got_a.size(), cudaMemcpyDeviceToHost));
    RANK_CUDA(cudaMemcpy(got_b.data(), b.p, got_b.size(), cudaMemcpyDeviceToHost));
    RANK_CUDA(cudaMemcpy(all.data(), recv.p, all.size(), cudaMemcpyDeviceToHost));
    RANK_CHECK(got_a == expected_sum(n, small, DType::kF32, salt), "replay %d: one-shot f32 differs", (int)replay);
    RANK_CHECK(got_b == expected_sum(n, medium, DType::kBF16, salt + 1), "replay %d: two-shot bf16 differs", (int)replay);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < gather_bytes; ++i)
        RANK_CHECK(all[r * gather_bytes + i] == static_cast<uint8_t>(i + r * 13 + replay), "replay %d: gather differs",
                   (int)replay);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return 0;
}

// The DeviceCommunicator: small messages on the custom kernels, larger ones on NCCL. The NCCL
// inputs are small integers, so NCCL's summation order gives the exact result too.
int device_communicator(int rank, int n, const std::string& group) {
  RANK_CUDA(cudaSetDevice(rank));
  auto boot = bootstrap_for(rank, n, group);
  RANK_CHECK(n == 1 || boot != nullptr, "no bootstrap");
  DeviceCommunicatorOptions o;
  o.rank = rank;
  o.world_size = n;
  o.device = rank;
  o.custom_max_bytes = 64 << 10;
  auto c = DeviceCommunicator::create(o, boot.get());
  RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
  DeviceCommunicator& dc = **c;
  RANK_CHECK(dc.has_custom_all_reduce(), "no custom all-reduce");
  RANK_CHECK(dc.capturable_all_reduce(64 << 10) && !dc.capturable_all_reduce((64 << 10) + 4), "size split");
  cudaStream_t stream;
  RANK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (size_t count : {size_t{1000}, size_t{200001}}) {  // custom, then NCCL
    std::vector<float> h(count), want(count), got(count);
    for (size_t i = 0; i < count; ++i) {
      h[i] = static_cast<float>((i * 7 + rank * 3) % 200) - 100.0f;
      want[i] = 0;
      for (int r = 0; r < n; ++r) want[i] += static_cast<float>((i * 7 + r * 3) % 200) - 100.0f;
    }
    DeviceBuffer d(count * 4);
    RANK_CUDA(upload(d.p, h.data(), count * 4));
    RANK_OK(dc.all_reduce_sum(d.p, count, DType::kF32, stream));
    RANK_CUDA(cudaStreamSynchronize(stream));
    RANK_CUDA(cudaMemcpy(got.data(), d.p, count * 4, cudaMemcpyDeviceToHost));
    RANK_CHECK(got == want, "all-reduce of %zu floats differs", count);
  }
  for (size_t bytes : {size_t{1000}, size_t{100000}}) {  // custom, then NCCL
    DeviceBuffer send(bytes), recv(bytes * n);
    std::vector<uint8_t> mine(bytes, static_cast<uint8_t>(rank + 1)), all(bytes * n);
    RANK_CUDA(upload(send.p, mine.data(), bytes));
    RANK_OK(dc.all_gather(send.p, recv.p, bytes, stream));
    RANK_CUDA(cudaStreamSynchronize(stream));
    RANK_CUDA(cudaMemcpy(all.data(), recv.p, bytes * n, cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < bytes; ++i) RANK_CHECK(all[r * bytes + i] == r + 1, "all_gather of %zu bytes differs", bytes);
  }
  cudaStreamDestroy(stream);
  return 0;
}

// Rank 1 sets up and then never joins the all-reduce: rank 0's kernel must trap after its
// timeout, failing the stream instead of spinning forever.
int missing_peer(int rank, int n, const std::string& group) {
  RANK_CUDA(cudaSetDevice(rank));
  auto boot = bootstrap_for(rank, n, group);
  RANK_CHECK(boot != nullptr, "no bootstrap");
  CustomAllReduceOptions o;
  o.rank = rank;
  o.world_size = n;
  o.device = rank;
  o.max_bytes = kMaxBytes;
  o.timeout_ms = 2000;
  auto c = CustomAllReduce::create(o, boot.get());
  RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
  if (rank == 0) {
    cudaStream_t stream;
    RANK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    DeviceBuffer d(4096);
    RANK_OK((*c)->all_reduce_sum(d.p, 1024, DType::kF32, stream));
    const cudaError_t e = cudaStreamSynchronize(stream);
    RANK_CHECK(e != cudaSuccess, "an all-reduce without its peer completed");
    std::fprintf(stderr, "rank 0: the all-reduce without its peer failed as it should: %s\n", cudaGetErrorString(e));
  }
  // Keeps rank 1's buffer mapped until rank 0 is done; a broken CUDA context does not matter here.
  Status s = boot->barrier();
  RANK_CHECK(s.ok(), "barrier: %s", s.to_string().c_str());
  std::fflush(nullptr);
  _exit(0);  // rank 0's CUDA context is broken: skip the destructors' CUDA calls
}

using Body = int (*)(int, int, const std::string&);

void run_on(int n, Body body, const char* what) {
  const std::string group = std::string("car-test-") + std::to_string(getpid()) + "-" + what;
  const auto codes = testing::run_ranks(n, [&](int rank) { return body(rank, n, group); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << what << ", world size " << n << ", rank " << r;
}

bool have_gpu() {
  if (device_count() >= 1) return true;
  std::fprintf(stderr, "\n*** SKIPPED: no CUDA device here; CustomAllReduceTest runs on the GPU machine ***\n\n");
  return false;
}

TEST(CustomAllReduceTest, EverySizeClassAtWorldSizeOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_on(1, every_size_class, "sizes");
}

TEST(CustomAllReduceTest, GraphCaptureAndReplayAtWorldSizeOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_on(1, graph_replay, "graph");
}

TEST(CustomAllReduceTest, DeviceCommunicatorCustomAndNcclAtWorldSizeOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_on(1, device_communicator, "devcomm");
}

TEST(CustomAllReduceTest, AcrossTwoToAllGpus) {
  const int gpus = std::min(device_count(), CustomAllReduce::kMaxRanks);
  if (gpus < 2) {
    std::fprintf(stderr, "\n*** SKIPPED: %d CUDA device(s); the multi-GPU custom all-reduce test needs 2 or more ***\n\n",
                 gpus);
    GTEST_SKIP() << "fewer than 2 CUDA devices";
  }
  for (int n = 2; n <= gpus; ++n) {
    run_on(n, every_size_class, "sizes");
    run_on(n, graph_replay, "graph");
    run_on(n, device_communicator, "devcomm");
  }
}

TEST(CustomAllReduceTest, AMissingPeerFailsTheKernelInsteadOfHanging) {
  const int gpus = device_count();
  if (gpus < 2) {
    std::fprintf(stderr, "\n*** SKIPPED: %d CUDA device(s); the missing-peer test needs 2 ***\n\n", gpus);
    GTEST_SKIP() << "fewer than 2 CUDA devices";
  }
  run_on(2, missing_peer, "missing");
}

}  // namespace
}  // namespace kvasir::dist
