#include "toolcall/tool_call_id.h"

#include <random>

namespace kvasir::toolcall {

uint64_t ToolCallIdGenerator::next_u64() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string ToolCallIdGenerator::next() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = style_ == ToolCallIdStyle::kMistral ? "" : "call_";
  size_t n = style_ == ToolCallIdStyle::kMistral ? 9 : 24;
  for (size_t i = 0; i < n; ++i) id += kAlnum[next_u64() % 62];
  return id;
}

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace kvasir::toolcall
