// CpuBackend::attention against a naive reference (double precision, one query head at a time,
// every key of the context read through the block table): decode, prefill, chunked prefill, GQA,
// head sizes off the 16-wide vector path, sliding windows, soft-capping, attention sinks, float32,
// float16 and FP8 (e4m3, e5m2, with per-tensor K / V scales) caches, and contexts long enough to
// be cut into several key ranges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "quant/block_formats.h"
#include "quant/fp8.h"

namespace kvasir {
namespace {

struct Case {
  const char* name;
  int heads, kv_heads, hd;
  std::vector<int> seq_lens, q_lens;  // per sequence: context length, and how many of its last tokens are queries
  int window = 0;
  float softcap = 0.0f;
  bool sinks = false;
  DType kv_dtype = DType::kF32;
  int block_size = 16;
  float k_scale = 1.0f, v_scale = 1.0f;  // an FP8 cache's per-tensor scales
};

// One scenario's inputs, its cache written through write_kv, and both results.
class AttentionCheck {
 public:
  AttentionCheck(const Case& c, uint32_t seed) : c_(c), rng_(seed) {
    const int S = static_cast<int>(c.seq_lens.size()), bs = c.block_size;
    for (int s = 0; s < S; ++s) max_blocks_ = std::max(max_blocks_, (c.seq_lens[s] + bs - 1) / bs);
    num_blocks_ = S * max_blocks_ + 2;
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks_));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    tables_.assign(static_cast<size_t>(S) * max_blocks_, 0);
    for (int s = 0, next = 0; s < S; ++s) {
      for (int b = 0; b < (c.seq_lens[s] + bs - 1) / bs; ++b) tables_[static_cast<size_t>(s) * max_blocks_ + b] = perm[next++];
    }
    const int64_t row = int64_t{c.kv_heads} * c.hd;
    for (int s = 0; s < S; ++s) {
      keys_.push_back(random(static_cast<size_t>(c.seq_lens[s] * row), 1.0f));
      values_.push_back(random(static_cast<size_t>(c.seq_lens[s] * row), 1.0f));
    }
    qsl_.push_back(0);
    for (int s = 0; s < S; ++s) qsl_.push_back(qsl_.back() + c.q_lens[s]);
    q_ = random(static_cast<size_t>(qsl_.back()) * c.heads * c.hd, 2.0f);
    if (c.sinks) {
      // Around the scores' own size, one far above them (the sink takes nearly all the weight)
      // and one far below (it takes none).
      sinks_ = random(static_cast<size_t>(c.heads), 3.0f);
      sinks_[0] = 40.0f;
      if (c.heads > 1) sinks_[1] = -60.0f;
    }
  }

