// The CPU moe_experts against float64 math on the dequantized expert weights (F32, F16, BF16, Q4_0, Q8_0,
// Q4_K; split, fused-halves and interleaved gate/up; biases; SiLU, GELU-tanh, SwiGLU-OAI; tokens
// per expert from 0 to many). Plus bitwise batch and thread-count invariance, validation, and
// that a decode step touches no unchosen expert's weights (they sit behind PROT_NONE pages).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_moe_test_util.h"
#include "backend/cpu/quant/dequantize.h"
#include "backend/cpu/quant/quant_test_util.h"

namespace kvasir {
namespace {

using cpu::testing::make_cpu;
using cpu::testing::random_floats;
using cpu::testing::Routed;
using cpu::testing::run_route;
using cpu::testing::random_weights;

// ---------------------------------------------------------------- experts reference

// E experts' weights stacked like one GGUF [E, rows, cols] tensor, sliced into per-expert views.
struct Stacked {
  std::vector<uint8_t> bytes;
  std::vector<Tensor> views;
  std::vector<float> deq;  // [E, rows, cols]
};

Stacked make_stacked(DType t, int e_n, int64_t rows, int64_t cols, std::mt19937& rng) {
  Stacked s;
  s.bytes = random_weights(t, e_n * rows, cols, rng);
  const size_t rb = *row_bytes(t, cols);
  s.deq.resize(static_cast<size_t>(e_n * rows * cols));
  for (int64_t r = 0; r < e_n * rows; ++r) cpu::dequantize_row(t, s.bytes.data() + r * rb, s.deq.data() + r * cols, cols);
  for (int e = 0; e < e_n; ++e) s.views.push_back(Tensor::make(s.bytes.data() + e * rows * rb, t, {rows, cols}));
  return s;
}

struct Biases {
  std::vector<float> data;  // [E, len]
  std::vector<Tensor> views;
};

Biases make_biases(int e_n, int64_t len, std::mt19937& rng) {
  Biases b;
  b.data = random_floats(static_cast<size_t>(e_n * len), rng, -0.5f, 0.5f);
  for (int e = 0; e < e_n; ++e) b.views.push_back(Tensor::make(b.data.data() + e * len, DType::kF32, {len}));
  return b;
}

double activate(GateActivation a, const SwigluOaiParams& p, double g, double u) {
  switch (a) {
    case GateActivation::kSilu: return g / (1.0 + std::exp(-g)) * u;
    case GateActivation::kGeluTanh:
      return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
    case GateActivation::kSwigluOai: {
      g = std::min(g, static_cast<double>(p.limit));
      u = std::clamp(u, -static_cast<double>(p.limit), static_cast<double>(p.limit));
      return (u + 1.0) * g / (1.0 + std::exp(-p.alpha * g));
    }
  }
  return 0;
}

enum class Form { kSplit, kHalves, kInterleaved };

struct ExpertCase {
  int64_t t;
  int e;
  int k;
  Form form;
  bool biases;
  GateActivation act;
  bool skewed;  // every token picks expert 1 first: one busy expert, most idle
};

// A layer's experts with their dequantized copies and the MoeExpertWeights over them.
struct Layer {
  Stacked gate, up, gate_up, down;
  Biases gate_b, up_b, gate_up_b, down_b;
  MoeExpertWeights w;
  Form form;
};

Layer make_layer(DType t, const ExpertCase& c, int64_t h, int64_t inter, std::mt19937& rng) {
  Layer l;
  l.form = c.form;
  l.w.num_experts = c.e;
  l.w.hidden_size = h;
  l.w.intermediate_size = inter;
  l.w.activation = c.act;
  l.w.swiglu_oai.limit = 3.0f;  // small enough that random products reach it
  if (c.form == Form::kSplit) {
    l.gate = make_stacked(t, c.e, inter, h, rng);
    l.up = make_stacked(t, c.e, inter, h, rng);
    l.w.gate = l.gate.views.data();
    l.w.up = l.up.views.data();
    if (c.biases) {
      l.gate_b = make_biases(c.e, inter, rng);
      l.up_b = make_biases(c.e, inter, rng);
      l.w.gate_bias = l.gate_b.views.data();
      l.w.up_bias = l.up_b.views.data();
    }
  } else {
    l.gate_up = make_stacked(t, c.e, 2 * inter, h, rng);
    l.w.gate_up = l.gate_up.views.data();
    l.w.gate_up_layout = c.form == Form::kHalves ? GateUpLayout::kHalves : GateUpLayout::kInterleaved;
    if (c.biases) {
      l.gate_up_b = make_biases(c.e, 2 * inter, rng);
      l.w.gate_up_bias = l.gate_up_b.views.data();
    }
  }
  l.down = make_stacked(t, c.e, h, inter, rng);
  l.w.down = l.down.views.data();
  if (c.biases) {
    l.down_b = make_biases(c.e, h, rng);
    l.w.down_bias = l.down_b.views.data();
  }
  return l;
}

// Row `r` of expert e's gate (or up) projection of x, in float64, with its bias.
double project(const Layer& l, bool want_up, int e, int64_t r, const float* x) {
  const int64_t h = l.w.hidden_size, inter = l.w.intermediate_size;
  const float* row = nullptr;
  double bias = 0;
  if (l.form == Form::kSplit) {
    row = (want_up ? l.up : l.gate).deq.data() + (e * inter + r) * h;
    if (l.w.gate_bias != nullptr) bias = (want_up ? l.up_b : l.gate_b).data[e * inter + r];
  } else {
    const int64_t fr = l.form == Form::kHalves ? (want_up ? inter + r : r) : (want_up ? 2 * r + 1 : 2 * r);
    row = l.gate_up.deq.data() + (e * 2 * inter + fr) * h;
    if (l.w.gate_up_bias != nullptr) bias = l.gate_up_b.data[e * 2 * inter + fr];
  }
  double acc = bias;
  for (int64_t i = 0; i < h; ++i) acc += static_cast<double>(row[i]) * x[i];
  return acc;
}

std::vector<double> reference_experts(const Layer& l, const std::vector<float>& x, const std::vector<int32_t>& ids,
                                      const std::vector<float>& weights, int64_t t_n, int k) {
  const int64_t h = l.w.hidden_size, inter = l.w.intermediate_size;
  std::vector<double> out(static_cast<size_t>(t_n * h), 0.0);
  std::vector<double> a(static_cast<size_t>(inter));
  for (int64_t t = 0; t < t_n; ++t) {
    const float* xt = x.data() + t * h;
    for (int j = 0; j < k; ++j) {
      const int e = ids[t * k + j];
      for (int64_t r = 0; r < inter; ++r) {
        a[r] = activate(l.w.activation, l.w.swiglu_oai, project(l, false, e, r, xt), project(l, true, e, r, xt));
      }
      for (int64_t o = 0; o < h; ++o) {
        const float* row = l.down.deq.data() + (e * h + o) * inter;
        double y = l.w.down_bias != nullptr ? l.down_b.data[e * h + o] : 0.0;
        for (int64_t r = 0; r < inter; ++r) y += static_cast<double>(row[r]) * a[r];
        out[t * h + o] += weights[t * k + j] * y;
      }
    }
  }
  return out;
}

// Distinct random expert ids per token (skewed: expert 1 always among them) and positive weights.
void random_assignment(const ExpertCase& c, std::mt19937& rng, std::vector<int32_t>* ids, std::vector<float>* w) {
  std::vector<int32_t> perm(c.e);
  for (int64_t t = 0; t < c.t; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    if (c.skewed) std::swap(perm[0], *std::find(perm.begin(), perm.end(), 1));
    for (int j = 0; j < c.k; ++j) ids->push_back(perm[j]);
  }
  *w = random_floats(ids->size(), rng, 0.05f, 1.0f);
}

std::vector<float> run_experts(CpuBackend& cpu, const Layer& l, std::vector<float>& x, std::vector<int32_t>& ids,
                               std::vector<float>& w, int64_t t_n, int k) {
  const int64_t h = l.w.hidden_size;
  std::vector<float> out(static_cast<size_t>(t_n * h), 1234.0f);
  const Tensor xt = Tensor::make(x.data(), DType::kF32, {t_n, h});
  const Tensor it = Tensor::make(ids.data(), DType::kI32, {t_n, k});
  const Tensor wt = Tensor::make(w.data(), DType::kF32, {t_n, k});
  Tensor ot = Tensor::make(out.data(), DType::kF32, {t_n, h});
  cpu.moe_experts(xt, it, wt, l.w, ot);
  return out;
}

const ExpertCase kCases[] = {
    {0, 8, 2, Form::kSplit, false, GateActivation::kSilu, false},
    {1, 8, 1, Form::kSplit, false, GateActivation::kSilu, false},
    {1, 64, 8, Form::kSplit, false, GateActivation::kSilu, false},     // decode, many experts
    {37, 8, 2, Form::kSplit, false, GateActivation::kSilu, true},      // one busy expert
    {70, 4, 4, Form::kSplit, true, GateActivation::kSilu, false},      // every expert, many tokens
    {5, 16, 4, Form::kHalves, true, GateActivation::kSilu, false},
    {9, 8, 2, Form::kInterleaved, true, GateActivation::kSwigluOai, false},  // GPT-OSS
    {6, 8, 2, Form::kSplit, false, GateActivation::kGeluTanh, true},
};

class CpuMoeExperts : public ::testing::TestWithParam<DType> {
 protected:
  // Sizes by block size: the K-quants need rows of 256; odd sizes give the dense types' tails.
  bool dense() const { return GetParam() == DType::kF32 || GetParam() == DType::kF16 || GetParam() == DType::kBF16; }
  int64_t hidden() const { return cpu::testing::block_size(GetParam()) == 256 ? 256 : (dense() ? 40 : 64); }
  int64_t inter() const { return cpu::testing::block_size(GetParam()) == 256 ? 256 : (dense() ? 28 : 96); }
};

TEST_P(CpuMoeExperts, MatchFloat64ReferenceOnDequantizedWeights) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) + 5);
  for (MatmulPrecision p : {MatmulPrecision::kExact, MatmulPrecision::kFast}) {
    CpuBackend cpu = make_cpu(3, p);
    for (const ExpertCase& c : kCases) {
      const Layer l = make_layer(t, c, hidden(), inter(), rng);
      ASSERT_TRUE(validate_moe_expert_weights(l.w).ok()) << validate_moe_expert_weights(l.w).message();
      std::vector<float> x = random_floats(static_cast<size_t>(c.t * hidden()), rng);
      std::vector<int32_t> ids;
      std::vector<float> w;
      random_assignment(c, rng, &ids, &w);
      const std::vector<double> want = reference_experts(l, x, ids, w, c.t, c.k);
      const std::vector<float> got = run_experts(cpu, l, x, ids, w, c.t, c.k);
      // Fast mode rounds activations (the inputs and the gated products) to 16 bits per block
      // (256 values for the K-quants) before the integer products: ~1e-4 after two projections.
      const double tol = p == MatmulPrecision::kExact ? 2e-5 : 1e-3;
      for (int64_t tok = 0; tok < c.t; ++tok) {
        double err = 0, norm = 0;
        for (int64_t i = 0; i < hidden(); ++i) {
          const double d = got[tok * hidden() + i] - want[tok * hidden() + i];
          err += d * d;
          norm += want[tok * hidden() + i] * want[tok * hidden() + i];
        }
        ASSERT_LT(std::sqrt(err / norm), tol) << dtype_name(t) << " precision " << static_cast<int>(p) << " case t="
                                              << c.t << " e=" << c.e << " k=" << c.k << " token " << tok;
      }
    }
  }
}

