#include "bench_serve/bench_dataset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/json.h"
#include "common/mapped_file.h"

namespace kvasir::bench {
namespace {

// Common words that most BPE vocabularies hold as one token with their leading
// space.
constexpr const char *kWords[] = {
    "the",   "of",     "and",    "to",    "in",    "is",    "that",  "for",
    "it",    "as",     "was",    "with",  "be",    "by",    "on",    "not",
    "he",    "this",   "are",    "or",    "his",   "from",  "at",    "which",
    "but",   "have",   "an",     "had",   "they",  "you",   "were",  "their",
    "one",   "all",    "we",     "can",   "her",   "has",   "there", "been",
    "if",    "more",   "when",   "will",  "would", "who",   "so",    "no",
    "time",  "people", "year",   "way",   "day",   "man",   "thing", "world",
    "life",  "hand",   "part",   "child", "eye",   "place", "work",  "week",
    "case",  "point",  "number", "group", "fact",  "water", "light", "house",
    "small", "large",  "great",  "good",  "new",   "old",   "long",  "little",
    "right", "high",   "big",    "city"};

// Token ids of plain ASCII words (two or more letters) that begin a new word:
// random picks from these re-tokenize almost the same way, so few fix-up
// rounds are needed. Judged on the id decoded twice in a row, " w w"
// (byte-level BPE) or "w w" (SentencePiece drops the first word's space), so
// both kinds of vocabulary qualify.
std::vector<int32_t> plain_word_ids(const Tokenizer &tok) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tok.vocab_size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (tok.is_special(id) || tok.is_byte_fallback_token(id))
      continue;
    const int32_t twice[2] = {id, id};
    std::string s = tok.decode(twice, false);
    if (!s.empty() && s[0] == ' ')
      s.erase(0, 1);
    const size_t half = s.size() / 2;
    if (s.size() < 5 || s.size() % 2 == 0 || s[half] != ' ' ||
        s.compare(0, half, s, half + 1, half) != 0)
      continue;
    if (std::all_of(s.begin(), s.begin() + static_cast<ptrdiff_t>(half),
                    [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
                    })) {
      ids.push_back(id);
    }
  }
  return ids;
}

// `text` after `prefix` as a new word.
std::string joined(const std::string &prefix, std::string text) {
  if (!prefix.empty() && !text.empty() && text[0] != ' ')
    text.insert(text.begin(), ' ');
  return text;
}

// Text that, after `prefix`, makes prefix + text encode (without special
// tokens) to exactly `total` tokens when a few fix-up rounds get there (words
// can merge across the join); sets *actual to what it encodes to.
std::string text_to_length(const Tokenizer &tok,
                           const std::vector<int32_t> &pool,
                           const std::string &prefix, int64_t total,
                           std::mt19937_64 &rng, int64_t *actual) {
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  const auto count = [&](const std::string &text) {
    return static_cast<int64_t>(tok.encode(prefix + text, false).size());
  };
  const int64_t body = std::max<int64_t>(
      1, total - static_cast<int64_t>(tok.encode(prefix, false).size()));
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < body; ++i)
    ids.push_back(pool[pick(rng)]);
  std::string text = joined(prefix, tok.decode(ids, false));
  for (int round = 0; round < 10; ++round) {
    const int64_t got = count(text);
    if (got == total)
      break;
    if (got > total) {
      ids.resize(static_cast<size_t>(std::max<int64_t>(
          1, static_cast<int64_t>(ids.size()) - (got - total))));
    } else {
      for (int64_t i = got; i < total; ++i)
        ids.push_back(pool[pick(rng)]);
    }
    text = joined(prefix, tok.decode(ids, false));
  }
  *actual = count(text);
  return text;
}

std::string words_of_length(int64_t n, std::mt19937_64 &rng) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string text;
  for (int64_t i = 0; i < n; ++i) {
    if (i)
      text += ' ';
    text += kWords[pick(rng)];
  }
  return text;
}

} // namespace

