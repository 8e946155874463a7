// The NCCL communicator on the GPUs this machine has: every op at world size 1 (one GPU), and at
// world size 2-4 in forked processes when there are that many GPUs, bootstrapped over the shm
// communicator. Values are small integers, so any summation order gives the exact result. Skips,
// loudly, without a GPU. Every CUDA call happens in a forked child: a parent that had initialized
// CUDA could not fork ranks that use it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/communicator_test_util.h"
#include "dist/nccl_communicator.h"
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

// A device buffer for one rank's test.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { cudaMalloc(&p, bytes == 0 ? 16 : bytes); }
  ~DeviceBuffer() { cudaFree(p); }
};

int every_op(int rank, int n, const std::string& group) {
  std::unique_ptr<ShmCommunicator> boot;
  if (n > 1) {
    ShmCommunicatorOptions so;
    so.group_id = group;
    so.rank = rank;
    so.world_size = n;
    auto b = ShmCommunicator::create(so);
    RANK_CHECK(b.ok(), "bootstrap: %s", b.status().to_string().c_str());
    boot = std::move(b).value();
  }
  NcclCommunicatorOptions o;
  o.rank = rank;
  o.world_size = n;
  o.device = rank;
  auto c = NcclCommunicator::create(o, boot.get());
  RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
  Communicator& comm = **c;

  const size_t count = 1000003;  // odd, and several MiB
  std::vector<float> h(count), expect(count);
  for (size_t i = 0; i < count; ++i) {
    h[i] = static_cast<float>((i * 7 + rank * 3) % 200) - 100.0f;
    expect[i] = 0;
    for (int r = 0; r < n; ++r) expect[i] += static_cast<float>((i * 7 + r * 3) % 200) - 100.0f;
  }
  DeviceBuffer d(count * 4);
  cudaMemcpy(d.p, h.data(), count * 4, cudaMemcpyHostToDevice);
  RANK_OK(comm.all_reduce_sum(d.p, count, DType::kF32));
  std::vector<float> got(count);
  cudaMemcpy(got.data(), d.p, count * 4, cudaMemcpyDeviceToHost);
  RANK_CHECK(std::memcmp(got.data(), expect.data(), count * 4) == 0, "f32 all_reduce differs");

  std::vector<uint16_t> hb(count), eb(count), gb(count);
  for (size_t i = 0; i < count; ++i) {
    hb[i] = f32_to_bf16(h[i]);
    eb[i] = f32_to_bf16(expect[i]);
  }
  cudaMemcpy(d.p, hb.data(), count * 2, cudaMemcpyHostToDevice);
  RANK_OK(comm.all_reduce_sum(d.p, count, DType::kBF16));
  cudaMemcpy(gb.data(), d.p, count * 2, cudaMemcpyDeviceToHost);
  RANK_CHECK(gb == eb, "bf16 all_reduce differs");

  const size_t bytes = 12345;
  DeviceBuffer gsend(bytes), grecv(bytes * n);
  std::vector<uint8_t> mine(bytes, static_cast<uint8_t>(rank + 1)), all(bytes * n);
  cudaMemcpy(gsend.p, mine.data(), bytes, cudaMemcpyHostToDevice);
  RANK_OK(comm.all_gather(gsend.p, grecv.p, bytes));
  cudaMemcpy(all.data(), grecv.p, bytes * n, cudaMemcpyDeviceToHost);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < bytes; ++i) RANK_CHECK(all[r * bytes + i] == r + 1, "all_gather byte differs");

  const size_t per = 777;
  std::vector<float> rs_in(per * n), rs_out(per);
  for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(i % 13 + rank);
  DeviceBuffer rsd(per * n * 4), rso(per * 4);
  cudaMemcpy(rsd.p, rs_in.data(), per * n * 4, cudaMemcpyHostToDevice);
  RANK_OK(comm.reduce_scatter_sum(rsd.p, rso.p, per, DType::kF32));
  cudaMemcpy(rs_out.data(), rso.p, per * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < per; ++i) {
    float e = 0;
    for (int r = 0; r < n; ++r) e += static_cast<float>((rank * per + i) % 13 + r);
    RANK_CHECK(rs_out[i] == e, "reduce_scatter element %zu differs", i);
  }

  for (int root = 0; root < n; ++root) {
    std::vector<uint8_t> b(bytes, static_cast<uint8_t>(rank == root ? 0xa0 + root : 0));
    cudaMemcpy(gsend.p, b.data(), bytes, cudaMemcpyHostToDevice);
    RANK_OK(comm.broadcast(gsend.p, bytes, root));
    cudaMemcpy(b.data(), gsend.p, bytes, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < bytes; ++i) RANK_CHECK(b[i] == 0xa0 + root, "broadcast from %d differs", root);
  }
  if (n > 1) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<uint8_t> out(bytes, static_cast<uint8_t>(rank)), in(bytes);
    cudaMemcpy(gsend.p, out.data(), bytes, cudaMemcpyHostToDevice);
    // Even ranks send first, odd ranks receive first: NCCL's send and recv block on each other.
    if (rank % 2 == 0) {
      RANK_OK(comm.send(gsend.p, bytes, next));
      RANK_OK(comm.recv(grecv.p, bytes, prev));
    } else {
      RANK_OK(comm.recv(grecv.p, bytes, prev));
      RANK_OK(comm.send(gsend.p, bytes, next));
    }
    cudaMemcpy(in.data(), grecv.p, bytes, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < bytes; ++i) RANK_CHECK(in[i] == prev, "recv from %d differs", prev);
  }
  RANK_CHECK(comm.send(gsend.p, 1, rank).code() == StatusCode::kInvalidArgument, "send to self accepted");
  RANK_OK(comm.barrier());
  return 0;
}

TEST(NcclCommunicatorTest, EveryOpAtWorldSizeOne) {
  if (device_count() < 1) {
    std::fprintf(stderr, "\n*** SKIPPED: no CUDA device here; NcclCommunicatorTest runs on the GPU machine ***\n\n");
    GTEST_SKIP() << "no CUDA device";
  }
  const auto codes = testing::run_ranks(1, [](int rank) { return every_op(rank, 1, ""); });
  EXPECT_EQ(codes[0], 0);
}

TEST(NcclCommunicatorTest, EveryOpAcrossAllGpusUpToFour) {
  const int n = std::min(device_count(), 4);
  if (n < 2) {
    std::fprintf(stderr, "\n*** SKIPPED: %d CUDA device(s); the multi-GPU NCCL test needs 2 or more ***\n\n", n);
    GTEST_SKIP() << "fewer than 2 CUDA devices";
  }
  const std::string group = "nccl-test-" + std::to_string(getpid());
  const auto codes = testing::run_ranks(n, [&](int rank) { return every_op(rank, n, group); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
}  // namespace kvasir::dist
