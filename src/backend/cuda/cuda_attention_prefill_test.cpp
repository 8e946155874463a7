// The prefill kernels behind CudaBackend::attention, each forced by KVASIR_CUDA_PREFILL, against
// the CPU backend: FlashInfer's SM90 kernel over prompt lengths around its 128/192-row tiles up to
// 4k, chunks late in contexts up to 32k keys, GQA ratios 1/4/8, head dims 64/128/256, block sizes
// 8 to 128, many sequences of different lengths mixed with decode rows; the calls FlashInfer
// cannot take (sliding window, soft-cap, sinks) going to our kernel; the knob itself. The backend's
// stats line says which kernel took each call, so a test fails if the path it means to check was
// not the one that ran. FlashInfer cases skip where the build or the device has no FlashInfer path.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_ops_test_fixture.h"
#include "backend/cuda/cuda_tuning.h"

namespace kvasir {
namespace {

using cuda_test::AttnCase;

bool flashinfer_built_and_sm90() {
#if KVASIR_HAVE_FLASHINFER
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
#else
  return false;
#endif
}

class CudaPrefillPaths : public cuda_test::CudaAttention {
 protected:
  // Replaces the fixture's GPU backend by one made under KVASIR_CUDA_PREFILL=knob.
  void use(const char* knob) {
    setenv("KVASIR_CUDA_PREFILL", knob, 1);
    auto b = create_cuda_backend(CudaBackendOptions{});
    unsetenv("KVASIR_CUDA_PREFILL");
    ASSERT_TRUE(b.ok()) << b.status().message();
    gpu_ = std::move(*b);
  }
  void use_flashinfer() {
    if (!flashinfer_built_and_sm90()) GTEST_SKIP() << "no FlashInfer prefill path (build or device)";
    use("flashinfer");
  }
  // (FlashInfer calls, own-kernel calls) so far, from the backend's stats line.
  std::pair<long long, long long> calls() const {
    const std::string st = gpu_->stats();
    const size_t at = st.find("prefill attention calls:");
    EXPECT_NE(at, std::string::npos) << st;
    long long fi = -1, own = -1;
    if (at != std::string::npos) {
      std::sscanf(st.c_str() + at, "prefill attention calls: flashinfer %lld, own %lld", &fi, &own);
    }
    return {fi, own};
  }
  // Runs the case and checks that its prefill went to the expected kernel.
  void run_on(const AttnCase& c, bool flashinfer) {
    const auto [fi0, own0] = calls();
    run(c);
    const auto [fi1, own1] = calls();
    EXPECT_EQ(fi1 - fi0, flashinfer ? 1 : 0) << c.name << ": FlashInfer calls";
    EXPECT_EQ(own1 - own0, flashinfer ? 0 : 1) << c.name << ": own-kernel calls";
  }
};

TEST_F(CudaPrefillPaths, FlashInferPromptLengthsUpTo4k) {
  use_flashinfer();
  // Around the 128-row tiles (head_dim 128, 256) and the 192-row ones (64), single and batched;
  // below kFlashInferMinQueryLen queries a call stays on our kernel.
  for (int len : {2, 17, 63}) run_on({"short prompt 32/8/128", 32, 8, 128, {len}, {len}}, false);
  for (int len : {64, 127, 128, 129, 255, 257, 1000}) {
    run_on({"fi prompt 32/8/128", 32, 8, 128, {len}, {len}}, true);
  }
  for (int len : {191, 192, 193, 385}) run_on({"fi prompt 16/4/64", 16, 4, 64, {len}, {len}}, true);
  run_on({"fi prompt 4096 4/1/128", 4, 1, 128, {4096}, {4096}}, true);
  run_on({"fi prompts batched", 32, 8, 128, {1, 20, 64, 130, 2}, {1, 20, 64, 130, 2}}, true);
}

TEST_F(CudaPrefillPaths, FlashInferChunksLateInLongContexts) {
  use_flashinfer();
  AttnCase far{"fi chunk 64 of 32000", 8, 1, 128, {32000}, {64}};
  far.extra_blocks = 100;
  run_on(far, true);
  run_on({"fi chunks of 20000/9000 + decode", 8, 2, 128, {20000, 9000, 300}, {128, 500, 1}}, true);
  run_on({"fi chunk 200 of 6000 hd256", 8, 2, 256, {6000}, {200}}, true);
  run_on({"fi chunk 300 of 4100 hd64", 16, 4, 64, {4100, 700}, {300, 1}}, true);
}

TEST_F(CudaPrefillPaths, FlashInferGqaRatiosAndHeadDims) {
  use_flashinfer();
  for (int hd : {64, 128, 256}) {
    for (auto [heads, kvh] : {std::pair{8, 8}, std::pair{16, 4}, std::pair{32, 4}}) {
      run_on({"fi gqa", heads, kvh, hd, {300, 77, 1}, {300, 20, 1}}, true);
    }
  }
  run_on({"fi group of seven", 28, 4, 128, {90, 31}, {90, 30}}, true);
  // Short rows beside a long one go with it to FlashInfer (one kernel per call).
  run_on({"fi long with short rows", 32, 8, 128, {500, 40, 9, 3}, {200, 5, 9, 1}}, true);
}

TEST_F(CudaPrefillPaths, FlashInferBlockSizes) {
  use_flashinfer();
  for (int bs : {8, 16, 32, 64, 128}) {
    AttnCase c{"fi block size", 16, 2, 128, {700, 260}, {700, 45}};
    c.block_size = bs;
    run_on(c, true);
  }
}

TEST_F(CudaPrefillPaths, FlashInferManySequencesMixedWithDecode) {
  use_flashinfer();
  AttnCase c{"fi x24 mixed", 16, 4, 128, {700}, {700}};  // one sure long prompt, then random rows
  for (int i = 0; i < 24; ++i) {
    const int len = 1 + static_cast<int>(rng_() % 1200);
    c.seq_lens.push_back(len);
    const int kind = i % 3;  // a decode row, a whole prompt, a chunk at the end of its context
    c.q_lens.push_back(kind == 0 ? 1 : kind == 1 ? len : 1 + static_cast<int>(rng_() % static_cast<uint32_t>(len)));
  }
  c.extra_blocks = 7;
  run_on(c, true);
}

// What FlashInfer's path does not compute goes to ours, per call, under the flashinfer knob.
TEST_F(CudaPrefillPaths, WindowSoftcapAndSinksFallBackToOwnKernel) {
  use_flashinfer();
  run_on({"window", 32, 8, 128, {300, 150}, {300, 64}, 100}, false);
  run_on({"softcap", 4, 1, 256, {40, 300}, {40, 100}, 0, 50.0f}, false);
  run_on({"sinks", 32, 8, 128, {1, 20, 64, 130}, {1, 20, 64, 130}, 0, 0.0f, 16, 2, true}, false);
  run_on({"plain again", 32, 8, 128, {100}, {100}}, true);
}

TEST_F(CudaPrefillPaths, OwnKnobKeepsEveryPrefillOnOwnKernel) {
  use("own");
  run_on({"own prompt", 32, 8, 128, {1, 20, 64, 130}, {1, 20, 64, 130}}, false);
  run_on({"own chunk", 32, 8, 128, {4100, 700}, {300, 1}}, false);
  // A pure decode step is no prefill call on either kernel.
  const auto before = calls();
  run({"decode only", 32, 8, 128, {17, 100}, {1, 1}});
  EXPECT_EQ(calls(), before);
}

TEST_F(CudaPrefillPaths, DefaultIsFlashInferWhereBuilt) {
  unsetenv("KVASIR_CUDA_PREFILL");
  auto b = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(b.ok()) << b.status().message();
  gpu_ = std::move(*b);
  run_on({"default prompt", 32, 8, 128, {200}, {200}}, flashinfer_built_and_sm90());
}

// The knob as read (host only: these run without a GPU too).
TEST(CudaPrefillKnob, ReadsFlashInferOwnAndUnset) {
  using cuda::PrefillAttentionKernel;
  unsetenv("KVASIR_CUDA_PREFILL");
  EXPECT_EQ(cuda::read_cuda_tuning().recording.prefill_attention, PrefillAttentionKernel::kFlashInfer);
  setenv("KVASIR_CUDA_PREFILL", "own", 1);
  EXPECT_EQ(cuda::read_cuda_tuning().recording.prefill_attention, PrefillAttentionKernel::kOwn);
  EXPECT_NE(cuda::describe(cuda::read_cuda_tuning()).find("KVASIR_CUDA_PREFILL=own"), std::string::npos);
  setenv("KVASIR_CUDA_PREFILL", "flashinfer", 1);
  EXPECT_EQ(cuda::read_cuda_tuning().recording.prefill_attention, PrefillAttentionKernel::kFlashInfer);
  unsetenv("KVASIR_CUDA_PREFILL");
}

TEST(CudaPrefillKnobDeathTest, UnknownValueAbortsNamingIt) {
  EXPECT_DEATH(
      {
        setenv("KVASIR_CUDA_PREFILL", "flashinfr", 1);
        cuda::read_cuda_tuning();
      },
      "KVASIR_CUDA_PREFILL must be flashinfer or own, not 'flashinfr'");
}

}  // namespace
}  // namespace kvasir
