// Paged attention on the CPU: the reference for every device. Each scheduled token attends over
// its sequence's cached keys through the block table, so prefill, chunked prefill and decode are
// one code path. Work is split over (token, kv-head) pairs so a GQA group reads each key once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace kvasir {

void CpuBackend::write_kv(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                          const AttentionMetadata& m) {
  const int64_t row = k.dim(1) * k.dim(2);  // kv_heads * head_dim
  const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
  KVASIR_CHECK(k_cache.dim(2) * k_cache.dim(3) == row && v.numel() == k.numel());
  for (int t = 0; t < m.num_tokens; ++t) {
    const int64_t slot = m.slot_mapping[t];
    if (slot < 0) continue;  // padding token: nothing to store
    KVASIR_CHECK(slot < num_slots);
    std::memcpy(k_cache.ptr<float>() + slot * row, k.ptr<float>() + t * row, row * sizeof(float));
    std::memcpy(v_cache.ptr<float>() + slot * row, v.ptr<float>() + t * row, row * sizeof(float));
  }
}

namespace {

struct AttnTask {
  int token;      // row in q / out
  int seq;        // sequence index in the metadata
  int32_t pos;    // absolute position of the token
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

  std::vector<AttnTask> tasks;
  tasks.reserve(static_cast<size_t>(m.num_tokens));
  for (int s = 0; s < m.num_seqs; ++s) {
    const int q0 = m.query_start_loc[s], q1 = m.query_start_loc[s + 1];
    const int first_pos = m.seq_lens[s] - (q1 - q0);
    KVASIR_CHECK(first_pos >= 0);
    for (int t = q0; t < q1; ++t) tasks.push_back({t, s, first_pos + (t - q0)});
  }
  const int64_t num_items = static_cast<int64_t>(tasks.size()) * kv_heads;
  const float* qp = q.ptr<float>();
  const float* kc = k_cache.ptr<float>();
  const float* vc = v_cache.ptr<float>();
  float* op = out.ptr<float>();
  const int64_t kv_row = static_cast<int64_t>(kv_heads) * hd;

  auto body = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> scores;  // grows to the longest context once, then reused
    for (int64_t item = b; item < e; ++item) {
      const AttnTask& task = tasks[static_cast<size_t>(item / kv_heads)];
      const int kvh = static_cast<int>(item % kv_heads);
      const int32_t* table = m.block_tables + static_cast<int64_t>(task.seq) * m.max_blocks_per_seq;
      const int32_t lo = p.sliding_window > 0 ? std::max(0, task.pos - p.sliding_window + 1) : 0;
      const int32_t ctx = task.pos - lo + 1;
      scores.resize(static_cast<size_t>(ctx) * group);
      // Scores for the whole GQA group, reading each key once.
      for (int32_t j = lo; j <= task.pos; ++j) {
        const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
        const float* key = kc + slot * kv_row + static_cast<int64_t>(kvh) * hd;
        for (int g = 0; g < group; ++g) {
          const float* qv = qp + (static_cast<int64_t>(task.token) * num_heads + kvh * group + g) * hd;
          float dot = 0.0f;
          for (int d = 0; d < hd; ++d) dot += qv[d] * key[d];
          float sc = dot * p.scale;
          if (p.softcap > 0.0f) sc = p.softcap * std::tanh(sc / p.softcap);
          scores[static_cast<size_t>(g) * ctx + (j - lo)] = sc;
        }
      }
      for (int g = 0; g < group; ++g) {
        float* sc = scores.data() + static_cast<size_t>(g) * ctx;
        float mx = -INFINITY;
        for (int32_t j = 0; j < ctx; ++j) mx = std::max(mx, sc[j]);
        float sum = 0.0f;
        for (int32_t j = 0; j < ctx; ++j) {
          sc[j] = std::exp(sc[j] - mx);
          sum += sc[j];
        }
        const float inv = 1.0f / sum;
        float* o = op + (static_cast<int64_t>(task.token) * num_heads + kvh * group + g) * hd;
        std::fill(o, o + hd, 0.0f);
        for (int32_t j = lo; j <= task.pos; ++j) {
          const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
          const float* val = vc + slot * kv_row + static_cast<int64_t>(kvh) * hd;
          const float w = sc[j - lo] * inv;
          for (int d = 0; d < hd; ++d) o[d] += w * val[d];
        }
      }
    }
  };
  if (num_items < 2) body(0, num_items);
  else pool_->parallel_for(num_items, body);
}

}  // namespace kvasir