// A token's output is bit-identical alone, in a batch, and on another thread count.
TEST_P(CpuMoeExperts, TokensAreBatchAndThreadInvariant) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) + 17);
  const ExpertCase c{23, 8, 2, Form::kSplit, true, GateActivation::kSilu, true};
  const Layer l = make_layer(t, c, hidden(), inter(), rng);
  std::vector<float> x = random_floats(static_cast<size_t>(c.t * hidden()), rng);
  std::vector<int32_t> ids;
  std::vector<float> w;
  random_assignment(c, rng, &ids, &w);
  for (MatmulPrecision p : {MatmulPrecision::kExact, MatmulPrecision::kFast}) {
    CpuBackend cpu3 = make_cpu(3, p), cpu1 = make_cpu(1, p);
    const std::vector<float> batch = run_experts(cpu3, l, x, ids, w, c.t, c.k);
    ASSERT_EQ(batch, run_experts(cpu1, l, x, ids, w, c.t, c.k));
    for (int64_t tok = 0; tok < c.t; ++tok) {
      std::vector<float> x1(x.begin() + tok * hidden(), x.begin() + (tok + 1) * hidden());
      std::vector<int32_t> i1(ids.begin() + tok * c.k, ids.begin() + (tok + 1) * c.k);
      std::vector<float> w1(w.begin() + tok * c.k, w.begin() + (tok + 1) * c.k);
      const std::vector<float> one = run_experts(cpu3, l, x1, i1, w1, 1, c.k);
      ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + tok * hidden(), one.size() * 4))
          << dtype_name(t) << " token " << tok;
    }
  }
}

