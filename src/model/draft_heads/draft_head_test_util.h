// Test-only, shared by the heads' golden tests (eagle_head_test, eagle3_head_test): the numpy
// references of tests/data/eagle*/ (float32 files, golden.json) and the two passes every golden
// runs: a first pass over pass1's tokens (block 1 of the head's cache, token i's hidden state from
// target row i), then one draft step at position 6 fed a draft and the head's own row 5.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/draft_heads/draft_head.h"

namespace kvasir::testing {

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(f.good()) << path;
  std::vector<float> v(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / den);
}

inline std::vector<int32_t> ints(const Json& a) {
  std::vector<int32_t> v;
  for (const Json& x : a.as_array()) v.push_back(static_cast<int32_t>(x.as_int()));
  return v;
}

// The first pass's draft logits [T, vocab] (empty when the head refused the pass).
template <typename Head>
std::vector<float> first_pass_logits(Head& head, KvCache& cache, const Json& pass1, int64_t vocab) {
  std::vector<int32_t> ids = ints(*pass1.find("input_ids")), pos = ints(*pass1.find("positions"));
  const int T = static_cast<int>(ids.size());
  std::vector<int64_t> slots;
  for (int p : pos) slots.push_back(16 + p);  // block 1
  std::vector<int32_t> qsl = {0, T}, seq_lens = {T}, tables = {1}, rows;
  for (int i = 0; i < T; ++i) rows.push_back(i);
  ForwardBatch b;
  b.num_tokens = T;
  b.input_ids = ids.data();
  b.positions = pos.data();
  b.attn = AttentionMetadata{1, T, qsl.data(), seq_lens.data(), tables.data(), 1, slots.data(), 16};
  std::vector<float> logits(static_cast<size_t>(T * vocab));
  const bool ok = head.forward(b, DraftHead::HiddenFrom::kTarget, rows.data(), cache).ok() &&
                  head.draft_logits(rows.data(), T, logits.data()).ok();
  EXPECT_TRUE(ok) << "first pass";
  return ok ? logits : std::vector<float>{};
}

// The draft step's logits [vocab] (empty when refused).
template <typename Head>
std::vector<float> draft_step_logits(Head& head, KvCache& cache, int32_t draft, int64_t vocab) {
  std::vector<int32_t> ids = {draft}, pos = {6}, qsl = {0, 1}, lens = {7}, tables = {1}, from = {5}, row0 = {0};
  std::vector<int64_t> slots = {22};
  ForwardBatch b;
  b.num_tokens = 1;
  b.input_ids = ids.data();
  b.positions = pos.data();
  b.attn = AttentionMetadata{1, 1, qsl.data(), lens.data(), tables.data(), 1, slots.data(), 16};
  std::vector<float> logits(static_cast<size_t>(vocab));
  const bool ok = head.forward(b, DraftHead::HiddenFrom::kHead, from.data(), cache).ok() &&
                  head.draft_logits(row0.data(), 1, logits.data()).ok();
  EXPECT_TRUE(ok) << "draft step";
  return ok ? logits : std::vector<float>{};
}

}  // namespace kvasir::testing
