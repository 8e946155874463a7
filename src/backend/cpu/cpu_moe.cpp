// Mixture of experts on the CPU: the reference for every device (moe_params.h has the semantics).
// moe_route scores, groups and picks each token's experts on its own. moe_experts sorts a chunk of
// the batch's (token, slot) pairs by expert, gathers their rows, runs every active expert's
// gate/up and then down product in one grouped matmul each (the `linear` kernels, GGUF blocks read
// in place, row tiles of all experts shared by all threads, so a decode step with one token per
// expert still keeps every thread busy and reads only the chosen experts' weights), and sums each
// token's expert outputs in slot order.
// Batch invariance: a row's products do not depend on the other rows (matmul's contract), and a
// token's sum runs over its own slots in a fixed order, so its output is bit-identical alone or
// batched.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_exp.h"

namespace kvasir {
namespace {

// Bytes of gathered rows and intermediates one pass of moe_experts holds at most: a larger batch
// runs in chunks of tokens (results do not change, only how often weights are streamed).
constexpr size_t kMoeChunkBytes = size_t{64} << 20;

size_t align64(size_t v) { return (v + 63) / 64 * 64; }

// Index of the best candidate of `v` (larger wins, ties to the lower index) among those with
// allowed[i], or -1 when none is allowed. NaN never wins against a number, yet a NaN candidate is
// still returned when nothing else is left, so the result is always a valid index.
int best_index(const float* v, const bool* allowed, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i) {
    if (allowed[i] && (best < 0 || v[i] > v[best])) best = i;
  }
  return best;
}

// Per-thread scratch of moe_route for E experts in G groups.
struct RouteScratch {
  float* scores;        // [E]
  float* choice;        // [E]
  float* group_scores;  // [G]
  bool* eligible;       // [E] may still be picked
  bool* group_open;     // [G] may still be kept
  bool* group_kept;     // [G]
  static size_t bytes(int64_t e, int64_t groups) {
    return align64(2 * e * sizeof(float)) + align64(groups * sizeof(float)) + align64(e) + 2 * align64(groups);
  }
  static RouteScratch at(uint8_t* p, int64_t e, int64_t groups) {
    RouteScratch s;
    s.scores = reinterpret_cast<float*>(p);
    s.choice = s.scores + e;
    p += align64(2 * e * sizeof(float));
    s.group_scores = reinterpret_cast<float*>(p);
    p += align64(groups * sizeof(float));
    s.eligible = reinterpret_cast<bool*>(p);
    s.group_open = reinterpret_cast<bool*>(p + align64(e));
    s.group_kept = reinterpret_cast<bool*>(p + align64(e) + align64(groups));
    return s;
  }
};

void route_token(const float* logits, int64_t num_experts, const MoeRouting& r, const float* bias, RouteScratch s,
                 int32_t* ids, float* weights) {
  const int e_n = static_cast<int>(num_experts);
  if (r.scoring == MoeScoring::kSoftmax) {
    float mx = logits[0];
    for (int e = 1; e < e_n; ++e) mx = std::max(mx, logits[e]);
    float sum = 0.0f;
    for (int e = 0; e < e_n; ++e) {
      s.scores[e] = std::exp(logits[e] - mx);
      sum += s.scores[e];
    }
    for (int e = 0; e < e_n; ++e) s.scores[e] /= sum;
  } else {
    for (int e = 0; e < e_n; ++e) s.scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int e = 0; e < e_n; ++e) {
    s.choice[e] = bias != nullptr ? s.scores[e] + bias[e] : s.scores[e];
    s.eligible[e] = true;
  }
  if (r.num_groups > 1) {
    const int group_size = e_n / r.num_groups;
    for (int g = 0; g < r.num_groups; ++g) {
      const float* c = s.choice + g * group_size;
      float first = c[0], second = -std::numeric_limits<float>::infinity();
      for (int i = 1; i < group_size; ++i) {
        if (c[i] > first) {
          second = first;
          first = c[i];
        } else if (c[i] > second) {
          second = c[i];
        }
      }
      s.group_scores[g] = r.group_score == MoeGroupScore::kMax ? first : first + second;
      s.group_open[g] = true;
      s.group_kept[g] = false;
    }
    for (int n = 0; n < r.topk_groups; ++n) {
      const int g = best_index(s.group_scores, s.group_open, r.num_groups);
      s.group_open[g] = false;
      s.group_kept[g] = true;
    }
    for (int e = 0; e < e_n; ++e) s.eligible[e] = s.group_kept[e / group_size];
  }
  float sum = 0.0f;
  for (int j = 0; j < r.top_k; ++j) {
    const int e = best_index(s.choice, s.eligible, e_n);
    s.eligible[e] = false;
    ids[j] = e;
    weights[j] = s.scores[e];
    sum += weights[j];
  }
  if (r.renormalize) {
    // DeepSeek's epsilon: keeps all-underflowed sigmoid scores finite, changes nothing else.
    const float denom = sum + 1e-20f;
    for (int j = 0; j < r.top_k; ++j) weights[j] /= denom;
  }
  if (r.routed_scaling_factor != 1.0f) {
    for (int j = 0; j < r.top_k; ++j) weights[j] *= r.routed_scaling_factor;
  }
}

// out = act(g, u) over n elements (g and u already biased).
void activate_row(GateActivation act, const SwigluOaiParams& oai, const float* g, const float* u, float* out,
                  int64_t n) {
  switch (act) {
    case GateActivation::kSilu: {
      int64_t i = 0;
      const __m256 one = _mm256_set1_ps(1.0f);
      for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 den = _mm256_add_ps(one, cpu::exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
      }
      for (; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      break;
    }
    case GateActivation::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const float x = g[i];
        out[i] = 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
      }
      break;
    case GateActivation::kSwigluOai:
      for (int64_t i = 0; i < n; ++i) {
        const float x = std::min(g[i], oai.limit);
        const float y = std::clamp(u[i], -oai.limit, oai.limit);
        out[i] = (y + 1.0f) * (x / (1.0f + std::exp(-oai.alpha * x)));
      }
      break;
  }
}

// The scratch of one moe_experts chunk of `tokens` tokens (rows = tokens * top_k).
struct ExpertsScratch {
  int32_t* expert_begin;  // [E + 1] first row of each expert
  int32_t* row_of_slot;   // [tokens * top_k] row holding (token, slot)
  int32_t* row_token;     // [rows] token (within the chunk) a row came from
  int32_t* row_expert;    // [rows]
  cpu::MatmulProblem* problems;  // [2E]
  float* xs;     // [rows, H] gathered inputs, later the down outputs
  float* gu;     // [rows, 2I] gate | up outputs (split: gate [rows, I] then up [rows, I])
  float* act;    // [rows, I]
  float* temp;   // [threads, 2I] a row's biased gate and up
  static size_t bytes(int64_t e, int64_t rows, int64_t h, int64_t i, int threads) {
    return align64((e + 1) * 4) + 3 * align64(rows * 4) + align64(2 * e * sizeof(cpu::MatmulProblem)) +
           align64(rows * h * 4) + align64(rows * 2 * i * 4) + align64(rows * i * 4) + align64(threads * 2 * i * 4);
  }
  static ExpertsScratch at(uint8_t* p, int64_t e, int64_t rows, int64_t h, int64_t i) {
    ExpertsScratch s;
    auto take = [&p](size_t n) {
      uint8_t* q = p;
      p += align64(n);
      return q;
    };
    s.expert_begin = reinterpret_cast<int32_t*>(take((e + 1) * 4));
    s.row_of_slot = reinterpret_cast<int32_t*>(take(rows * 4));
    s.row_token = reinterpret_cast<int32_t*>(take(rows * 4));
    s.row_expert = reinterpret_cast<int32_t*>(take(rows * 4));
    s.problems = reinterpret_cast<cpu::MatmulProblem*>(take(2 * e * sizeof(cpu::MatmulProblem)));
    s.xs = reinterpret_cast<float*>(take(rows * h * 4));
    s.gu = reinterpret_cast<float*>(take(rows * 2 * i * 4));
    s.act = reinterpret_cast<float*>(take(rows * i * 4));
    s.temp = reinterpret_cast<float*>(p);
    return s;
  }
};

// Splits [0, n) into the pool's shares (or runs it inline when small) with the share index, for
// loops that need per-thread scratch.
template <typename F>
void for_rows(ThreadPool& pool, int64_t n, int64_t work, F&& f) {
  constexpr int64_t kParallelMinWork = 1 << 14;
  if (n <= 0) return;
  if (work < kParallelMinWork || n == 1) {
    f(0, int64_t{0}, n);
    return;
  }
  pool.run_on_all([&](int share, int shares) { f(share, n * share / shares, n * (share + 1) / shares); });
}

}  // namespace