// Expert parallelism: each rank runs its share of the experts (first_expert onwards) on every
// token's slots, the other ranks' slots adding nothing; the shares' outputs sum to the whole layer.
TEST(CpuMoe, SharesOfTheExpertsSumToTheWholeLayer) {
  std::mt19937 rng(41);
  const ExpertCase c{11, 8, 3, Form::kInterleaved, true, GateActivation::kSwigluOai, true};
  const Layer l = make_layer(DType::kF32, c, 40, 28, rng);
  std::vector<float> x = random_floats(static_cast<size_t>(c.t * 40), rng);
  std::vector<int32_t> ids;
  std::vector<float> w;
  random_assignment(c, rng, &ids, &w);
  CpuBackend cpu = make_cpu(2, MatmulPrecision::kExact);
  const std::vector<float> whole = run_experts(cpu, l, x, ids, w, c.t, c.k);
  std::vector<float> sum(whole.size(), 0.0f);
  for (const auto& [first, count] : {std::pair<int, int>{0, 3}, std::pair<int, int>{3, 5}}) {
    Layer share = l;
    share.w.num_experts = count;
    share.w.first_expert = first;
    share.w.gate_up = l.w.gate_up + first;
    share.w.gate_up_bias = l.w.gate_up_bias + first;
    share.w.down = l.w.down + first;
    share.w.down_bias = l.w.down_bias + first;
    ASSERT_TRUE(validate_moe_expert_weights(share.w).ok());
    const std::vector<float> part = run_experts(cpu, share, x, ids, w, c.t, c.k);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  for (size_t i = 0; i < sum.size(); ++i) ASSERT_NEAR(sum[i], whole[i], 1e-5 * (1 + std::fabs(whole[i]))) << i;
  // A token none of whose experts a share holds gets zeros from it.
  std::vector<int32_t> far = {5, 6, 7};
  std::vector<float> far_w = {0.5f, 0.3f, 0.2f}, x1(x.begin(), x.begin() + 40);
  Layer first_share = l;
  first_share.w.num_experts = 3;
  const std::vector<float> none = run_experts(cpu, first_share, x1, far, far_w, 1, 3);
  for (float v : none) ASSERT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, CpuMoeExperts,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ8_0,
                                           DType::kQ4_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// Routing then experts, the way a model layer calls them.
TEST(CpuMoe, RouteThenExpertsMatchesTheReferencePipeline) {
  std::mt19937 rng(3);
  CpuBackend cpu = make_cpu(2);
  const ExpertCase c{11, 8, 2, Form::kSplit, false, GateActivation::kSilu, false};
  const Layer l = make_layer(DType::kQ8_0, c, 64, 96, rng);
  std::vector<float> logits = random_floats(static_cast<size_t>(c.t * c.e), rng, -2.0f, 2.0f);
  MoeRouting r;
  r.top_k = c.k;
  r.renormalize = true;
  Routed routed = run_route(cpu, logits, c.t, c.e, r);
  std::vector<float> x = random_floats(static_cast<size_t>(c.t * 64), rng);
  const std::vector<double> want = reference_experts(l, x, routed.ids, routed.weights, c.t, c.k);
  const std::vector<float> got = run_experts(cpu, l, x, routed.ids, routed.weights, c.t, c.k);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::fabs(want[i])));
}

