// `kvasir tokenize` and `kvasir detokenize`: the model's tokenizer from the command line.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "setup/loaded_model.h"
#include "args.h"
#include "commands.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "tokenizer/vocab_spec.h"

namespace kvasir {

namespace {

// {"<pre name>": [regex, ...], ...}: the split regexes a GGUF "gpt2" vocabulary gets for each
// tokenizer.ggml.pre name (scripts/gen_pretokenizer_golden.py runs HF `tokenizers` on them).
void print_pre_tokenizers() {
  Json out = Json::object();
  for (const std::string& name : bpe_pre_tokenizer_names()) {
    Json regexes = Json::array();
    StatusOr<std::vector<std::string>> list = bpe_pre_tokenizer_regexes(name);
    for (std::string& r : *list) regexes.push_back(Json(std::move(r)));
    out.set(name, std::move(regexes));
  }
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  auto args = Args::parse(argc, argv, {"model", "text", "file"}, {"add-special", "list-pre-tokenizers", "help"});
  if (!args.ok() || args->get_bool("help", false)) {
    std::fprintf(stderr,
                 "%s\nusage: kvasir tokenize [--model PATH] (--text TEXT | --file F) [--add-special]\n"
                 "       kvasir tokenize --list-pre-tokenizers   (GGUF pre-tokenizer names and regexes, JSON)\n"
                 "--model may be any GGUF holding tokenizer.ggml.* keys (a vocabulary-only file of any\n"
                 "architecture) or an HF directory with tokenizer.json.\n",
                 args.ok() ? "" : args.status().message().c_str());
    return args.ok() ? 0 : 2;
  }
  if (args->get_bool("list-pre-tokenizers", false)) {
    print_pre_tokenizers();
    return 0;
  }
  std::string text;
  if (args->has("text")) {
    text = args->get("text");
  } else if (args->has("file")) {
    auto t = read_text_file(args->get("file"));
    if (!t.ok()) {
      std::fprintf(stderr, "kvasir tokenize: %s\n", t.status().message().c_str());
      return 1;
    }
    text = std::move(*t);
  } else {
    std::fprintf(stderr, "kvasir tokenize: give --text or --file\n");
    return 2;
  }
  auto m = load_tokenizer_only(args->get("model", default_model_path()));
  if (!m.ok()) {
    std::fprintf(stderr, "kvasir tokenize: %s\n", m.status().message().c_str());
    return 1;
  }
  std::vector<int32_t> ids = (*m)->tokenizer->encode(text, args->get_bool("add-special", false));
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  std::printf("%s\n", out.c_str());
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  auto args = Args::parse(argc, argv, {"model"}, {"skip-special", "help"});
  if (!args.ok() || args->get_bool("help", false)) {
    std::fprintf(stderr, "%s\nusage: kvasir detokenize [--model PATH] [--skip-special] IDS...\n",
                 args.ok() ? "" : args.status().message().c_str());
    return args.ok() ? 0 : 2;
  }
  std::vector<int32_t> ids;
  for (const auto& p : args->positionals()) {
    // Accept "1 2 3" as one argument as well as separate arguments.
    const char* s = p.c_str();
    while (*s) {
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(s, &end, 10);
      if (end == s || errno != 0 || v < 0 || v > 0x7fffffff) {
        std::fprintf(stderr, "kvasir detokenize: '%s' is not a token id\n", p.c_str());
        return 2;
      }
      ids.push_back(static_cast<int32_t>(v));
      s = end;
      while (*s == ' ' || *s == ',') ++s;
    }
  }
  auto m = load_tokenizer_only(args->get("model", default_model_path()));
  if (!m.ok()) {
    std::fprintf(stderr, "kvasir detokenize: %s\n", m.status().message().c_str());
    return 1;
  }
  for (int32_t id : ids) {
    if (id >= static_cast<int32_t>((*m)->tokenizer->vocab_size())) {
      std::fprintf(stderr, "kvasir detokenize: token id %d is outside the vocabulary (%zu)\n", id,
                   (*m)->tokenizer->vocab_size());
      return 2;
    }
  }
  std::string text = (*m)->tokenizer->decode(ids, args->get_bool("skip-special", false));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

}  // namespace kvasir
