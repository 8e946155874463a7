// tokenizer_bench: encode throughput on ~1 MB of mixed text (prose, code, Unicode, numbers).
// Usage: tokenizer_bench <tokenizer dir | tokenizer.json | model.gguf> [text file]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/hf_loader.h"
#ifdef KVASIR_TOKENIZER_HAS_GGUF
#include "loader/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#endif

namespace {

// CPU time of this thread: the build machine is shared, so wall time mostly measures the others.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string sample_text() {
  const char* parts[] = {
      "The quick brown fox jumps over the lazy dog. It's 3.14159 o'clock; we'll see 12345 items. ",
      "def encode(self, text: str) -> list[int]:\n    return [self.vocab[t] for t in text.split()]\n\n",
      "我想在apple工作 1314151 天～ ",
      "Нещо на Български ",
      "emoji 🦙🚀✅ and   spaces\t\ttabs\n",
  };
  std::string s;
  size_t k = 0;
  while (s.size() < (1u << 20)) s += parts[k++ % 5];
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvasir;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <tokenizer dir|tokenizer.json|model.gguf> [text]\n", argv[0]);
    return 2;
  }
  std::string path = argv[1];
  double t0 = cpu_seconds();
  StatusOr<Tokenizer> tok = unimplemented("no loader");
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
#ifdef KVASIR_TOKENIZER_HAS_GGUF
    auto f = GgufFile::open(path);
    if (!f.ok()) {
      std::fprintf(stderr, "%s\n", f.status().to_string().c_str());
      return 1;
    }
    tok = tokenizer_from_gguf(**f);
#endif
  } else {
    tok = load_hf_tokenizer(path);
  }
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  double t1 = cpu_seconds();
  std::string text = sample_text();
  if (argc > 2) {
    std::ifstream f(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  size_t n = 0;
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    double a = cpu_seconds();
    n = tok->encode(text, false).size();
    best = std::min(best, cpu_seconds() - a);
  }
  auto ids = tok->encode(text, false);
  double a = cpu_seconds();
  std::string back = tok->decode(ids, false);
  double decode_s = cpu_seconds() - a;
  std::printf("load %.3f s | %zu bytes -> %zu tokens in %.3f s: %.0f tokens/s, %.2f MB/s | decode %.3f s | round trip %s (CPU time)\n",
              t1 - t0, text.size(), n, best, n / best, text.size() / best / 1e6, decode_s,
              back == text ? "ok" : "DIFFERS");
  return 0;
}
