// The custom all-reduce's kernels (custom_all_reduce.cu) and the layout of each rank's shared
// buffer, which both the host side (custom_all_reduce.cpp) and the kernels must agree on.
// Internal to dist/.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvasir::dist::car {

constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 36;  // every block of a kernel must be resident at once (they spin)
constexpr int kThreads = 512;

// One block's barrier slots: flags[phase][peer] is written by `peer` (release, system scope) with
// the call's flag number; counter is this block's last flag number (advanced by the kernel, so a
// replayed CUDA graph keeps counting).
enum Phase : int { kStart = 0, kMid = 1, kEnd = 2, kNumPhases = 3 };
struct alignas(128) BlockFlags {
  uint32_t flags[kNumPhases][kMaxRanks];
  uint32_t counter;
};
struct Signals {
  BlockFlags blocks[kMaxBlocks];
};
// Buffer layout: [Signals, padded to kDataOffset | staging: max_bytes | results: max_bytes].
constexpr size_t kDataOffset = (sizeof(Signals) + 4095) / 4096 * 4096;

// Every rank's buffer as this process maps it (its own, and the peers' opened over IPC).
struct RankBuffers {
  Signals* signals[kMaxRanks];
  const uint8_t* staging[kMaxRanks];
  uint8_t* results[kMaxRanks];
  int rank;
  int world_size;
  // A barrier that waits longer than this for a peer (one that died or never launched its part)
  // fails the kernel with a trap instead of spinning forever; 0 waits forever.
  uint64_t timeout_ns;
};

enum class Elem : int { kF32, kBf16 };

// out[i] = rank-order sum of staging[r][i] over the ranks (count elements).
void launch_one_shot(const RankBuffers& b, Elem elem, void* out, size_t count, cudaStream_t s);
void launch_two_shot(const RankBuffers& b, Elem elem, void* out, size_t count, cudaStream_t s);
// recv[r * bytes + j] = staging[r][j].
void launch_gather(const RankBuffers& b, void* recv, size_t bytes, cudaStream_t s);

}  // namespace kvasir::dist::car
