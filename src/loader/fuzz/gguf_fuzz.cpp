// libFuzzer target for the GGUF parser: parses the input from memory and, when it parses, walks
// every metadata value and tensor the way callers would. Not built by CMake yet; from the repo
// root:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
//     src/loader/fuzz/gguf_fuzz.cpp src/loader/gguf_file.cpp src/loader/gguf_metadata.cpp \
//     src/core/dtype.cpp src/common/mapped_file.cpp src/common/status.cpp -o gguf_fuzz
//   ./gguf_fuzz -max_len=65536 corpus_dir/   (seed the corpus with small .gguf files, e.g.
//   ../shared/testdata/tokenizer/*.gguf)
#include <cstddef>
#include <cstdint>
#include <span>

#include "loader/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvasir::GgufFile::parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;
  const kvasir::GgufFile& g = **file;
  for (const auto& kv : g.metadata()) {
    (void)g.describe(kv.value);
    if (kv.value.type == kvasir::GgufType::kArray) {
      auto items = g.array_items(kv.value);
      if (items.ok()) {
        for (const auto& item : *items) (void)g.describe(item);
      }
      (void)g.get_string_array(kv.key);
      (void)g.get_i32_array(kv.key);
      (void)g.get_f32_array(kv.key);
    }
  }
  volatile uint8_t sink = 0;
  for (const auto& info : g.tensor_infos()) {
    kvasir::WeightTensor t = g.tensor(info);
    if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
  }
  return 0;
}
