// The decode paths behind CudaBackend::attention, each forced by KVASIR_CUDA_DECODE, against the
// CPU backend: FlashInfer's split-KV decode over context lengths 1..128k (around block and chunk
// edges, short contexts in long tables), batches of 1..8 mixed lengths, GQA ratios 1/2/3/4/6/8/16, head
// dims 64/128/256, block sizes 8..128; the table bound; the calls it does not take (window, soft-cap, sinks, a group
// of 7, more sequences than KVASIR_CUDA_DECODE_FI_MAX_SEQS, mixed steps) going to our kernels; a
// captured decode graph replayed while the lengths (and so the plan's chunks) change, bit-equal to
// an eager backend; the knob. The backend's stats line says which path took each call, so a test
// fails if the path it means to check was not the one that ran. FlashInfer cases skip where the
// build or the device has no FlashInfer path.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_ops_test_fixture.h"
#include "backend/cuda/cuda_tuning.h"

namespace kvasir {
namespace {

using cuda_test::AttnCase;
using cuda_test::DeviceTensor;
using cuda_test::host_tensor;

bool flashinfer_built_and_sm90() {
#if KVASIR_HAVE_FLASHINFER
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
#else
  return false;
#endif
}

// A backend made under KVASIR_CUDA_DECODE=knob and KVASIR_CUDA_DECODE_FI_MIN_TOKENS=min_table
// (null: unset, the default bound; the path tests use 0 so that short tables take FlashInfer too).
std::unique_ptr<Backend> backend_under(const char* knob, bool graphs = true, const char* min_table = "0") {
  setenv("KVASIR_CUDA_DECODE", knob, 1);
  if (min_table != nullptr) setenv("KVASIR_CUDA_DECODE_FI_MIN_TOKENS", min_table, 1);
  CudaBackendOptions o;
  o.enable_graphs = graphs;
  auto b = create_cuda_backend(o);
  unsetenv("KVASIR_CUDA_DECODE");
  unsetenv("KVASIR_CUDA_DECODE_FI_MIN_TOKENS");
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? std::move(*b) : nullptr;
}

// (FlashInfer calls, own-kernel calls) of decode attention so far, from the backend's stats line.
std::pair<long long, long long> decode_calls(const Backend& b) {
  const std::string st = b.stats();
  const size_t at = st.find("decode attention calls:");
  EXPECT_NE(at, std::string::npos) << st;
  long long fi = -1, own = -1;
  if (at != std::string::npos) std::sscanf(st.c_str() + at, "decode attention calls: flashinfer %lld, own %lld", &fi, &own);
  return {fi, own};
}

long long graph_replays(const Backend& b) {
  const std::string st = b.stats();
  const size_t at = st.find("graph replays ");
  long long n = -1;
  if (at != std::string::npos) std::sscanf(st.c_str() + at, "graph replays %lld", &n);
  return n;
}

class CudaDecodePaths : public cuda_test::CudaAttention {
 protected:
  void use(const char* knob, const char* min_table = "0") {
    auto b = backend_under(knob, true, min_table);
    ASSERT_NE(b, nullptr);
    gpu_ = std::move(b);
  }
  void use_flashinfer() {
    if (!flashinfer_built_and_sm90()) GTEST_SKIP() << "no FlashInfer decode path (build or device)";
    use("flashinfer");
  }
  // Runs the case and checks that its decode rows went to the expected path.
  void run_on(const AttnCase& c, bool flashinfer) {
    const auto [fi0, own0] = decode_calls(*gpu_);
    run(c);
    const auto [fi1, own1] = decode_calls(*gpu_);
    EXPECT_EQ(fi1 - fi0, flashinfer ? 1 : 0) << c.name << ": FlashInfer decode calls";
    EXPECT_EQ(own1 - own0, flashinfer ? 0 : 1) << c.name << ": own-kernel decode calls";
  }
  static AttnCase decode(const char* name, int heads, int kvh, int hd, std::vector<int> lens) {
    AttnCase c{name, heads, kvh, hd, std::move(lens), {}};
    c.q_lens.assign(c.seq_lens.size(), 1);
    return c;
  }
};

TEST_F(CudaDecodePaths, FlashInferContextLengthsUpTo128k) {
  use_flashinfer();
  // Around 16-token blocks and the 32-token minimum chunk, then long single contexts.
  for (int len : {1, 2, 15, 16, 17, 31, 32, 33, 100, 1000, 4097, 8192, 32000}) {
    run_on(decode("b1 32/8/128", 32, 8, 128, {len}), true);
  }
  // 128k at batch 1 (one kv head keeps the CPU reference and the host caches bounded).
  run_on(decode("b1 128k 4/1/128", 4, 1, 128, {131072}), true);
  run_on(decode("b1 128k-1 8/2/128", 8, 2, 128, {131071}), true);
}

TEST_F(CudaDecodePaths, FlashInferShortContextsInLongTables) {
  use_flashinfer();
  // The plan depends on the lengths, not the table: 136 keys in a 128k table, and mixed.
  AttnCase one = decode("136 in 128k table", 32, 8, 128, {136});
  one.extra_blocks = 131072 / 16 - 9;
  run_on(one, true);
  AttnCase mixed = decode("mixed in 40k table", 32, 8, 128, {5, 9000, 1, 700});
  mixed.extra_blocks = 40000 / 16 - 563;
  run_on(mixed, true);
}

TEST_F(CudaDecodePaths, FlashInferBatchesOfOneToEightMixedLengths) {
  use_flashinfer();
  for (int S = 1; S <= 8; ++S) {
    // Llama's group of 4 over two kv heads keeps the host caches and the CPU reference small.
    AttnCase c = decode("mixed batch 8/2/128", 8, 2, 128, {});
    for (int i = 0; i < S; ++i) {
      // Some single-key sequences, some long, the rest anywhere below 20k.
      const int len = i % 4 == 1 ? 1 : i % 4 == 2 ? 16000 + static_cast<int>(rng_() % 4000)
                                                  : 1 + static_cast<int>(rng_() % 20000);
      c.seq_lens.push_back(len);
      c.q_lens.push_back(1);
    }
    c.extra_blocks = 1 + static_cast<int>(rng_() % 300);
    run_on(c, true);
  }
}

TEST_F(CudaDecodePaths, FlashInferGqaRatiosAndHeadDims) {
  use_flashinfer();
  for (int hd : {64, 128, 256}) {
    for (auto [heads, kvh] : {std::pair{8, 8}, std::pair{16, 8}, std::pair{32, 8}, std::pair{64, 8}, std::pair{8, 1},
                              std::pair{32, 4}, std::pair{24, 8}, std::pair{12, 2}, std::pair{32, 2}}) {
      run_on(decode("fi gqa", heads, kvh, hd, {3000, 77, 1}), true);
    }
  }
}

TEST_F(CudaDecodePaths, FlashInferBlockSizes) {
  use_flashinfer();
  for (int bs : {8, 16, 32, 64, 128}) {
    AttnCase c = decode("fi block size", 16, 4, 128, {7000, 260, 1, 129});
    c.block_size = bs;
    run_on(c, true);
  }
}

// An e4m3 cache (--kv-cache-dtype fp8) through FlashInfer's decode under KVASIR_CUDA_DECODE_FI_FP8=1
// (off by default: ours was faster): codes widened as it loads them, the key scale folded into the
// score scale; every head dim, groups, long and mixed contexts. A value scale other than 1
// (FlashInfer has no output scale) and e5m2 codes go to ours.
TEST_F(CudaDecodePaths, FlashInferReadsAnE4m3Cache) {
  setenv("KVASIR_CUDA_DECODE_FI_FP8", "1", 1);
  use_flashinfer();
  unsetenv("KVASIR_CUDA_DECODE_FI_FP8");
  using cuda_test::with_fp8_cache;
  for (int hd : {64, 128, 256}) {
    run_on(with_fp8_cache(decode("fi e4m3 32/8", 32, 8, hd, {3000, 77, 1}), DType::kF8E4M3), true);
    run_on(with_fp8_cache(decode("fi e4m3 8/8 k-scaled", 8, 8, hd, {1000, 20000}), DType::kF8E4M3, 0.25f), true);
  }
  run_on(with_fp8_cache(decode("fi e4m3 b1 32k", 32, 8, 128, {32000}), DType::kF8E4M3), true);
  run_on(with_fp8_cache(decode("fi e4m3 4/1/128 128k", 4, 1, 128, {131072}), DType::kF8E4M3, 2.0f), true);
  run_on(with_fp8_cache(decode("e4m3 v-scaled", 32, 8, 128, {3000, 77, 1}), DType::kF8E4M3, 1.0f, 0.5f), false);
  run_on(with_fp8_cache(decode("e5m2", 32, 8, 128, {3000, 77, 1}), DType::kF8E5M2), false);
}

// What FlashInfer's path does not take goes to ours, per call, under the flashinfer knob.
TEST_F(CudaDecodePaths, FallbacksToOwnKernels) {
  use_flashinfer();
  AttnCase window = decode("window", 32, 8, 128, {3000, 150});
  window.window = 1024;
  run_on(window, false);
  AttnCase softcap = decode("softcap", 4, 1, 256, {40, 3000});
  softcap.softcap = 50.0f;
  run_on(softcap, false);
  AttnCase sinks = decode("sinks", 32, 8, 128, {5000, 20});
  sinks.sinks = true;
  run_on(sinks, false);
  run_on(decode("group of seven", 28, 4, 128, {3000, 250}), false);
  AttnCase nine = decode("nine sequences", 32, 8, 128, {});
  for (int i = 0; i <= cuda::kFlashInferDecodeMaxSeqs; ++i) {
    nine.seq_lens.push_back(100 + 37 * i);
    nine.q_lens.push_back(1);
  }
  run_on(nine, false);
  // A mixed step's decode rows run beside its prefill on our kernels.
  run_on({"mixed step", 32, 8, 128, {2000, 50, 900}, {1, 50, 1}}, false);
  run_on(decode("plain again", 32, 8, 128, {2000}), true);
}

TEST_F(CudaDecodePaths, OwnKnobKeepsEveryDecodeOnOwnKernels) {
  use("own");
  run_on(decode("own b1 32k", 32, 8, 128, {32000}), false);
  run_on(decode("own b4", 32, 8, 128, {17, 9000, 1, 300}), false);
}

// The table bound (KVASIR_CUDA_DECODE_FI_MIN_TOKENS; default 0, every table): a table
// shorter than it stays on our kernels, the same context in a longer table goes to FlashInfer.
TEST_F(CudaDecodePaths, TableBoundKeepsShortTablesOnOwnKernels) {
  if (!flashinfer_built_and_sm90()) GTEST_SKIP() << "no FlashInfer decode path (build or device)";
  use("flashinfer", "1024");
  AttnCase small = decode("100 keys, 144-token table", 32, 8, 128, {100});
  run_on(small, false);
  AttnCase big = decode("100 keys, 1,712-token table", 32, 8, 128, {100});
  big.extra_blocks = 100;
  run_on(big, true);
  use("flashinfer", "4096");
  run_on(decode("3000 keys, 3,040-token table", 32, 8, 128, {3000}), false);
  AttnCase long_table = decode("3000 keys, 4,640-token table", 32, 8, 128, {3000});
  long_table.extra_blocks = 102;
  run_on(long_table, true);
}

TEST_F(CudaDecodePaths, DefaultIsFlashInferWhereBuilt) {
  unsetenv("KVASIR_CUDA_DECODE");
  auto b = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(b.ok()) << b.status().message();
  gpu_ = std::move(*b);
  run_on(decode("default b1", 32, 8, 128, {5000}), flashinfer_built_and_sm90());
  run_on(decode("default b1, 100 keys in a 144-token table", 32, 8, 128, {100}), flashinfer_built_and_sm90());
}

// Short tables of several sequences under the bound at 0, the engine's situation at short contexts:
// 2-8 sequences of 10-59 keys in a table sized to the longest, in the tiny test models' shape (8
// heads over 2 kv heads, 64 dims) and Llama-3's (every case above has a long sequence or table).
TEST_F(CudaDecodePaths, FlashInferShortTablesOfSeveralSequences) {
  use_flashinfer();
  for (const auto& [heads, kvh, hd] : {std::tuple{8, 2, 64}, std::tuple{32, 8, 128}}) {
    for (int S : {2, 6, 8}) {
      AttnCase c = decode("short tables", heads, kvh, hd, {});
      for (int i = 0; i < S; ++i) {
        c.seq_lens.push_back(10 + 7 * i);
        c.q_lens.push_back(1);
      }
      run_on(c, true);
    }
  }
}

// Several pure decode calls of one step (no read-back between them) with other lengths each, as a
// speculative step's draft passes and verify make: more distinct plans than the plan cache holds,
// in the tiny models' shape, whose plan (1,000+ CTA rows over 2 kv heads) is too large for the
// step queue to compare. The cache re-plans its oldest entry in place, at the same address and
// size; each call must still read its own plan, not the copy staged for an earlier one.
TEST_F(CudaDecodePaths, FlashInferPlansOfOneStepStayApart) {
  use_flashinfer();
  const int S = 2, heads = 8, kvh = 2, hd = 64, bs = 16, max_blocks = 8;
  cuda_test::PagedKvCache kv(rng_, S, kvh, hd, bs, max_blocks);
  kv.fill(*gpu_, *cpu_, rng_);

  // Seven calls, each its own lengths (all distinct plans), queries and output; one read-back after.
  const std::vector<std::vector<int32_t>> calls = {{10, 17}, {11, 18}, {12, 19}, {13, 20},
                                                   {100, 3}, {14, 21}, {128, 1}};
  std::vector<std::vector<int32_t>> lens(calls.begin(), calls.end());
  std::vector<int32_t> qsl(S + 1);
  std::iota(qsl.begin(), qsl.end(), 0);
  std::vector<std::vector<float>> qs;
  std::vector<std::unique_ptr<DeviceTensor>> qgs, outs;  // alive until the read-backs
  AttentionParams ap{1.0f / std::sqrt(static_cast<float>(hd)), 0, 0.0f};
  const auto [fi0, own0] = decode_calls(*gpu_);
  for (size_t c = 0; c < calls.size(); ++c) {
    AttentionMetadata m;
    m.num_seqs = S;
    m.num_tokens = S;
    m.query_start_loc = qsl.data();
    m.seq_lens = lens[c].data();  // each call's own array: the contract is per array
    m.block_tables = kv.tables.data();
    m.max_blocks_per_seq = max_blocks;
    m.block_size = bs;
    qs.push_back(cuda_test::random_values(rng_, static_cast<size_t>(S) * heads * hd, 2.0f));
    qgs.push_back(std::make_unique<DeviceTensor>(DType::kBF16, std::initializer_list<int64_t>{S, heads, hd}));
    qgs.back()->set(qs.back());
    outs.push_back(std::make_unique<DeviceTensor>(DType::kBF16, std::initializer_list<int64_t>{S, heads, hd}));
    gpu_->attention(qgs.back()->t, kv.k.t, kv.v.t, m, ap, outs.back()->t);
    gpu_->submit();  // ends nothing: the step goes on (as a spec step's passes do)
  }
  const auto [fi1, own1] = decode_calls(*gpu_);
  EXPECT_EQ(fi1 - fi0, static_cast<long long>(calls.size()));
  EXPECT_EQ(own1, own0);
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::vector<float> got = cuda_test::read_back(*gpu_, outs[c]->t);
    AttentionMetadata m;
    m.num_seqs = S;
    m.num_tokens = S;
    m.query_start_loc = qsl.data();
    m.seq_lens = lens[c].data();
    m.block_tables = kv.tables.data();
    m.max_blocks_per_seq = max_blocks;
    m.block_size = bs;
    std::vector<float> ref(qs[c].size());
    Tensor rt = host_tensor(ref, {S, heads, hd});
    cpu_->attention(host_tensor(qs[c], {S, heads, hd}), kv.host_k_t, kv.host_v_t, m, ap, rt);
    EXPECT_LT(cuda_test::rel_l2(got, ref), 2e-2) << "call " << c << " (lengths " << calls[c][0] << ", " << calls[c][1] << ")";
  }
}

// One decode step shape (write_kv + attention of 3 sequences) again and again while the lengths
// jump around (each step's plan has other chunks): eager, captured, then replayed from the graph.
// Every step equals, bit for bit, the same attention on an eager backend, and the CPU's.
TEST_F(CudaDecodePaths, GraphReplayWithChangingLengthsEqualsEager) {
  use_flashinfer();
  auto eager = backend_under("flashinfer", /*graphs=*/false);
  ASSERT_NE(eager, nullptr);
  const int S = 3, heads = 32, kvh = 8, hd = 128, bs = 16, max_blocks = 256;
  const int64_t row = int64_t{kvh} * hd;
  cuda_test::PagedKvCache kv(rng_, S, kvh, hd, bs, max_blocks);
  kv.fill(*gpu_, *cpu_, rng_);  // every position of every sequence, once
  const std::vector<std::vector<int32_t>> steps = {{4096, 17, 900},  {1, 4096, 33},   {2500, 2501, 7},  {64, 1000, 4000},
                                                   {4095, 1, 1},     {300, 3000, 1500}, {32, 33, 31}};
  std::vector<int32_t> lens(S), qsl(S + 1);
  std::iota(qsl.begin(), qsl.end(), 0);
  std::vector<int64_t> slots(S);
  DeviceTensor kd(DType::kBF16, {S, kvh, hd}), vd(DType::kBF16, {S, kvh, hd}), qg(DType::kBF16, {S, heads, hd}),
      out(DType::kBF16, {S, heads, hd}), out_eager(DType::kBF16, {S, heads, hd});
  const auto [fi0, own0] = decode_calls(*gpu_);
  for (size_t step = 0; step < steps.size(); ++step) {
    lens = steps[step];
    AttentionMetadata m;
    m.num_seqs = S;
    m.num_tokens = S;
    m.query_start_loc = qsl.data();
    m.seq_lens = lens.data();
    m.block_tables = kv.tables.data();
    m.max_blocks_per_seq = max_blocks;
    m.slot_mapping = slots.data();
    m.block_size = bs;
    for (int s = 0; s < S; ++s) {
      const int p = lens[static_cast<size_t>(s)] - 1;
      slots[static_cast<size_t>(s)] = kv.slot(s, p);
    }
    // The step's own token, as a decode step writes it before attending.
    auto k = cuda_test::random_values(rng_, static_cast<size_t>(S) * row), v = cuda_test::random_values(rng_, k.size());
    kd.set(k);
    vd.set(v);
    auto q = cuda_test::random_values(rng_, static_cast<size_t>(S) * heads * hd, 2.0f);
    qg.set(q);
    AttentionParams ap{1.0f / std::sqrt(static_cast<float>(hd)), 0, 0.0f};
    gpu_->write_kv(kd.t, vd.t, kv.k.t, kv.v.t, m);
    gpu_->attention(qg.t, kv.k.t, kv.v.t, m, ap, out.t);
    const std::vector<float> got = cuda_test::read_back(*gpu_, out.t);
    cpu_->write_kv(host_tensor(k, {S, kvh, hd}), host_tensor(v, {S, kvh, hd}), kv.host_k_t, kv.host_v_t, m);
    eager->attention(qg.t, kv.k.t, kv.v.t, m, ap, out_eager.t);
    EXPECT_EQ(got, cuda_test::read_back(*eager, out_eager.t)) << "step " << step << ": graph replay differs from eager";
    std::vector<float> ref(q.size());
    Tensor rt = host_tensor(ref, {S, heads, hd});
    cpu_->attention(host_tensor(q, {S, heads, hd}), kv.host_k_t, kv.host_v_t, m, ap, rt);
    EXPECT_LT(cuda_test::rel_l2(got, ref), 2e-2) << "step " << step;
  }
  const auto [fi1, own1] = decode_calls(*gpu_);
  EXPECT_EQ(fi1 - fi0, static_cast<long long>(steps.size()));
  EXPECT_EQ(own1, own0);
  // Seen once, captured at the second sighting, replayed after.
  EXPECT_GE(graph_replays(*gpu_), static_cast<long long>(steps.size()) - 2) << gpu_->stats();
}

// The knob as read (host only: these run without a GPU too).
TEST(CudaDecodeKnob, ReadsFlashInferOwnUnsetAndTheBounds) {
  using cuda::DecodeAttentionPath;
  unsetenv("KVASIR_CUDA_DECODE");
  unsetenv("KVASIR_CUDA_DECODE_FI_MAX_SEQS");
  EXPECT_EQ(cuda::read_cuda_tuning().recording.decode_attention, DecodeAttentionPath::kFlashInfer);
  EXPECT_EQ(cuda::read_cuda_tuning().recording.flashinfer_decode_max_seqs, cuda::kFlashInferDecodeMaxSeqs);
  setenv("KVASIR_CUDA_DECODE", "own", 1);
  EXPECT_EQ(cuda::read_cuda_tuning().recording.decode_attention, DecodeAttentionPath::kOwn);
  EXPECT_NE(cuda::describe(cuda::read_cuda_tuning()).find("KVASIR_CUDA_DECODE=own"), std::string::npos);
  setenv("KVASIR_CUDA_DECODE", "flashinfer", 1);
  EXPECT_EQ(cuda::read_cuda_tuning().recording.decode_attention, DecodeAttentionPath::kFlashInfer);
  unsetenv("KVASIR_CUDA_DECODE");
  setenv("KVASIR_CUDA_DECODE_FI_MAX_SEQS", "64", 1);
  EXPECT_EQ(cuda::read_cuda_tuning().recording.flashinfer_decode_max_seqs, 64);
  EXPECT_NE(cuda::describe(cuda::read_cuda_tuning()).find("KVASIR_CUDA_DECODE_FI_MAX_SEQS=64"), std::string::npos);
  unsetenv("KVASIR_CUDA_DECODE_FI_MAX_SEQS");
  EXPECT_EQ(cuda::read_cuda_tuning().recording.flashinfer_decode_min_table, cuda::kFlashInferDecodeMinTableTokens);
  setenv("KVASIR_CUDA_DECODE_FI_MIN_TOKENS", "0", 1);
  EXPECT_EQ(cuda::read_cuda_tuning().recording.flashinfer_decode_min_table, 0);
  EXPECT_NE(cuda::describe(cuda::read_cuda_tuning()).find("KVASIR_CUDA_DECODE_FI_MIN_TOKENS=0"), std::string::npos);
  unsetenv("KVASIR_CUDA_DECODE_FI_MIN_TOKENS");
}

TEST(CudaDecodeKnobDeathTest, UnknownValueAbortsNamingIt) {
  EXPECT_DEATH(
      {
        setenv("KVASIR_CUDA_DECODE", "flashinfr", 1);
        cuda::read_cuda_tuning();
      },
      "KVASIR_CUDA_DECODE must be flashinfer or own, not 'flashinfr'");
}

}  // namespace
}  // namespace kvasir
