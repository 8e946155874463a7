// DeepSeek multi-head latent attention (MLA) on the CPU, the reference for every device
// (backend.h: write_latent_kv, mla_attention). The cache holds one latent row per token,
// [c_kv | k_pe]; every query head attends to it through the absorbed weights:
//   q_latent[h] = [W_UK[h]^T q_nope[h] | rope(q_pe[h])]        (kv_lora_rank + rope_dim)
//   score(h, j) = q_latent[h] . row_j * scale                   (MQA over one latent "head")
//   o_latent[h] = sum_j softmax(score(h, .))_j * c_kv_j
//   out[h]      = W_UV[h] o_latent[h]
// which is exactly the decompressed attention (k_j = [W_UK c_kv_j | k_pe_j], v_j = W_UV c_kv_j)
// with the matrix products regrouped. Three stages: the latent queries per (token, head); the
// attention over (token, key range) units that read each cached row once for all heads, with a
// token's key ranges merged in order (flash-decoding, as cpu_attention.cpp); W_UV per (token,
// head). How a token's keys are split depends only on its own context length, so a token's
// output is bit-identical alone, batched, in a prefill chunk or in a decode step.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/cache_row_vec.h"
#include "backend/cpu/cpu_backend.h"

namespace kvasir {
namespace {

constexpr int kMaxSplits = 8;
constexpr int kMinKeysPerSplit = 64;

int num_splits(int32_t ctx) {
  return std::clamp((ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit, 1, kMaxSplits);
}

using cpu::axpy;
using cpu::dot;
using cpu::hsum;
using cpu::load1;
using cpu::load8;

void store_row(const float* x, float* dst, int64_t n) { std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float)); }
void store_row(const float* x, uint16_t* dst, int64_t n) {  // round to nearest even (F16C)
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// RoPE of one vector of rotary_dim values at `pos`: the same arithmetic as CpuBackend::rope.
void rotate(float* v, int32_t pos, const RopeParams& p) {
  const int half = p.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float theta = static_cast<float>(pos) * p.inv_freq[i];
    const float c = std::cos(theta) * p.attention_factor;
    const float s = std::sin(theta) * p.attention_factor;
    const int i0 = p.neox ? i : 2 * i;
    const int i1 = p.neox ? i + half : 2 * i + 1;
    const float a = v[i0], b = v[i1];
    v[i0] = a * c - b * s;
    v[i1] = b * c + a * s;
  }
}

}  // namespace

void CpuBackend::write_latent_kv(const Tensor& c_kv, const Tensor& k_pe, const int32_t* positions,
                                 const RopeParams& rope, Tensor& cache, const AttentionMetadata& m) {
  const int64_t L = c_kv.cols(), R = k_pe.cols(), row = L + R;
  const int64_t num_slots = cache.dim(0) * cache.dim(1);
  KVASIR_CHECK(cache.cols() == row && c_kv.rows() >= m.num_tokens && k_pe.rows() >= m.num_tokens);
  KVASIR_CHECK(rope.rotary_dim == R && c_kv.dtype == DType::kF32 && k_pe.dtype == DType::kF32);
  const bool f16 = cache.dtype == DType::kF16;
  KVASIR_CHECK(f16 || cache.dtype == DType::kF32);
  thread_local std::vector<float> pe;  // one rotated k_pe; grows once
  pe.resize(static_cast<size_t>(R));
  for (int t = 0; t < m.num_tokens; ++t) {
    const int64_t slot = m.slot_mapping[t];
    if (slot < 0) continue;  // padding token: nothing to store
    KVASIR_CHECK(slot < num_slots);
    std::memcpy(pe.data(), k_pe.ptr<float>() + t * R, static_cast<size_t>(R) * sizeof(float));
    rotate(pe.data(), positions[t], rope);
    const float* ck = c_kv.ptr<float>() + t * L;
    if (f16) {
      uint16_t* dst = static_cast<uint16_t*>(cache.data) + slot * row;
      store_row(ck, dst, L);
      store_row(pe.data(), dst + L, R);
    } else {
      float* dst = cache.ptr<float>() + slot * row;
      store_row(ck, dst, L);
      store_row(pe.data(), dst + L, R);
    }
  }
}