  // Runs the backend on the scenario; returns out [num_queries, heads, hd].
  std::vector<float> run(CpuBackend& b) {
    const int S = static_cast<int>(c_.seq_lens.size()), bs = c_.block_size;
    const size_t cache_elems = static_cast<size_t>(num_blocks_) * bs * c_.kv_heads * c_.hd;
    std::vector<float> kc(cache_elems), vc(cache_elems);  // a float16 cache uses half the bytes
    Tensor kct = Tensor::make(kc.data(), c_.kv_dtype, {num_blocks_, bs, c_.kv_heads, c_.hd});
    Tensor vct = Tensor::make(vc.data(), c_.kv_dtype, {num_blocks_, bs, c_.kv_heads, c_.hd});
    kct.cache_scale = c_.k_scale;
    vct.cache_scale = c_.v_scale;
    for (int s = 0; s < S; ++s) {
      std::vector<int64_t> slots;
      for (int p = 0; p < c_.seq_lens[s]; ++p) slots.push_back(slot(s, p));
      AttentionMetadata wm;
      wm.num_tokens = c_.seq_lens[s];
      wm.slot_mapping = slots.data();
      wm.block_size = bs;
      b.write_kv(Tensor::make(keys_[s].data(), DType::kF32, {c_.seq_lens[s], c_.kv_heads, c_.hd}),
                 Tensor::make(values_[s].data(), DType::kF32, {c_.seq_lens[s], c_.kv_heads, c_.hd}), kct, vct, wm);
    }
    std::vector<int64_t> qslots;
    for (int s = 0; s < S; ++s) {
      for (int p = c_.seq_lens[s] - c_.q_lens[s]; p < c_.seq_lens[s]; ++p) qslots.push_back(slot(s, p));
    }
    AttentionMetadata m;
    m.num_seqs = S;
    m.num_tokens = qsl_.back();
    m.query_start_loc = qsl_.data();
    m.seq_lens = c_.seq_lens.data();
    m.block_tables = tables_.data();
    m.max_blocks_per_seq = max_blocks_;
    m.slot_mapping = qslots.data();
    m.block_size = bs;
    AttentionParams ap{scale(), c_.window, c_.softcap};
    if (c_.sinks) ap.sinks = Tensor::make(sinks_.data(), DType::kF32, {c_.heads});
    std::vector<float> out(q_.size(), NAN);
    Tensor ot = Tensor::make(out.data(), DType::kF32, {m.num_tokens, c_.heads, c_.hd});
    b.attention(Tensor::make(q_.data(), DType::kF32, {m.num_tokens, c_.heads, c_.hd}), kct, vct, m, ap, ot);
    return out;
  }

  // The definition: softmax over the scaled (capped) scores of keys (pos - window, pos] and the
  // head's sink logit, the sink contributing no value.
  std::vector<double> reference() const {
    const int S = static_cast<int>(c_.seq_lens.size()), group = c_.heads / c_.kv_heads, hd = c_.hd;
    std::vector<double> out;
    for (int s = 0; s < S; ++s) {
      for (int t = 0; t < c_.q_lens[s]; ++t) {
        const int pos = c_.seq_lens[s] - c_.q_lens[s] + t;
        const int lo = c_.window > 0 ? std::max(0, pos - c_.window + 1) : 0;
        for (int h = 0; h < c_.heads; ++h) {
          const float* q = q_.data() + (static_cast<size_t>(qsl_[s] + t) * c_.heads + h) * hd;
          const int kvh = h / group;
          std::vector<double> logits;
          for (int j = lo; j <= pos; ++j) {
            double d = 0;
            for (int e = 0; e < hd; ++e) d += double{q[e]} * cached(keys_[s], j, kvh, e, c_.k_scale);
            d *= scale();
            if (c_.softcap > 0) d = c_.softcap * std::tanh(d / c_.softcap);
            logits.push_back(d);
          }
          double mx = *std::max_element(logits.begin(), logits.end());
          if (c_.sinks) mx = std::max(mx, double{sinks_[h]});
          double den = c_.sinks ? std::exp(sinks_[h] - mx) : 0.0;
          for (double l : logits) den += std::exp(l - mx);
          for (int e = 0; e < hd; ++e) {
            double num = 0;
            for (int j = lo; j <= pos; ++j) num += std::exp(logits[j - lo] - mx) * cached(values_[s], j, kvh, e, c_.v_scale);
            out.push_back(num / den);
          }
        }
      }
    }
    return out;
  }

 private:
  std::vector<float> random(size_t n, float scale) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.hd)); }
  int64_t slot(int s, int p) const {
    return int64_t{tables_[static_cast<size_t>(s) * max_blocks_ + p / c_.block_size]} * c_.block_size + p % c_.block_size;
  }
  // A K or V element as the cache holds it (rounded to float16 when the cache is; FP8: the code
  // of x / scale, times scale).
  double cached(const std::vector<float>& src, int pos, int kvh, int e, float scale) const {
    const float x = src[(static_cast<size_t>(pos) * c_.kv_heads + kvh) * c_.hd + e];
    switch (c_.kv_dtype) {
      case DType::kF16: return quant::fp16_to_f32(quant::f32_to_fp16(x));
      case DType::kF8E4M3: return double{quant::fp8_e4m3_to_f32(quant::f32_to_fp8_e4m3(x / scale))} * scale;
      case DType::kF8E5M2: return double{quant::fp8_e5m2_to_f32(quant::f32_to_fp8_e5m2(x / scale))} * scale;
      default: return x;
    }
  }

  Case c_;
  std::mt19937 rng_;
  int max_blocks_ = 0, num_blocks_ = 0;
  std::vector<int32_t> tables_, qsl_;
  std::vector<std::vector<float>> keys_, values_;
  std::vector<float> q_, sinks_;
};

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