// Expert weight slabs copied into anonymous pages, one page-aligned slab per expert and tensor,
// so each expert's bytes can be made unreadable on their own.
class GuardedExperts {
 public:
  GuardedExperts(const std::vector<const Stacked*>& tensors, int e_n) : e_n_(e_n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (const Stacked* s : tensors) slab_ = std::max(slab_, s->bytes.size() / e_n);
    slab_ = (slab_ + page - 1) / page * page;
    bytes_ = slab_ * tensors.size() * e_n;
    base_ = static_cast<uint8_t*>(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    views_.resize(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t per = tensors[i]->bytes.size() / e_n;
      for (int e = 0; e < e_n; ++e) {
        uint8_t* dst = slab(i, e);
        std::memcpy(dst, tensors[i]->bytes.data() + e * per, per);
        Tensor v = tensors[i]->views[e];
        v.data = dst;
        views_[i].push_back(v);
      }
    }
  }
  ~GuardedExperts() { munmap(base_, bytes_); }
  bool ok() const { return base_ != MAP_FAILED; }
  const Tensor* views(size_t i) const { return views_[i].data(); }
  // Every slab of every expert not in `keep` becomes unreadable.
  bool protect_all_but(const std::vector<int32_t>& keep) {
    for (size_t i = 0; i < views_.size(); ++i) {
      for (int e = 0; e < e_n_; ++e) {
        if (std::find(keep.begin(), keep.end(), e) != keep.end()) continue;
        if (mprotect(slab(i, e), slab_, PROT_NONE) != 0) return false;
      }
    }
    return true;
  }

 private:
  uint8_t* slab(size_t i, int e) const { return base_ + (i * e_n_ + e) * slab_; }
  int e_n_;
  size_t slab_ = 0, bytes_ = 0;
  uint8_t* base_ = nullptr;
  std::vector<std::vector<Tensor>> views_;
};

// Batch-1 decode reads only the chosen experts' weights: with every other expert's weights behind
// PROT_NONE pages the step neither faults nor changes a bit, on one thread and on several (a
// dense path, or tiles of idle experts, would die with SIGSEGV).
TEST(CpuMoeDeathTest, DecodeReadsOnlyTheChosenExperts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
    std::mt19937 rng(static_cast<uint32_t>(t) + 29);
    const ExpertCase c{1, 32, 4, Form::kSplit, false, GateActivation::kSilu, false};
    const Layer l = make_layer(t, c, 256, 128, rng);
    std::vector<float> x = random_floats(256, rng);
    std::vector<int32_t> ids;
    std::vector<float> w;
    random_assignment(c, rng, &ids, &w);
    for (int threads : {1, 3}) {
      for (MatmulPrecision p : {MatmulPrecision::kExact, MatmulPrecision::kFast}) {
        CpuBackend cpu = make_cpu(threads, p);
        const std::vector<float> want = run_experts(cpu, l, x, ids, w, 1, c.k);
        EXPECT_EXIT(
            {
              GuardedExperts g({&l.gate, &l.up, &l.down}, c.e);
              if (!g.ok() || !g.protect_all_but(ids)) std::_Exit(2);
              Layer guarded;
              guarded.w = l.w;
              guarded.w.gate = g.views(0);
              guarded.w.up = g.views(1);
              guarded.w.down = g.views(2);
              CpuBackend fresh = make_cpu(threads, p);
              const std::vector<float> got = run_experts(fresh, guarded, x, ids, w, 1, c.k);
              std::_Exit(std::memcmp(got.data(), want.data(), got.size() * 4) == 0 ? 0 : 3);
            },
            ::testing::ExitedWithCode(0), "")
            << dtype_name(t) << " threads " << threads << " precision " << static_cast<int>(p);
      }
    }
  }
}