StatusOr<std::vector<BenchRequest>>
sample_random_requests(const RandomDatasetOptions &opts, int64_t num_prompts,
                       uint64_t seed, const Tokenizer *tok) {
  if (opts.input_len < 1 || opts.output_len < 1 || opts.prefix_len < 0) {
    return invalid_argument(
        "--random-input-len and --random-output-len must be >= 1");
  }
  if (!(opts.range_ratio >= 0 && opts.range_ratio < 1))
    return invalid_argument("--random-range-ratio must be in [0, 1)");
  std::mt19937_64 rng(seed);
  auto bounds = [&](int64_t len) {
    const auto lo = std::max<int64_t>(
        1, static_cast<int64_t>(std::floor(len * (1 - opts.range_ratio))));
    const auto hi = std::max<int64_t>(
        lo, static_cast<int64_t>(std::ceil(len * (1 + opts.range_ratio))));
    return std::uniform_int_distribution<int64_t>(lo, hi);
  };
  auto in_dist = bounds(opts.input_len), out_dist = bounds(opts.output_len);
  std::vector<int32_t> pool;
  if (tok) {
    pool = plain_word_ids(*tok);
    if (pool.size() < 16)
      return invalid_argument(
          "the tokenizer has too few plain word tokens for random prompts");
  }
  // As vLLM's RandomDataset: the lengths count the special tokens the server
  // adds to a completion prompt (e.g. a BOS), so the text itself is that many
  // tokens shorter.
  const int64_t num_special =
      tok ? static_cast<int64_t>(tok->special_prefix().size() +
                                 tok->special_suffix().size())
          : 0;
  std::string prefix;
  int64_t prefix_actual = 0;
  if (opts.prefix_len > 0) {
    prefix = tok ? text_to_length(*tok, pool, "", opts.prefix_len, rng,
                                  &prefix_actual)
                 : words_of_length(opts.prefix_len, rng) + ' ';
    if (!tok)
      prefix_actual = opts.prefix_len;
  }
  std::vector<BenchRequest> out;
  for (int64_t i = 0; i < num_prompts; ++i) {
    BenchRequest r;
    const int64_t in_len = in_dist(rng);
    r.output_len = out_dist(rng);
    if (tok) {
      const int64_t total =
          std::max<int64_t>(prefix_actual + in_len - num_special, 1);
      int64_t actual = 0;
      r.prompt =
          prefix + text_to_length(*tok, pool, prefix, total, rng, &actual);
      r.prompt_len = actual + num_special;
    } else {
      r.prompt = prefix + words_of_length(in_len, rng);
      r.prompt_len = prefix_actual + in_len;
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<std::vector<BenchRequest>>
load_prompt_requests(const std::string &path, int64_t num_prompts,
                     int64_t output_len, uint64_t seed, const Tokenizer *tok) {
  if (output_len < 1)
    return invalid_argument("--prompts-output-len must be >= 1");
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::vector<std::string> prompts;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos)
      nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos)
      continue;
    if (line[0] != '{') {
      prompts.push_back(line);
      continue;
    }
    auto j = parse_json(line);
    if (!j.ok())
      return invalid_argument(path + ":" + std::to_string(line_no) + ": " +
                              j.status().message());
    std::string p;
    if (const Json *v = j->find("prompt"); v && v->is_string()) {
      p = v->as_string();
    } else if (const Json *t = j->find("text"); t && t->is_string()) {
      p = t->as_string();
    } else if (const Json *turns = j->find("turns");
               turns && turns->is_array() && turns->size() > 0 &&
               turns->as_array()[0].is_string()) {
      p = turns->as_array()[0].as_string();
    } else {
      return invalid_argument(path + ":" + std::to_string(line_no) +
                              ": no \"prompt\", \"text\" or \"turns\"");
    }
    prompts.push_back(std::move(p));
  }
  if (prompts.empty())
    return invalid_argument(path + " holds no prompts");
  std::mt19937_64 rng(seed);
  std::shuffle(prompts.begin(), prompts.end(), rng);
  std::vector<BenchRequest> out;
  for (int64_t i = 0; i < num_prompts; ++i) {
    BenchRequest r;
    r.prompt = prompts[static_cast<size_t>(i) % prompts.size()];
    // Without a tokenizer: ~4 bytes per token; the server's usage replaces it
    // when reported.
    r.prompt_len =
        tok ? static_cast<int64_t>(tok->encode(r.prompt, false).size())
            : static_cast<int64_t>((r.prompt.size() + 3) / 4);
    r.output_len = output_len;
    out.push_back(std::move(r));
  }
  return out;
}

} // namespace kvasir::bench