void expect_matches_reference(const Case& c) {
  for (int threads : {1, 3}) {
    CpuBackend b(CpuBackendOptions{threads, MatmulPrecision::kExact, c.kv_dtype});
    AttentionCheck check(c, 1234);
    const std::vector<float> out = check.run(b);
    // Outputs are convex combinations of values in [-1, 1]: an absolute bound is a relative one.
    EXPECT_LT(max_abs_diff(out, check.reference()), 2e-5) << c.name << ", " << threads << " threads";
  }
}

TEST(CpuAttention, DecodeShortAndSplitContexts) {
  expect_matches_reference({"decode gqa", 8, 2, 64, {1, 5, 64, 65, 300, 700}, {1, 1, 1, 1, 1, 1}});
}

TEST(CpuAttention, PrefillAndChunkedPrefill) {
  expect_matches_reference({"prefill + chunk", 8, 2, 64, {40, 150, 9}, {40, 30, 1}});
}

TEST(CpuAttention, HeadDimOffTheVectorPath) {
  expect_matches_reference({"hd 24", 6, 3, 24, {3, 200}, {3, 7}});
}

TEST(CpuAttention, SlidingWindowAndSoftcap) {
  expect_matches_reference({"window 10", 4, 1, 32, {5, 90, 400}, {5, 20, 1}, 10});
  expect_matches_reference({"window 130 softcap", 4, 2, 32, {500, 131}, {3, 131}, 130, 5.0f});
}

TEST(CpuAttention, SinksJoinTheSoftmaxOncePerQuery) {
  // One key range (short contexts) and several (the merge adds the sink), with and without a
  // window, decode and prefill, and the float16 cache.
  expect_matches_reference({"sinks decode", 8, 2, 64, {1, 2, 64, 65, 300, 700}, {1, 1, 1, 1, 1, 1}, 0, 0.0f, true});
  expect_matches_reference({"sinks prefill", 8, 4, 32, {70, 260}, {70, 100}, 0, 0.0f, true});
  expect_matches_reference({"sinks window", 8, 8, 32, {200, 33, 5}, {60, 33, 2}, 16, 0.0f, true});
  expect_matches_reference({"sinks hd 24", 4, 2, 24, {150}, {150}, 64, 0.0f, true});
  expect_matches_reference({"sinks f16", 8, 2, 64, {3, 500}, {3, 1}, 0, 0.0f, true, DType::kF16});
}

TEST(CpuAttention, SinksChangeTheResult) {
  // The scenario above without the sinks differs from it: the reference is not blind to them.
  Case with{"sinks", 4, 2, 32, {100}, {1}, 0, 0.0f, true};
  Case without = with;
  without.sinks = false;
  CpuBackend b(CpuBackendOptions{2, MatmulPrecision::kExact});
  const std::vector<float> a = AttentionCheck(with, 7).run(b), c = AttentionCheck(without, 7).run(b);
  EXPECT_GT(max_abs_diff(a, std::vector<double>(c.begin(), c.end())), 1e-2);
}

TEST(CpuAttention, FloatSixteenCacheMatchesItsRoundedValues) {
  expect_matches_reference({"f16", 8, 2, 64, {1, 90, 400}, {1, 90, 1}, 0, 0.0f, false, DType::kF16});
}

