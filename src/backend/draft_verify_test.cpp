// The host twin of the device verify: emitted counts and packed tokens against
// sample/rejection_sampler.h's num_emitted_tokens, in place and out of place, and the row checks.
#include "backend/draft_verify.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvasir {
namespace {

// Reference: request by request, the accepted drafts then the first differing sample (or the bonus).
void reference(const std::vector<int32_t>& samples, const std::vector<DraftVerifyRow>& reqs,
               const std::vector<int32_t>& drafts, std::vector<int32_t>* tokens, std::vector<int32_t>* counts) {
  for (const DraftVerifyRow& r : reqs) {
    int n = 0;
    while (n < r.num_drafts && drafts[static_cast<size_t>(r.draft_offset + n)] == samples[static_cast<size_t>(r.first_row + n)]) ++n;
    for (int j = 0; j <= n; ++j) tokens->push_back(samples[static_cast<size_t>(r.first_row + j)]);
    counts->push_back(n + 1);
  }
}

TEST(DraftVerify, KeepsDraftsUntilTheFirstMismatchThenItsSample) {
  // Request 0: drafts 7 8 9 vs samples 7 8 5 6 -> 7 8 5. Request 1 (plain row): 3.
  // Request 2: drafts 1 2 vs samples 1 2 4 -> all kept plus the bonus 4. Row 8 is padding.
  const std::vector<int32_t> samples{7, 8, 5, 6, 3, 1, 2, 4, 99};
  const std::vector<DraftVerifyRow> reqs{{0, 3, 0, 0}, {4, 0, 3, 0}, {5, 2, 3, 0}};
  const std::vector<int32_t> drafts{7, 8, 9, 1, 2};
  std::vector<int32_t> out(samples.size(), -1), counts(reqs.size(), -1);
  ASSERT_TRUE(validate_draft_verify_rows(reqs.data(), 3, 9, 5).ok());
  verify_drafts_on_host(samples.data(), reqs.data(), 3, drafts.data(), out.data(), counts.data());
  EXPECT_EQ(counts, (std::vector<int32_t>{3, 1, 3}));
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 7), (std::vector<int32_t>{7, 8, 5, 3, 1, 2, 4}));
}

TEST(DraftVerify, InPlaceEqualsOutOfPlaceOnRandomSteps) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> samples, drafts;
    std::vector<DraftVerifyRow> reqs;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      const int k = static_cast<int>(rng() % 5);
      DraftVerifyRow r{static_cast<int32_t>(samples.size()), k, static_cast<int32_t>(drafts.size()), 0};
      for (int j = 0; j <= k; ++j) samples.push_back(static_cast<int32_t>(rng() % 3));
      for (int j = 0; j < k; ++j) drafts.push_back(static_cast<int32_t>(rng() % 3));
      reqs.push_back(r);
      if (rng() % 4 == 0) samples.push_back(77);  // a row no request covers
    }
    std::vector<int32_t> want_tokens, want_counts;
    reference(samples, reqs, drafts, &want_tokens, &want_counts);
    std::vector<int32_t> in_place = samples, counts(reqs.size());
    ASSERT_TRUE(validate_draft_verify_rows(reqs.data(), n, static_cast<int>(samples.size()),
                                           static_cast<int>(drafts.size())).ok());
    verify_drafts_on_host(in_place.data(), reqs.data(), n, drafts.data(), in_place.data(), counts.data());
    EXPECT_EQ(counts, want_counts);
    EXPECT_EQ(std::vector<int32_t>(in_place.begin(), in_place.begin() + static_cast<long>(want_tokens.size())), want_tokens);
  }
}

TEST(DraftVerify, RowsOutOfOrderOrOutsideTheArraysAreRefused) {
  const std::vector<DraftVerifyRow> overlap{{0, 2, 0, 0}, {2, 0, 2, 0}};
  EXPECT_FALSE(validate_draft_verify_rows(overlap.data(), 2, 8, 2).ok());  // request 1 starts in request 0's rows
  const std::vector<DraftVerifyRow> past_rows{{5, 3, 0, 0}};
  EXPECT_FALSE(validate_draft_verify_rows(past_rows.data(), 1, 8, 3).ok());
  const std::vector<DraftVerifyRow> past_drafts{{0, 3, 1, 0}};
  const Status st = validate_draft_verify_rows(past_drafts.data(), 1, 8, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("draft array"), std::string::npos) << st.message();
  const std::vector<DraftVerifyRow> negative{{0, -1, 0, 0}};
  EXPECT_FALSE(validate_draft_verify_rows(negative.data(), 1, 8, 3).ok());
}

}  // namespace
}  // namespace kvasir
