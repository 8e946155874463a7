// Small helpers the quantized-checkpoint checks share: a tensor shape as the error messages print
// it, and the group / block counts of a dimension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvasir::quant {

inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace kvasir::quant
