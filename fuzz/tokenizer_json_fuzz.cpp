// libFuzzer target: the tokenizer.json loader on arbitrary bytes; when a tokenizer loads, encode
// and decode a few strings with it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/hf_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = kvasir::tokenizer_from_hf_json(text, "");
  if (!tok.ok()) return 0;
  for (std::string_view s : {"hello world", "", "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", "a\nb\tc  d"}) {
    auto ids = tok->encode(s, true);
    (void)tok->decode(ids, false);
  }
  return 0;
}