void CpuBackend::moe_route(const Tensor& router_logits, const MoeRouting& r, Tensor& topk_ids, Tensor& topk_weights) {
  const int64_t t_n = router_logits.rows(), e_n = router_logits.cols();
  KVASIR_CHECK(router_logits.dtype == DType::kF32 && topk_ids.dtype == DType::kI32 &&
               topk_weights.dtype == DType::kF32);
  KVASIR_CHECK(topk_ids.rows() == t_n && topk_ids.cols() == r.top_k && topk_weights.rows() == t_n &&
               topk_weights.cols() == r.top_k);
  KVASIR_CHECK_MSG(validate_moe_routing(r, e_n).ok(), "moe_route: invalid routing");
  const float* bias = r.correction_bias != nullptr ? r.correction_bias->ptr<float>() : nullptr;
  const size_t per_share = RouteScratch::bytes(e_n, r.num_groups);
  auto* base = static_cast<uint8_t*>(moe_scratch_.get(per_share * static_cast<size_t>(pool_->num_threads())));
  for_rows(*pool_, t_n, t_n * e_n * 4, [&](int share, int64_t b, int64_t e) {
    const RouteScratch s = RouteScratch::at(base + per_share * share, e_n, r.num_groups);
    for (int64_t t = b; t < e; ++t) {
      route_token(router_logits.ptr<float>() + t * e_n, e_n, r, bias, s, topk_ids.ptr<int32_t>() + t * r.top_k,
                  topk_weights.ptr<float>() + t * r.top_k);
    }
  });
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights,
                             const MoeExpertWeights& w, Tensor& out) {
  const int64_t t_n = x.rows(), h = w.hidden_size, inter = w.intermediate_size, k = topk_ids.cols();
  const int e_n = w.num_experts;
  KVASIR_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32 && x.cols() == h && out.cols() == h &&
               out.rows() == t_n);
  KVASIR_CHECK(topk_ids.dtype == DType::kI32 && topk_weights.dtype == DType::kF32 && topk_ids.rows() == t_n &&
               topk_weights.rows() == t_n && topk_weights.cols() == k && k >= 1);
  KVASIR_CHECK_MSG(validate_moe_expert_weights(w).ok(), "moe_experts: invalid expert weights");
  if (t_n == 0) return;
  const bool fused = w.gate_up != nullptr;
  const cpu::ActQuant mode = precision_ == MatmulPrecision::kExact ? cpu::ActQuant::kF32 : cpu::ActQuant::kQ16;
  const int threads = pool_->num_threads();
  const int64_t row_bytes = (h + 3 * inter) * 4;
  const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kMoeChunkBytes) / (row_bytes * k), 1, t_n);
  auto* base = static_cast<uint8_t*>(moe_scratch_.get(ExpertsScratch::bytes(e_n, chunk * k, h, inter, threads)));
  const ExpertsScratch s = ExpertsScratch::at(base, e_n, chunk * k, h, inter);
  const int32_t* all_ids = topk_ids.ptr<int32_t>();
  const float* all_weights = topk_weights.ptr<float>();

  for (int64_t t0 = 0; t0 < t_n; t0 += chunk) {
    const int64_t tc = std::min(chunk, t_n - t0), slots = tc * k;
    const int32_t* ids = all_ids + t0 * k;
    // Rows sorted by expert, then by (token, slot): a counting sort over the slots whose expert is
    // held here (first_expert onwards); the others' row is -1.
    std::fill(s.expert_begin, s.expert_begin + e_n + 1, 0);
    auto local = [&](int64_t i) { return ids[i] - w.first_expert; };
    for (int64_t i = 0; i < slots; ++i) {
      KVASIR_CHECK_MSG(ids[i] >= 0, "moe_experts: expert id out of range");
      if (local(i) < e_n && local(i) >= 0) ++s.expert_begin[local(i) + 1];
    }
    for (int e = 0; e < e_n; ++e) s.expert_begin[e + 1] += s.expert_begin[e];
    const int64_t rows = s.expert_begin[e_n];
    for (int64_t i = 0; i < slots; ++i) {
      const int32_t e = local(i);
      if (e < 0 || e >= e_n) {
        s.row_of_slot[i] = -1;
        continue;
      }
      const int32_t row = s.expert_begin[e]++;
      s.row_of_slot[i] = row;
      s.row_token[row] = static_cast<int32_t>(i / k);
      s.row_expert[row] = e;
    }
    for (int e = e_n; e > 0; --e) s.expert_begin[e] = s.expert_begin[e - 1];  // undo the cursor bumps
    s.expert_begin[0] = 0;

    for_rows(*pool_, rows, rows * h, [&](int, int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        std::memcpy(s.xs + r * h, x.ptr<float>() + (t0 + s.row_token[r]) * h, static_cast<size_t>(h) * 4);
      }
    });

    // Gate and up products of every active expert.
    auto add_problems = [&](const Tensor* views, int64_t m, float* y, int* count) {
      for (int e = 0; e < e_n; ++e) {
        const int32_t b = s.expert_begin[e], n = s.expert_begin[e + 1] - b;
        if (n > 0) s.problems[(*count)++] = {views[e].data, m, s.xs + int64_t{b} * h, n, y + int64_t{b} * m};
      }
    };
    float* gate_out = s.gu;
    float* up_out = s.gu + rows * inter;
    int np = 0;
    if (fused) {
      add_problems(w.gate_up, 2 * inter, s.gu, &np);
      cpu::matmul_grouped(s.problems, np, w.gate_up[0].dtype, h, *pool_, mode, scratch_);
    } else if (w.gate[0].dtype == w.up[0].dtype) {
      add_problems(w.gate, inter, gate_out, &np);
      add_problems(w.up, inter, up_out, &np);
      cpu::matmul_grouped(s.problems, np, w.gate[0].dtype, h, *pool_, mode, scratch_);
    } else {
      add_problems(w.gate, inter, gate_out, &np);
      cpu::matmul_grouped(s.problems, np, w.gate[0].dtype, h, *pool_, mode, scratch_);
      np = 0;
      add_problems(w.up, inter, up_out, &np);
      cpu::matmul_grouped(s.problems, np, w.up[0].dtype, h, *pool_, mode, scratch_);
    }

    // Biases and the activation, a row at a time.
    for_rows(*pool_, rows, rows * inter * 8, [&](int share, int64_t b, int64_t e) {
      float* g = s.temp + int64_t{share} * 2 * inter;
      float* u = g + inter;
      for (int64_t r = b; r < e; ++r) {
        const int ex = s.row_expert[r];
        if (!fused) {
          std::memcpy(g, gate_out + r * inter, static_cast<size_t>(inter) * 4);
          std::memcpy(u, up_out + r * inter, static_cast<size_t>(inter) * 4);
          if (w.gate_bias != nullptr) {
            for (int64_t i = 0; i < inter; ++i) g[i] += w.gate_bias[ex].ptr<float>()[i];
          }
          if (w.up_bias != nullptr) {
            for (int64_t i = 0; i < inter; ++i) u[i] += w.up_bias[ex].ptr<float>()[i];
          }
        } else {
          const float* row = s.gu + r * 2 * inter;
          const float* bias = w.gate_up_bias != nullptr ? w.gate_up_bias[ex].ptr<float>() : nullptr;
          const bool inter_leaved = w.gate_up_layout == GateUpLayout::kInterleaved;
          for (int64_t i = 0; i < inter; ++i) {
            const int64_t gi = inter_leaved ? 2 * i : i, ui = inter_leaved ? 2 * i + 1 : inter + i;
            g[i] = bias != nullptr ? row[gi] + bias[gi] : row[gi];
            u[i] = bias != nullptr ? row[ui] + bias[ui] : row[ui];
          }
        }
        activate_row(w.activation, w.swiglu_oai, g, u, s.act + r * inter, inter);
      }
    });

    // Down products into xs (the gathered inputs are no longer needed).
    np = 0;
    for (int e = 0; e < e_n; ++e) {
      const int32_t b = s.expert_begin[e], n = s.expert_begin[e + 1] - b;
      if (n > 0) s.problems[np++] = {w.down[e].data, h, s.act + int64_t{b} * inter, n, s.xs + int64_t{b} * h};
    }
    cpu::matmul_grouped(s.problems, np, w.down[0].dtype, inter, *pool_, mode, scratch_);

    // Each token's weighted sum over its slots, in slot order.
    const float* weights = all_weights + t0 * k;
    for_rows(*pool_, tc, tc * k * h, [&](int, int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        float* o = out.ptr<float>() + (t0 + t) * h;
        std::fill(o, o + h, 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const int32_t row = s.row_of_slot[t * k + j];
          if (row < 0) continue;  // another rank's expert
          const float wj = weights[t * k + j];
          const float* y = s.xs + int64_t{row} * h;
          if (w.down_bias != nullptr) {
            const float* db = w.down_bias[s.row_expert[row]].ptr<float>();
            for (int64_t i = 0; i < h; ++i) o[i] += wj * (y[i] + db[i]);
          } else {
            for (int64_t i = 0; i < h; ++i) o[i] += wj * y[i];
          }
        }
      }
    });
  }
}

}  // namespace kvasir