// FP8 caches: attention over the codes' values (scales folded into the score scale and the output
// normalization) equals the definition over the dequantized cache to float32 rounding. Scales
// other than 1, one that saturates part of the values (0.002: |x| / 0.002 passes 448 above 0.9),
// e5m2's wider range and coarser steps, GQA, prefill chunks, split contexts, sinks.
TEST(CpuAttention, Fp8CacheMatchesItsDequantizedValues) {
  expect_matches_reference({"e4m3", 8, 2, 64, {1, 90, 400}, {1, 90, 1}, 0, 0.0f, false, DType::kF8E4M3});
  expect_matches_reference({"e4m3 scaled", 8, 2, 64, {1, 90, 700}, {1, 30, 1}, 0, 0.0f, false, DType::kF8E4M3, 16, 0.01f, 0.004f});
  expect_matches_reference({"e4m3 saturating", 4, 4, 32, {300}, {2}, 0, 0.0f, false, DType::kF8E4M3, 16, 0.002f, 0.002f});
  expect_matches_reference({"e5m2", 8, 1, 128, {2, 513}, {2, 3}, 0, 0.0f, true, DType::kF8E5M2, 32, 0.5f, 2.0f});
  expect_matches_reference({"e4m3 hd 24 window", 6, 3, 24, {3, 200}, {3, 7}, 50, 0.0f, false, DType::kF8E4M3});
}

// And against the float32 cache: the bound FP8's rounding allows. Outputs are averages of values
// in [-1, 1], each rounded by at most half a step: 2^-4 relative (e4m3), 2^-3 (e5m2); a context
// of one key returns its value so rounded. Measured worst 0.035 (e4m3) and 0.070 (e5m2).
TEST(CpuAttention, Fp8CacheStaysCloseToTheFloatCache) {
  const Case base{"float", 8, 2, 64, {1, 33, 300, 1000}, {1, 33, 1, 1}};
  CpuBackend b(CpuBackendOptions{2, MatmulPrecision::kExact});
  const std::vector<float> exact = AttentionCheck(base, 99).run(b);
  for (auto [dtype, bound] : {std::pair{DType::kF8E4M3, 0.0625}, std::pair{DType::kF8E5M2, 0.125}}) {
    Case c = base;
    c.kv_dtype = dtype;
    CpuBackend b8(CpuBackendOptions{2, MatmulPrecision::kExact, dtype});
    const std::vector<float> got = AttentionCheck(c, 99).run(b8);
    const double worst = max_abs_diff(got, std::vector<double>(exact.begin(), exact.end()));
    std::printf("[ metrics ] %s cache vs float32 cache: worst |diff| %.4g\n", std::string(dtype_name(dtype)).c_str(), worst);
    EXPECT_LT(worst, bound) << dtype_name(dtype);
    EXPECT_GT(worst, 0.0) << "an FP8 cache that changes nothing is not storing FP8";
  }
}


