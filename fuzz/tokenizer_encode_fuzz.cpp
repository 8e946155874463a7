// libFuzzer target: encode arbitrary bytes (invalid UTF-8 included) with the real SmolLM2 and a
// SentencePiece-style vocabulary, decode the ids back, and stream them through the incremental
// detokenizer: nothing may crash and every streamed delta must be valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "loader/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/incremental_detokenizer.h"

namespace {

std::unique_ptr<kvasir::Tokenizer> load(const char* env, const char* fallback) {
  const char* path = std::getenv(env);
  auto file = kvasir::GgufFile::open(path ? path : fallback);
  if (!file.ok()) return nullptr;
  auto tok = kvasir::tokenizer_from_gguf(**file);
  if (!tok.ok()) return nullptr;
  return std::make_unique<kvasir::Tokenizer>(std::move(*tok));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<kvasir::Tokenizer> kBpe =
      load("KVASIR_FUZZ_BPE_GGUF", "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  static const std::unique_ptr<kvasir::Tokenizer> kSpm =
      load("KVASIR_FUZZ_SPM_GGUF", "../shared/testdata/tokenizer/ggml-vocab-llama-spm.gguf");
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto* tok : {kBpe.get(), kSpm.get()}) {
    if (tok == nullptr) continue;
    auto ids = tok->encode(text, true);
    std::string whole = tok->decode(ids, false);
    kvasir::IncrementalDetokenizer detok(*tok, false);
    std::string streamed;
    for (int32_t id : ids) {
      std::string delta = detok.step(id);
      if (!kvasir::utf8_valid(delta)) std::abort();
      streamed += delta;
    }
    streamed += detok.flush();
    if (streamed != whole) std::abort();
    // Arbitrary ids (from the input bytes) must decode without crashing.
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 2 < size && raw.size() < 64; i += 3) {
      raw.push_back(static_cast<int32_t>((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]));
    }
    (void)tok->decode(raw, true);
  }
  return 0;
}
