// libFuzzer target for RequestParser: arbitrary bytes, small limits picked by the input, fed
// once whole and once in input-driven random pieces. Besides the sanitizers' checks it pins
// down that framing never depends on how the socket split the bytes: both runs must produce
// the same requests and the same error status.
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Isrc \
//     src/server/fuzz/http_parser_fuzz.cpp src/server/http_parser.cpp src/server/http_types.cpp
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_parser.h"

namespace {

using kvasir::http::ParserLimits;
using kvasir::http::RequestParser;

// Everything a consumer can observe, flattened into one comparable string.
std::string run(std::string_view input, const ParserLimits& limits, uint64_t seed) {
  RequestParser parser(limits);
  std::string summary;
  size_t pos = 0;
  while (pos < input.size()) {
    size_t piece = input.size() - pos;
    if (seed != 0) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;  // LCG
      piece = std::min<size_t>(piece, 1 + (seed >> 33) % 17);
    }
    std::string_view chunk = input.substr(pos, piece);
    pos += piece;
    while (!chunk.empty()) {
      size_t used = 0;
      const RequestParser::Result r = parser.feed(chunk, &used);
      if (used > chunk.size()) __builtin_trap();
      chunk.remove_prefix(used);
      if (r == RequestParser::Result::kError) {
        const int s = parser.error_status();
        if (s != 400 && s != 413 && s != 414 && s != 431 && s != 501 && s != 505) __builtin_trap();
        return summary + "error " + std::to_string(s);
      }
      if (r == RequestParser::Result::kNeedMore) {
        if (!chunk.empty()) __builtin_trap();  // must take every byte while incomplete
        break;
      }
      const bool keep_alive = parser.keep_alive();
      const kvasir::http::Request q = parser.take_request();
      summary += q.method + ' ' + q.target + ' ' + q.path + ' ' + q.query + ' ' +
                 std::to_string(q.version_minor) + (keep_alive ? " ka\n" : " close\n");
      for (const auto& [k, v] : q.headers) summary += k + ':' + v + '\n';
      summary += std::to_string(q.body.size()) + ':' + q.body + '\n';
      if (q.body.size() > limits.max_body_bytes) __builtin_trap();
    }
  }
  return summary + (parser.started() ? "partial" : "idle");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  ParserLimits limits;
  limits.max_header_bytes = 32 + data[0] * 4;
  limits.max_header_count = 1 + data[1] % 16;
  limits.max_uri_bytes = 1 + data[2] * 2;
  limits.max_body_bytes = static_cast<size_t>(data[3]) * 8;
  const uint64_t seed =
      1 + (static_cast<uint64_t>(data[0]) << 24 | data[1] << 16 | data[2] << 8 | data[3]);
  const std::string_view input(reinterpret_cast<const char*>(data) + 4, size - 4);
  if (run(input, limits, 0) != run(input, limits, seed)) __builtin_trap();
  return 0;
}