// Batch invariance, bit for bit: each of a sequence's last n tokens gives the same output as one
// query (a decode step), as the run of a verify step or prefill chunk (where neighbouring tokens
// run as pairs), and as one-query rows over a shared block table (the device verify layout), with
// 1 and 3 threads, float32 and float16 caches, with and without a sliding window (whose ranges
// shift by a key per token). The tokens straddle a range boundary (512) and, for the second
// length, the context length where the span doubles.
TEST(CpuAttention, ATokenIsBitIdenticalAloneInARunAndAsOneQueryRows) {
  const int heads = 6, kv_heads = 2, hd = 64, bs = 16, n = 7;
  for (const auto& [cache_dtype, cache_window] :
       {std::pair{DType::kF32, 0}, std::pair{DType::kF16, 0}, std::pair{DType::kF32, 300}}) {
    // Plain copies: the lambdas below capture them, which clang before 16 refuses for bindings.
    const DType dtype = cache_dtype;
    const int window = cache_window;
    for (int len : {516, 520}) {
      for (int threads : {1, 3}) {
        CpuBackend b(CpuBackendOptions{threads, MatmulPrecision::kExact, dtype});
        const int blocks = (len + bs - 1) / bs;
        std::mt19937 rng(99);
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        auto random = [&](size_t count) {
          std::vector<float> v(count);
          for (float& x : v) x = d(rng);
          return v;
        };
        std::vector<float> kc(static_cast<size_t>(blocks) * bs * kv_heads * hd), vc(kc.size());
        // (float16 elements use the first half of the float buffers)
        Tensor kct = Tensor::make(kc.data(), dtype, {blocks, bs, kv_heads, hd});
        Tensor vct = Tensor::make(vc.data(), dtype, {blocks, bs, kv_heads, hd});
        std::vector<int32_t> table(static_cast<size_t>(blocks));
        std::iota(table.rbegin(), table.rend(), 0);  // blocks in reverse: not the identity
        std::vector<int64_t> slots;
        for (int p = 0; p < len; ++p) slots.push_back(int64_t{table[static_cast<size_t>(p / bs)]} * bs + p % bs);
        std::vector<float> keys = random(static_cast<size_t>(len) * kv_heads * hd), values = random(keys.size());
        AttentionMetadata wm;
        wm.num_tokens = len;
        wm.slot_mapping = slots.data();
        wm.block_size = bs;
        b.write_kv(Tensor::make(keys.data(), DType::kF32, {len, kv_heads, hd}),
                   Tensor::make(values.data(), DType::kF32, {len, kv_heads, hd}), kct, vct, wm);
        const std::vector<float> q = random(static_cast<size_t>(n) * heads * hd);
        const size_t row = static_cast<size_t>(heads) * hd;
        // Sequences over the one block table: (query count, context length) each.
        auto attend = [&](const std::vector<std::pair<int, int>>& seqs, const float* qrows) {
          std::vector<int32_t> qsl{0}, lens, tables;
          for (const auto& [nq, ctx] : seqs) {
            qsl.push_back(qsl.back() + nq);
            lens.push_back(ctx);
            tables.insert(tables.end(), table.begin(), table.end());
          }
          AttentionMetadata m;
          m.num_seqs = static_cast<int>(seqs.size());
          m.num_tokens = qsl.back();
          m.query_start_loc = qsl.data();
          m.seq_lens = lens.data();
          m.block_tables = tables.data();
          m.max_blocks_per_seq = blocks;
          m.block_size = bs;
          AttentionParams ap{1.0f / std::sqrt(static_cast<float>(hd)), window, 0.0f};
          std::vector<float> out(static_cast<size_t>(m.num_tokens) * row, NAN);
          std::vector<float> qin(qrows, qrows + out.size());
          Tensor ot = Tensor::make(out.data(), DType::kF32, {m.num_tokens, heads, hd});
          b.attention(Tensor::make(qin.data(), DType::kF32, {m.num_tokens, heads, hd}), kct, vct, m, ap, ot);
          return out;
        };
        const std::vector<float> as_run = attend({{n, len}}, q.data());
        std::vector<std::pair<int, int>> one_query_rows;
        for (int t = 0; t < n; ++t) one_query_rows.push_back({1, len - n + t + 1});
        const std::vector<float> as_rows = attend(one_query_rows, q.data());
        for (int t = 0; t < n; ++t) {
          const std::vector<float> alone = attend({{1, len - n + t + 1}}, q.data() + t * row);
          EXPECT_EQ(std::memcmp(alone.data(), as_run.data() + t * row, row * sizeof(float)), 0)
              << "token " << t << " of " << len << ", " << threads << " threads, " << dtype_name(dtype) << ", window "
              << window << ": alone vs in a run";
          EXPECT_EQ(std::memcmp(alone.data(), as_rows.data() + t * row, row * sizeof(float)), 0)
              << "token " << t << " of " << len << ", " << threads << " threads, " << dtype_name(dtype) << ", window "
              << window << ": alone vs one-query rows";
        }
      }
    }
  }
}