TEST(CpuMoe, ExpertValidationNamesWhatIsWrong) {
  std::mt19937 rng(1);
  const ExpertCase c{1, 4, 2, Form::kSplit, true, GateActivation::kSilu, false};
  Layer l = make_layer(DType::kF32, c, 32, 16, rng);
  ASSERT_TRUE(validate_moe_expert_weights(l.w).ok());
  std::vector<Tensor> gate = l.gate.views;
  l.w.gate = gate.data();
  gate[2].data = nullptr;
  Status s = validate_moe_expert_weights(l.w);
  EXPECT_NE(s.message().find("gate of expert 2 is missing"), std::string::npos) << s.message();
  gate[2] = l.gate.views[2].reshape({8, 64});
  s = validate_moe_expert_weights(l.w);
  EXPECT_NE(s.message().find("shape [8, 64], expected [16, 32]"), std::string::npos) << s.message();
  gate[2] = l.gate.views[2];
  gate[2].dtype = DType::kF16;
  gate[2].shape = {16, 32, 0, 0};
  EXPECT_FALSE(validate_moe_expert_weights(l.w).ok());  // mixed dtypes within one array
  gate[2] = l.gate.views[2];
  ASSERT_TRUE(validate_moe_expert_weights(l.w).ok());
  std::vector<Tensor> down_b = l.down_b.views;
  down_b[0] = down_b[0].reshape({2, 16});
  l.w.down_bias = down_b.data();
  EXPECT_TRUE(validate_moe_expert_weights(l.w).ok());  // same length is fine
  down_b[0] = Tensor::make(l.down_b.data.data(), DType::kF32, {31});
  EXPECT_FALSE(validate_moe_expert_weights(l.w).ok());
  l.w.down_bias = l.down_b.views.data();
  l.w.gate_up = l.gate.views.data();
  EXPECT_FALSE(validate_moe_expert_weights(l.w).ok());  // both split and fused
}

}  // namespace
}  // namespace kvasir
