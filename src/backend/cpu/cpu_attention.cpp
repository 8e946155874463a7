// Paged attention on the CPU: the reference for every device. Each scheduled token attends over
// its sequence's cached keys through the block table, so prefill, chunked prefill and decode are
// one code path. Work is split over (token, kv-head, key range) units so a GQA group reads each key
// once and a single decoding sequence still spreads over every thread (flash-decoding); partial
// results of a token's key ranges are merged, by the thread that finishes its last range. Two
// neighbouring tokens of a sequence cut into as many ranges (a prefill's) run their units for a
// (kv head, range) as one, over the union of their nearly equal ranges, each key read once for
// both (attention_kernels.h's pair entry points); each token's arithmetic stays its own.
// Batch invariance: how a token's keys are split depends only on its own context length, a
// paired token's results equal its results alone to the bit, and the merge runs in a fixed
// order, so a token's output is bit-identical alone, batched, in a prefill chunk or in a decode
// step.
// The cache holds float32, float16 (--kv-cache-dtype float16: K and V rounded to nearest when
// written, widened to float32 when read) or FP8 codes (fp8 / fp8_e4m3 / fp8_e5m2: x / scale
// rounded and saturated when written, with the tensor's per-layer cache_scale; the scale is
// applied once per score and once per output, not per element). All arithmetic stays float32.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cache_row_vec.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/kv_cache_scales.h"