// --calculate-kv-scales (Backend::calculates_kv_scales): an FP8 cache made with cache_scale 0 takes
// its scales from its first write, vLLM's max |K| / 200 and max |V| / 100 over the stored rows
// (padding rows, slot -1, are not data), and keeps them: later writes encode with them, saturating.
// A first write of zeros gives 1.
TEST(CpuWriteKv, CalculatesFp8ScalesOnTheFirstWrite) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(dtype_name(dtype));
    CpuBackendOptions o;
    o.num_threads = 2;
    o.kv_cache_dtype = dtype;
    o.calculate_kv_scales = true;
    CpuBackend b(o);
    EXPECT_TRUE(b.calculates_kv_scales());
    constexpr int kvh = 2, hd = 8, row = kvh * hd, slots = 16;
    std::vector<uint8_t> kc(slots * row), vc(slots * row);
    Tensor kct = Tensor::make(kc.data(), dtype, {1, slots, kvh, hd});
    Tensor vct = Tensor::make(vc.data(), dtype, {1, slots, kvh, hd});
    kct.cache_scale = vct.cache_scale = 0.0f;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> k(3 * row), v(3 * row);
    for (float& x : k) x = d(rng);
    for (float& x : v) x = 0.5f * d(rng);
    k[row + 5] = -3.5f;  // the stored rows' largest |K| and |V|
    v[2 * row + 9] = 1.25f;
    std::fill(k.begin() + 0, k.begin() + row, 100.0f);  // row 0 is padding: not data
    std::vector<int64_t> slot_of = {-1, 3, 4};
    AttentionMetadata m;
    m.num_tokens = 3;
    m.slot_mapping = slot_of.data();
    m.block_size = slots;
    auto write = [&](std::vector<float>& kk, std::vector<float>& vv) {
      b.write_kv(Tensor::make(kk.data(), DType::kF32, {3, kvh, hd}), Tensor::make(vv.data(), DType::kF32, {3, kvh, hd}),
                 kct, vct, m);
    };
    write(k, v);
    EXPECT_EQ(kct.cache_scale, 3.5f / 200.0f);
    EXPECT_EQ(vct.cache_scale, 1.25f / 100.0f);
    auto code = [&](float x) {
      return dtype == DType::kF8E4M3 ? quant::f32_to_fp8_e4m3(x) : quant::f32_to_fp8_e5m2(x);  // the cache's codes, bit for bit
    };
    for (int t = 1; t < 3; ++t) {
      for (int i = 0; i < row; ++i) {
        const size_t at = static_cast<size_t>(slot_of[static_cast<size_t>(t)]) * row + i;
        EXPECT_EQ(kc[at], code(k[t * row + i] / kct.cache_scale)) << t << " " << i;
        EXPECT_EQ(vc[at], code(v[t * row + i] / vct.cache_scale)) << t << " " << i;
      }
    }
    // Kept: a later, larger write encodes with the first scales (saturating past the largest code).
    std::vector<float> k2(3 * row, 50.0f), v2(3 * row, -0.001f);
    slot_of = {5, 6, 7};
    write(k2, v2);
    EXPECT_EQ(kct.cache_scale, 3.5f / 200.0f);
    EXPECT_EQ(vct.cache_scale, 1.25f / 100.0f);
    EXPECT_EQ(kc[5 * row], code(50.0f / kct.cache_scale));
    // A cache whose first write is all zeros: scale 1, not a division by zero.
    Tensor kz = Tensor::make(kc.data(), dtype, {1, slots, kvh, hd}), vz = Tensor::make(vc.data(), dtype, {1, slots, kvh, hd});
    kz.cache_scale = vz.cache_scale = 0.0f;
    std::vector<float> zeros(3 * row, 0.0f), zeros2(3 * row, 0.0f);
    b.write_kv(Tensor::make(zeros.data(), DType::kF32, {3, kvh, hd}), Tensor::make(zeros2.data(), DType::kF32, {3, kvh, hd}),
               kz, vz, m);
    EXPECT_EQ(kz.cache_scale, 1.0f);
    EXPECT_EQ(vz.cache_scale, 1.0f);
  }
}

}  // namespace
}  // namespace kvasir