void CpuBackend::mla_attention(const Tensor& q, const int32_t* positions, const Tensor& cache,
                               const AttentionMetadata& m, const MlaParams& p, Tensor& out) {
  const int64_t H = q.dim(1), qk = q.dim(2);
  const int64_t L = p.w_uk_t.dim(1), nope = p.w_uk_t.dim(2), R = qk - nope, V = p.w_uv.dim(1);
  const int64_t row = L + R;
  const int bs = m.block_size;
  KVASIR_CHECK(q.ndim == 3 && q.dim(0) >= m.num_tokens && q.dtype == DType::kF32);
  KVASIR_CHECK(p.w_uk_t.ndim == 3 && p.w_uk_t.dim(0) == H && p.w_uk_t.dtype == DType::kF32);
  KVASIR_CHECK(p.w_uv.ndim == 3 && p.w_uv.dim(0) == H && p.w_uv.dim(2) == L && p.w_uv.dtype == DType::kF32);
  KVASIR_CHECK(R > 0 && p.rope.rotary_dim == R && cache.cols() == row && cache.dim(1) == bs);
  KVASIR_CHECK(out.numel() >= int64_t{m.num_tokens} * H * V && out.dtype == DType::kF32);
  const int64_t n = m.num_tokens;

  // Stage 1: latent queries [n, H, L + R].
  mla_q_.resize(static_cast<size_t>(n * H * row));
  const float* qp = q.ptr<float>();
  const float* uk = p.w_uk_t.ptr<float>();
  auto absorb = [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / H, h = item % H;
      const float* qn = qp + (t * H + h) * qk;
      float* ql = mla_q_.data() + item * row;
      const float* w = uk + h * L * nope;
      for (int64_t l = 0; l < L; ++l) ql[l] = dot(w + l * nope, qn, nope);
      std::memcpy(ql + L, qn + nope, static_cast<size_t>(R) * sizeof(float));
      rotate(ql + L, positions[t], p.rope);
    }
  };
  if (n * H < 2) absorb(0, n * H);
  else pool_->parallel_for(n * H, absorb);

  // Stage 2: latent outputs [n, H, L], over (token, key range) units.
  std::vector<MlaTask>& tasks = mla_tasks_;
  tasks.clear();
  int64_t num_units = 0;
  bool any_split = false;
  for (int s = 0; s < m.num_seqs; ++s) {
    const int q0 = m.query_start_loc[s], q1 = m.query_start_loc[s + 1];
    const int first_pos = m.seq_lens[s] - (q1 - q0);
    KVASIR_CHECK(first_pos >= 0);
    for (int t = q0; t < q1; ++t) {
      const int32_t ctx = first_pos + (t - q0) + 1;
      const int splits = num_splits(ctx);
      any_split |= splits > 1;
      tasks.push_back({t, s, ctx, splits, num_units});
      num_units += splits;
    }
  }
  // A split unit's un-normalized result per head: o[L] (sum of exp * c_kv), max, sum of exp.
  const int64_t partial_stride = L + 2;
  if (any_split) mla_partials_.resize(static_cast<size_t>(num_units * H * partial_stride));
  mla_o_.resize(static_cast<size_t>(n * H * L));
  float* partials = mla_partials_.data();
  float* olat = mla_o_.data();

  auto run_units = [&](const auto* kc) {
    auto unit_body = [&](int64_t b, int64_t e) {
      thread_local std::vector<float> scores;  // [H, len]; grows to the longest key range once
      thread_local std::vector<const std::remove_cv_t<std::remove_pointer_t<decltype(kc)>>*> rows;
      for (int64_t unit = b; unit < e; ++unit) {
        const MlaTask& task = *(std::upper_bound(tasks.begin(), tasks.end(), unit,
                                                 [](int64_t u, const MlaTask& t) { return u < t.unit0; }) -
                                1);
        const int split = static_cast<int>(unit - task.unit0);
        const int32_t j0 = static_cast<int32_t>(static_cast<int64_t>(task.ctx) * split / task.splits);
        const int32_t j1 = static_cast<int32_t>(static_cast<int64_t>(task.ctx) * (split + 1) / task.splits);
        const int32_t len = j1 - j0;
        const int32_t* table = m.block_tables + static_cast<int64_t>(task.seq) * m.max_blocks_per_seq;
        rows.resize(static_cast<size_t>(len));
        for (int32_t j = j0; j < j1; ++j) {
          const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
          rows[static_cast<size_t>(j - j0)] = kc + slot * row;
        }
        scores.resize(static_cast<size_t>(H * len));
        const float* ql = mla_q_.data() + static_cast<int64_t>(task.token) * H * row;
        for (int32_t j = 0; j < len; ++j) {
          for (int64_t h = 0; h < H; ++h) scores[static_cast<size_t>(h * len + j)] = dot(ql + h * row, rows[static_cast<size_t>(j)], row) * p.scale;
        }
        float* outs = task.splits == 1 ? olat + static_cast<int64_t>(task.token) * H * L : nullptr;
        for (int64_t h = 0; h < H; ++h) {
          float* sc = scores.data() + h * len;
          float mx = -INFINITY;
          for (int32_t j = 0; j < len; ++j) mx = std::max(mx, sc[j]);
          float sum = 0.0f;
          for (int32_t j = 0; j < len; ++j) {
            sc[j] = std::exp(sc[j] - mx);
            sum += sc[j];
          }
          float* o = outs != nullptr ? outs + h * L : partials + (unit * H + h) * partial_stride;
          std::fill(o, o + L, 0.0f);
          if (outs == nullptr) {
            o[L] = mx;
            o[L + 1] = sum;
          } else {
            for (int32_t j = 0; j < len; ++j) sc[j] /= sum;
          }
        }
        // Each row once, for every head (the c_kv part is the value).
        for (int32_t j = 0; j < len; ++j) {
          for (int64_t h = 0; h < H; ++h) {
            float* o = outs != nullptr ? outs + h * L : partials + (unit * H + h) * partial_stride;
            axpy(scores[static_cast<size_t>(h * len + j)], rows[static_cast<size_t>(j)], o, L);
          }
        }
      }
    };
    if (num_units < 2) {
      unit_body(0, num_units);
    } else {
      const int64_t grain = std::max<int64_t>(1, num_units / (8 * pool_->num_threads()));
      pool_->parallel_for_dynamic(num_units, grain, unit_body);
    }
  };
  if (cache.dtype == DType::kF16) {
    run_units(static_cast<const uint16_t*>(cache.data));
  } else {
    KVASIR_CHECK(cache.dtype == DType::kF32);
    run_units(cache.ptr<float>());
  }
  // Merges a token's key ranges, in range order, per head.
  auto merge_body = [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const MlaTask& task = tasks[static_cast<size_t>(item / H)];
      if (task.splits == 1) continue;
      const int64_t h = item % H;
      float mx = -INFINITY;
      for (int s = 0; s < task.splits; ++s) mx = std::max(mx, partials[((task.unit0 + s) * H + h) * partial_stride + L]);
      float* o = olat + (static_cast<int64_t>(task.token) * H + h) * L;
      std::fill(o, o + L, 0.0f);
      float sum = 0.0f;
      for (int s = 0; s < task.splits; ++s) {
        const float* part = partials + ((task.unit0 + s) * H + h) * partial_stride;
        const float w = std::exp(part[L] - mx);
        sum += w * part[L + 1];
        axpy(w, part, o, L);
      }
      for (int64_t l = 0; l < L; ++l) o[l] /= sum;
    }
  };
  if (any_split) {
    const int64_t items = static_cast<int64_t>(tasks.size()) * H;
    if (items < 2) merge_body(0, items);
    else pool_->parallel_for(items, merge_body);
  }

  // Stage 3: out[t, h] = W_UV[h] o_latent[t, h].
  const float* uv = p.w_uv.ptr<float>();
  float* op = out.ptr<float>();
  auto expand = [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t h = item % H;
      const float* ol = olat + item * L;
      const float* w = uv + h * V * L;
      float* o = op + item * V;
      for (int64_t v = 0; v < V; ++v) o[v] = dot(w + v * L, ol, L);
    }
  };
  if (n * H < 2) expand(0, n * H);
  else pool_->parallel_for(n * H, expand);
}

}  // namespace kvasir