namespace kvasir {
namespace {

// float32 -> float16, round to nearest even (F16C).
void to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// float32 / scale -> FP8 codes (fp8_cache_codes.h: round to nearest even, saturating). The
// division (not a multiply by 1 / scale) is what vLLM's cache write computes.
template <uint8_t (*Encode)(float)>
void to_fp8(const float* x, uint8_t* y, int64_t n, float scale) {
  if (scale == 1.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = Encode(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = Encode(x[i] / scale);
  }
}

}  // namespace

void CpuBackend::write_kv(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                          const AttentionMetadata& m) {
  const int64_t row = k.dim(1) * k.dim(2);  // kv_heads * head_dim
  const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
  KVASIR_CHECK(k_cache.dim(2) * k_cache.dim(3) == row && v.numel() == k.numel());
  const DType kd = k_cache.dtype;
  const bool f16 = kd == DType::kF16;
  KVASIR_CHECK((f16 || kd == DType::kF32 || is_fp8(kd)) && v_cache.dtype == kd);
  if (is_fp8(kd) && (k_cache.cache_scale == 0.0f || v_cache.cache_scale == 0.0f)) {
    // Backend::calculates_kv_scales: this cache's first write sets its scales (the codes keep NaN).
    set_calculated_kv_scales(k.ptr<float>(), v.ptr<float>(), m, row, [](float x) { return x; }, k_cache, v_cache);
  }
  KVASIR_CHECK(k_cache.cache_scale > 0.0f && v_cache.cache_scale > 0.0f);
  KVASIR_CHECK_MSG(is_fp8(kd) || (k_cache.cache_scale == 1.0f && v_cache.cache_scale == 1.0f),
                   "write_kv: only an FP8 cache is scaled");
  for (int t = 0; t < m.num_tokens; ++t) {
    const int64_t slot = m.slot_mapping[t];
    if (slot < 0) continue;  // padding token: nothing to store
    KVASIR_CHECK(slot < num_slots);
    const float* ks = k.ptr<float>() + t * row;
    const float* vs = v.ptr<float>() + t * row;
    uint8_t* k8 = static_cast<uint8_t*>(k_cache.data) + slot * row;
    uint8_t* v8 = static_cast<uint8_t*>(v_cache.data) + slot * row;
    if (kd == DType::kF8E4M3) {
      to_fp8<cpu::f32_to_e4m3_code>(ks, k8, row, k_cache.cache_scale);
      to_fp8<cpu::f32_to_e4m3_code>(vs, v8, row, v_cache.cache_scale);
    } else if (kd == DType::kF8E5M2) {
      to_fp8<cpu::f32_to_e5m2_code>(ks, k8, row, k_cache.cache_scale);
      to_fp8<cpu::f32_to_e5m2_code>(vs, v8, row, v_cache.cache_scale);
    } else if (f16) {
      to_f16(ks, static_cast<uint16_t*>(k_cache.data) + slot * row, row);
      to_f16(vs, static_cast<uint16_t*>(v_cache.data) + slot * row, row);
    } else {
      std::memcpy(k_cache.ptr<float>() + slot * row, ks, row * sizeof(float));
      std::memcpy(v_cache.ptr<float>() + slot * row, vs, row * sizeof(float));
    }
  }
}

namespace {

// A token's keys are cut into at most kMaxSplits ranges of at least kMinKeysPerSplit keys: enough
// units for every thread at batch 1, few enough that merging costs little.
constexpr int kMaxSplits = 8;
constexpr int kMinKeysPerSplit = 64;
constexpr int kMaxGroup = 64;  // query heads per kv head

int num_splits(int32_t ctx) {
  return std::clamp((ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit, 1, kMaxSplits);
}

// Cache rows widened to float32 (cache_row_vec.h, shared with cpu_mla_attention.cpp).
using cpu::axpy;
using cpu::load1;

// The largest of x[0..n) (max is exact in any order).
float max_of(const float* x, int32_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float mx = -INFINITY;
  for (float v : lanes) mx = std::max(mx, v);
  for (; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

void scale(float s, float* y, int n) {
  for (int d = 0; d < n; ++d) y[d] *= s;
}

// o_g = sum_j p[g * len + j] * v_j for every g < group (o_g overwritten): the kernel set's when
// hd is a multiple of 16, else one axpy per key.
template <typename T>
void weighted_sum(const cpu::AttentionKernels<T>& kernels, const T* vc, const int64_t* offsets, int32_t len,
                  const float* p, int group, int hd, float* const* o) {
  if (hd % 16 != 0) {
    for (int g = 0; g < group; ++g) {
      std::fill(o[g], o[g] + hd, 0.0f);
      for (int32_t j = 0; j < len; ++j) axpy(p[static_cast<size_t>(g) * len + j], vc + offsets[j], o[g], hd);
    }
    return;
  }
  kernels.weighted_sum(vc, offsets, len, p, group, hd, o);
}

// o_g = ... for two tokens over the union of their key ranges (r0, r1: attention_kernels.h's
// weighted_sum_pair), each token's result as weighted_sum()'s over its own range.
template <typename T>
void weighted_sum_pair(const cpu::AttentionKernels<T>& kernels, const T* vc, const int64_t* offsets,
                       const int32_t* r0, const int32_t* r1, const float* const* p, int group, int hd,
                       float* const* const* o) {
  if (hd % 16 != 0) {
    for (int t = 0; t < 2; ++t) weighted_sum(kernels, vc, offsets + r0[t], r1[t] - r0[t], p[t], group, hd, o[t]);
    return;
  }
  kernels.weighted_sum_pair(vc, offsets, r0, r1, p, group, hd, o);
}

struct AttnTask {
  int token;       // row in q / out
  int seq;         // sequence index in the metadata
  int32_t pos;     // absolute position of the token
  int32_t lo;      // first key position it sees
  int splits;      // key ranges
  int64_t unit0;   // its first unit: units unit0 + kvh * splits + s (its partials' place)
};

// What one thread runs at a time: a token, or two neighbouring tokens of a sequence with as many
// key ranges (a prefill's), whose ranges nearly coincide and run as one, each key read once for
// both (attention_kernels.h's pair entry points: each token's result as if alone).
struct AttnJob {
  int task;        // its first task
  int num_tokens;  // 1 or 2: tasks task .. task + num_tokens - 1
  int64_t unit0;   // its first work item: items unit0 + kvh * splits + s
};

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const AttentionMetadata& m, const AttentionParams& p, Tensor& out) {
  const int num_heads = static_cast<int>(q.dim(1));
  const int hd = static_cast<int>(q.dim(2));
  const int kv_heads = static_cast<int>(k_cache.dim(2));
  const int group = num_heads / kv_heads;
  const int bs = m.block_size;
  KVASIR_CHECK(num_heads % kv_heads == 0 && k_cache.dim(3) == hd && k_cache.dim(1) == bs);
  KVASIR_CHECK_MSG(group <= kMaxGroup, "attention: more query heads per kv head than supported");

  std::vector<AttnTask> tasks;
  std::vector<AttnJob> jobs;
  tasks.reserve(static_cast<size_t>(m.num_tokens));
  jobs.reserve(static_cast<size_t>(m.num_tokens));
  int64_t num_units = 0, num_items = 0;
  bool any_split = false;
  for (int s = 0; s < m.num_seqs; ++s) {
    const int q0 = m.query_start_loc[s], q1 = m.query_start_loc[s + 1];
    const int first_pos = m.seq_lens[s] - (q1 - q0);
    KVASIR_CHECK(first_pos >= 0);
    for (int t = q0; t < q1; ++t) {
      const int32_t pos = first_pos + (t - q0);
      const int32_t lo = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
      const int splits = num_splits(pos - lo + 1);
      any_split |= splits > 1;
      // Pair with the previous token when it is alone, of this sequence, and cut the same way.
      const int prev = static_cast<int>(tasks.size()) - 1;
      if (t > q0 && jobs.back().num_tokens == 1 && tasks[static_cast<size_t>(prev)].splits == splits) {
        jobs.back().num_tokens = 2;
      } else {
        jobs.push_back({prev + 1, 1, num_items});
        num_items += static_cast<int64_t>(kv_heads) * splits;
      }
      tasks.push_back({t, s, pos, lo, splits, num_units});
      num_units += static_cast<int64_t>(kv_heads) * splits;
    }
  }
  // A split unit's un-normalized result per query head: o[hd] (sum of exp * v), max, sum of exp.
  const int64_t partial_stride = hd + 2;
  if (any_split) {
    attn_partials_.resize(static_cast<size_t>(num_units * group * partial_stride));
    attn_pending_.resize(tasks.size() * static_cast<size_t>(kv_heads));
    for (size_t t = 0; t < tasks.size(); ++t) {
      std::fill_n(attn_pending_.begin() + static_cast<int64_t>(t) * kv_heads, kv_heads, tasks[t].splits);
    }
  }
  float* partials = attn_partials_.data();
  int32_t* pending = attn_pending_.data();

  const float* qp = q.ptr<float>();
  float* op = out.ptr<float>();
  const int64_t kv_row = static_cast<int64_t>(kv_heads) * hd;
  const DType kd = k_cache.dtype;
  KVASIR_CHECK((kd == DType::kF16 || kd == DType::kF32 || is_fp8(kd)) && v_cache.dtype == kd);
  // FP8 codes widen to code values: K's scale joins the score scale, V's the final normalization
  // (both exactly 1 for float caches, so their results are unchanged to the bit).
  KVASIR_CHECK_MSG(is_fp8(kd) || (k_cache.cache_scale == 1.0f && v_cache.cache_scale == 1.0f),
                   "attention: only an FP8 cache is scaled");
  const float score_scale = p.scale * k_cache.cache_scale;
  const float v_scale = v_cache.cache_scale;
  // A sink joins each query's softmax once: in the unit when its keys are one range, else in the
  // merge, after the ranges' states (so the key sums keep their order with or without sinks).
  const float* sinks = p.sinks.data != nullptr ? p.sinks.ptr<float>() : nullptr;
  KVASIR_CHECK(sinks == nullptr || (p.sinks.dtype == DType::kF32 && p.sinks.numel() == num_heads));

  // Merges a token's key ranges, in range order, for one kv head's query group: run by the thread
  // that finishes the last of them (attn_pending_), while they are still in its cache. Which
  // thread that is does not matter: the order of the merge's arithmetic is fixed.
  auto merge = [&](const AttnTask& task, int kvh) {
    for (int g = 0; g < group; ++g) {
      const float* first = partials + ((task.unit0 + kvh * task.splits) * group + g) * partial_stride;
      const float sink = sinks != nullptr ? sinks[kvh * group + g] : -INFINITY;
      float mx = sink;
      for (int s = 0; s < task.splits; ++s) mx = std::max(mx, first[s * group * partial_stride + hd]);
      float* o = op + (static_cast<int64_t>(task.token) * num_heads + kvh * group + g) * hd;
      const int64_t stride = static_cast<int64_t>(group) * partial_stride;  // between ranges
      float w[kMaxSplits];
      float sum = 0.0f;
      for (int s = 0; s < task.splits; ++s) {
        const float* part = first + s * stride;
        w[s] = std::exp(part[hd] - mx);
        sum += w[s] * part[hd + 1];
      }
      if (sink != -INFINITY) sum += std::exp(sink - mx);
      const float inv = v_scale / sum;
      if (hd % 8 == 0) {
        // Eight columns at a time through all ranges, kept in a register: each column is the
        // same FMA chain from 0 in range order as axpy's, then the same multiply as scale's.
        const __m256 iv = _mm256_set1_ps(inv);
        for (int d = 0; d < hd; d += 8) {
          __m256 acc = _mm256_setzero_ps();
          for (int s = 0; s < task.splits; ++s) {
            acc = _mm256_fmadd_ps(_mm256_set1_ps(w[s]), _mm256_loadu_ps(first + s * stride + d), acc);
          }
          _mm256_storeu_ps(o + d, _mm256_mul_ps(acc, iv));
        }
      } else {
        std::fill(o, o + hd, 0.0f);
        for (int s = 0; s < task.splits; ++s) axpy(w[s], first + s * stride, o, hd);
        scale(inv, o, hd);
      }
    }
  };

  // The units over a cache of float32 or float16 elements (kc, vc).
  auto run_units = [&](const auto* kc, const auto* vc) {
    using Elem = std::remove_cv_t<std::remove_pointer_t<decltype(kc)>>;
    const cpu::AttentionKernels<Elem>& kernels = cpu::attention_kernels<Elem>();
    auto unit_body = [&](int64_t b, int64_t e) {
      thread_local std::vector<float> scores;  // grow to the longest key ranges once, then reused
      thread_local std::vector<int64_t> offsets;
      const int64_t row = kv_row;  // a copy: through the reference, each offset's store reloaded it
      float* outs[2][kMaxGroup];
      float sums[2][kMaxGroup];
      // The job owning item b: the last whose first item is <= b (jobs are in item order); later
      // items walk forward from it.
      size_t ji = static_cast<size_t>(
          std::upper_bound(jobs.begin(), jobs.end(), b, [](int64_t u, const AttnJob& j) { return u < j.unit0; }) -
          jobs.begin() - 1);
      // The ranges of one (job, kv head) done in a row here, not yet counted off attn_pending_:
      // the thread whose count leaves none merges that kv head's ranges of the job's tokens.
      // Counted once per run (most runs are all of a token's ranges), not once per range: each
      // locked decrement waits for the partials' stores to drain (measured, 1.8% of a prefill).
      // acq_rel makes every range's partials, written before its count, visible to the merger.
      size_t run_job = 0;
      int run_kvh = -1, run_ranges = 0;
      auto count_off = [&] {
        if (run_ranges == 0) return;
        const AttnJob& rj = jobs[run_job];
        for (int t = 0; t < rj.num_tokens; ++t) {
          std::atomic_ref<int32_t> left(pending[static_cast<size_t>(rj.task + t) * kv_heads + run_kvh]);
          if (left.fetch_sub(run_ranges, std::memory_order_acq_rel) == run_ranges) {
            merge(tasks[static_cast<size_t>(rj.task + t)], run_kvh);
          }
        }
        run_ranges = 0;
      };
      for (int64_t item = b; item < e; ++item) {
        while (ji + 1 < jobs.size() && jobs[ji + 1].unit0 <= item) ++ji;
        const AttnJob& job = jobs[ji];
        const int n = job.num_tokens;
        const AttnTask* task[2] = {&tasks[static_cast<size_t>(job.task)], &tasks[static_cast<size_t>(job.task + n - 1)]};
        const int splits = task[0]->splits;
        const int64_t local = item - job.unit0;
        const int kvh = static_cast<int>(local / splits), split = static_cast<int>(local % splits);
        if (ji != run_job || kvh != run_kvh) {
          count_off();
          run_job = ji;
          run_kvh = kvh;
        }
        // Each token's range, as it would be alone; the union [u0, u1) is what the pass reads.
        int32_t j0[2] = {}, j1[2] = {};
        for (int t = 0; t < n; ++t) {
          const int32_t ctx = task[t]->pos - task[t]->lo + 1;
          j0[t] = task[t]->lo + static_cast<int32_t>(static_cast<int64_t>(ctx) * split / splits);
          j1[t] = task[t]->lo + static_cast<int32_t>(static_cast<int64_t>(ctx) * (split + 1) / splits);
        }
        const int32_t u0 = std::min(j0[0], j0[n - 1]), u1 = std::max(j1[0], j1[n - 1]);
        int32_t r0[2] = {}, r1[2] = {}, len[2] = {};
        for (int t = 0; t < n; ++t) {
          r0[t] = j0[t] - u0;
          r1[t] = j1[t] - u0;
          len[t] = j1[t] - j0[t];
        }
        const int32_t* table = m.block_tables + static_cast<int64_t>(task[0]->seq) * m.max_blocks_per_seq;
        scores.resize(static_cast<size_t>(len[0] + (n == 2 ? len[1] : 0)) * group);
        offsets.resize(static_cast<size_t>(u1 - u0));
        // A block at a time: one table lookup (and no division) per block rather than per key.
        for (int32_t j = u0; j < u1;) {
          const int32_t blk = j / bs, end = std::min(u1, (blk + 1) * bs);
          const int64_t first = (static_cast<int64_t>(table[blk]) * bs - static_cast<int64_t>(blk) * bs) * row +
                                static_cast<int64_t>(kvh) * hd;
          for (int64_t off = first + static_cast<int64_t>(j) * row; j < end; ++j, off += row) {
            offsets[static_cast<size_t>(j - u0)] = off;
          }
        }
        // Scores for the whole GQA group of each token: token t's at sc[t], [group, len[t]].
        float* sc[2] = {scores.data(), scores.data() + static_cast<size_t>(len[0]) * group};
        const float* qg[2];
        for (int t = 0; t < n; ++t) qg[t] = qp + (static_cast<int64_t>(task[t]->token) * num_heads + kvh * group) * hd;
        if (n == 1) {
          kernels.scores(qg[0], group, kc, offsets.data(), len[0], hd, score_scale, sc[0]);
        } else {
          kernels.scores_pair(qg, group, kc, offsets.data(), u1 - u0, r0, r1, hd, score_scale, sc);
        }
        if (p.softcap > 0.0f) {
          for (float& x : scores) x = p.softcap * std::tanh(x / p.softcap);
        }
        for (int t = 0; t < n; ++t) {
          const AttnTask& tk = *task[t];
          const int64_t unit = tk.unit0 + local;  // this token's own unit: its partials' place
          for (int g = 0; g < group; ++g) {
            float* x = sc[t] + static_cast<size_t>(g) * len[t];
            const float mx = max_of(x, len[t]);
            const float sink = sinks != nullptr && splits == 1 ? sinks[kvh * group + g] : -INFINITY;
            const float top = std::max(mx, sink);
            float sum = kernels.exp_sum(x, len[t], top);
            if (sink != -INFINITY) sum += std::exp(sink - top);
            float* o = splits == 1 ? op + (static_cast<int64_t>(tk.token) * num_heads + kvh * group + g) * hd
                                   : partials + (unit * group + g) * partial_stride;
            outs[t][g] = o;
            if (splits > 1) {
              o[hd] = top;
              o[hd + 1] = sum;
            } else {
              sums[t][g] = sum;
            }
          }
        }
        if (n == 1) {
          weighted_sum(kernels, vc, offsets.data(), len[0], sc[0], group, hd, outs[0]);
        } else {
          const float* pw[2] = {sc[0], sc[1]};
          float* const* ow[2] = {outs[0], outs[1]};
          weighted_sum_pair(kernels, vc, offsets.data(), r0, r1, pw, group, hd, ow);
        }
        if (splits == 1) {
          for (int t = 0; t < n; ++t) {
            for (int g = 0; g < group; ++g) scale(v_scale / sums[t][g], outs[t][g], hd);
          }
        } else {
          ++run_ranges;
        }
      }
      count_off();
    };
    if (num_items < 2) {
      unit_body(0, num_items);
    } else {
      // Items differ in length (contexts, split remainders, pairs): hand them out dynamically.
      const int64_t grain = std::max<int64_t>(1, num_items / (8 * pool_->num_threads()));
      pool_->parallel_for_dynamic(num_items, grain, unit_body);
    }
  };
  if (kd == DType::kF8E4M3) {
    run_units(static_cast<const cpu::E4m3Code*>(k_cache.data), static_cast<const cpu::E4m3Code*>(v_cache.data));
  } else if (kd == DType::kF8E5M2) {
    run_units(static_cast<const cpu::E5m2Code*>(k_cache.data), static_cast<const cpu::E5m2Code*>(v_cache.data));
  } else if (kd == DType::kF16) {
    run_units(static_cast<const uint16_t*>(k_cache.data), static_cast<const uint16_t*>(v_cache.data));
  } else {
    run_units(k_cache.ptr<float>(), v_cache.ptr<float>());
  }
}

}  // namespace kvasir
