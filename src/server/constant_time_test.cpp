// The API-key comparison reads every byte of both secrets whatever the position of the first
// difference (no early exit), so its running time cannot reveal a key prefix. Checked by
// recording the bytes read, not by wall-clock timing (too noisy to prove anything).
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/routes.h"

namespace kvasir::server {
namespace {

struct Trace {
  std::vector<size_t> a, b;  // indices read, in order
};

bool traced_equals(const std::string& x, const std::string& y, Trace* t) {
  return detail::constant_time_equals_impl(
      x.size(), y.size(), [&](size_t i) { t->a.push_back(i); return x[i]; },
      [&](size_t i) { t->b.push_back(i); return y[i]; });
}

std::vector<size_t> iota_n(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(ConstantTimeEquals, Results) {
  EXPECT_TRUE(constant_time_equals("Bearer s3cret", "Bearer s3cret"));
  EXPECT_FALSE(constant_time_equals("Bearer s3cret", "Bearer s3creT"));
  EXPECT_FALSE(constant_time_equals("Bearer s3cret", "Bearer s3cre"));
  EXPECT_FALSE(constant_time_equals("Bearer s3cre", "Bearer s3cret"));
  EXPECT_FALSE(constant_time_equals("", "x"));
  EXPECT_FALSE(constant_time_equals("x", ""));
  EXPECT_TRUE(constant_time_equals("", ""));
  // A shorter secret padded with what it would be compared against must still differ.
  EXPECT_FALSE(constant_time_equals(std::string("ab\0", 3), "ab"));
  EXPECT_FALSE(constant_time_equals("abb", "ab"));
}

TEST(ConstantTimeEquals, ReadsEveryByteWhereverTheFirstDifferenceIs) {
  const std::string key = "Bearer sk-0123456789abcdef0123456789abcdef";
  const auto all = iota_n(key.size());
  // Equal, and a mismatch at every single position (first, middle, last byte).
  for (size_t pos = 0; pos <= key.size(); ++pos) {
    std::string other = key;
    if (pos < key.size()) other[pos] ^= 0x20;
    Trace t;
    EXPECT_EQ(traced_equals(key, other, &t), pos == key.size());
    EXPECT_EQ(t.a, all) << "mismatch at " << pos;
    EXPECT_EQ(t.b, all) << "mismatch at " << pos;
  }
}

TEST(ConstantTimeEquals, LengthMismatchStillWalksTheLongerSecret) {
  const std::string key = "Bearer s3cret-key";
  for (size_t len : {size_t{0}, size_t{1}, size_t{7}, key.size() - 1, key.size() + 5}) {
    std::string other = len <= key.size() ? key.substr(0, len) : key + std::string(len - key.size(), 'x');
    Trace t;
    EXPECT_FALSE(traced_equals(other, key, &t));
    const size_t n = std::max(len, key.size());
    // Every index of the longer one is visited once, in order; the shorter one is read at
    // clamped indices (never out of bounds) so each iteration does the same work.
    EXPECT_EQ(t.b.size(), n);
    EXPECT_EQ(t.a.size(), len == 0 ? 0 : n);
    for (size_t i : t.a) EXPECT_LT(i, other.size());
    for (size_t i : t.b) EXPECT_LT(i, key.size());
  }
}

}  // namespace
}  // namespace kvasir::server
