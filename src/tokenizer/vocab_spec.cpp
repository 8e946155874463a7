#include "tokenizer/vocab_spec.h"

#include <initializer_list>

#include "tokenizer/unicode_util.h"

namespace kvasir {
namespace {

// The split regexes of the HF tokenizer.json files these `pre` names stand for.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kBloom = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
constexpr const char* kDeepseekCjk = "[一-龥ࠀ-一가-퟿]+";

bool is_one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

bool type_is(const VocabSpec& spec, size_t id, GgufTokenType t) {
  return id < spec.token_types.size() && spec.token_types[id] == static_cast<int32_t>(t);
}

// Control, unknown and user-defined tokens are matched in the text before the model runs, as
// the HF tokenizer.json of these vocabularies lists them in added_tokens. `tokens` is the
// vocabulary as the model sees it (Gemma's respelled space runs are model tokens, not added).
std::vector<tok::AddedToken> added_tokens_of(const VocabSpec& spec, const std::vector<std::string>& tokens) {
  std::vector<tok::AddedToken> out;
  for (size_t id = 0; id < spec.token_types.size() && id < spec.tokens.size(); ++id) {
    bool control = type_is(spec, id, GgufTokenType::kControl) || type_is(spec, id, GgufTokenType::kUnknown);
    bool user = type_is(spec, id, GgufTokenType::kUserDefined);
    if ((!control && !user) || spec.tokens[id].empty()) continue;
    if (user && tokens[id] != spec.tokens[id]) continue;
    tok::AddedToken t;
    t.id = static_cast<int32_t>(id);
    t.content = spec.tokens[id];
    t.special = control;
    out.push_back(std::move(t));
  }
  return out;
}

// Gemma GGUFs store the user-defined tokens for runs of spaces with real spaces, but the model
// sees text with spaces already turned into U+2581; respell them so they can be reached.
bool respell_space_run(std::string* token) {
  if (token->find(' ') == std::string::npos) return false;
  size_t chars = 0;
  for (size_t i = 0; i < token->size();) {
    size_t n = 0;
    if (!tok::is_whitespace(tok::first_code_point(std::string_view(*token).substr(i), &n))) return false;
    i += n;
    ++chars;
  }
  std::string out;
  for (size_t k = 0; k < chars; ++k) out += "\xE2\x96\x81";
  *token = std::move(out);
  return true;
}

// Llama-3-style vocabularies skip merging for words that are whole tokens (HF ignore_merges).
bool llama3_family(const std::string& pre) {
  return is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                         "lfm2", "tekken"});
}

Status build_gpt2(const VocabSpec& spec, TokenizerParts* parts) {
  tok::TokenMap vocab;
  vocab.reserve(spec.tokens.size());
  for (size_t i = 0; i < spec.tokens.size(); ++i) vocab[spec.tokens[i]] = static_cast<int32_t>(i);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(spec.merges.size());
  for (const std::string& m : spec.merges) {
    size_t sp = m.find(' ', 1);  // a merge may start with a space-like token; never split at 0
    if (sp == std::string::npos) return invalid_argument("GGUF merge '" + m + "' has no space");
    merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  tok::BpeOptions opts;
  opts.unk_id = -1;  // byte-level vocabularies cover every byte
  opts.ignore_merges = llama3_family(spec.pre);
  KVASIR_ASSIGN_OR_RETURN(parts->model, tok::BpeModel::from_merges(std::move(vocab), merges, opts));
  KVASIR_ASSIGN_OR_RETURN(std::vector<std::string> regexes, bpe_pre_tokenizer_regexes(spec.pre));
  for (const std::string& r : regexes) {
    KVASIR_ASSIGN_OR_RETURN(tok::Pattern p, tok::Pattern::regex(r));
    parts->pre_tokenizer.add_split(std::move(p), tok::SplitBehavior::kIsolated, false);
  }
  parts->pre_tokenizer.add_byte_level(/*add_prefix_space=*/false, /*use_regex=*/false);
  parts->decoder.add_byte_level();
  return Status();
}

// `tokens` is the vocabulary as the model sees it (the caller may have respelled some).
Status build_llama(const VocabSpec& spec, const std::vector<std::string>& tokens, TokenizerParts* parts,
                   bool add_space_prefix) {
  const size_t n = tokens.size();
  std::vector<float> scores = spec.scores;
  if (scores.empty()) scores.assign(n, 0.0f);
  if (scores.size() != n) return invalid_argument("GGUF vocabulary: scores and tokens differ in length");
  if (spec.architecture.rfind("gemma", 0) == 0) {
    // Gemma's scores do not follow its merge order; the order of the tokens in the file does
    // (the same rule transformers' GGUF converter applies).
    for (size_t id = 0; id < n; ++id) scores[id] = -static_cast<float>(id);
  }
  tok::BpeOptions opts;
  opts.byte_fallback = true;
  opts.fuse_unk = true;
  opts.unk_id = spec.unk_id;
  KVASIR_ASSIGN_OR_RETURN(parts->model, tok::BpeModel::from_scores(tokens, scores, opts));
  // SentencePiece writes spaces as U+2581; llama.cpp and HF's legacy Llama tokenizer prefix every
  // piece of text between special tokens with one when add_space_prefix is set.
  const std::string kSpace = "\xE2\x96\x81";
  if (add_space_prefix) parts->normalizer.add_prepend(kSpace);
  parts->normalizer.add_replace(tok::Pattern::literal(" "), kSpace);
  parts->decoder.add_replace(tok::Pattern::literal(kSpace), " ");
  parts->decoder.add_byte_fallback();
  parts->decoder.add_fuse();
  if (add_space_prefix) parts->decoder.add_strip(" ", 1, 0);
  return Status();
}

}  // namespace

StatusOr<std::vector<std::string>> bpe_pre_tokenizer_regexes(const std::string& pre) {
  using V = std::vector<std::string>;
  if (pre.empty() || pre == "default") {
    return V{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  if (is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "dbrx", "smaug-bpe",
                      "chatglm-bpe", "pixtral", "midm-2.0", "lfm2"})) {
    return V{kLlama3};
  }
  if (is_one_of(pre, {"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez", "hunyuan"})) return V{kQwen2};
  if (is_one_of(pre, {"gpt-2", "mpt", "olmo", "jais", "phi-2", "roberta-bpe", "gigachat", "jina-es",
                      "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "trillion"})) {
    return V{kGpt2};
  }
  if (is_one_of(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    return V{R"(\p{N})", kGpt2};
  }
  if (pre == "falcon") return V{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
  if (pre == "deepseek-coder") {
    return V{"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"};
  }
  if (pre == "deepseek-llm") {
    return V{"[\r\n]",
             "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
             "\\s?[!-/:-~！-／：-～‘-‟　-。]+", R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"};
  }
  if (pre == "deepseek-v3") {
    return V{R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
             R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  }
  if (is_one_of(pre, {"poro-chat", "bloom", "gpt3-finnish"})) return V{kBloom};
  if (pre == "viking") return V{kBloom, R"(\p{N})"};
  if (pre == "tekken") return V{kTekken};
  if (is_one_of(pre, {"gpt-4o", "llama4", "kimi-k2"})) return V{kGpt4o};
  return unimplemented("GGUF pre-tokenizer '" + pre + "' is not supported");
}

StatusOr<Tokenizer> tokenizer_from_vocab_spec(const VocabSpec& spec) {
  if (spec.tokens.empty()) return invalid_argument("GGUF vocabulary has no tokens");
  if (!spec.token_types.empty() && spec.token_types.size() != spec.tokens.size()) {
    return invalid_argument("GGUF vocabulary: token_type and tokens differ in length");
  }
  TokenizerParts parts;
  bool default_add_bos = false;
  std::vector<std::string> tokens = spec.tokens;
  if (spec.model == "gpt2") {
    default_add_bos = llama3_family(spec.pre) && spec.pre != "tekken";
    KVASIR_RETURN_IF_ERROR(build_gpt2(spec, &parts));
  } else if (spec.model == "llama") {
    default_add_bos = true;
    if (spec.architecture.rfind("gemma", 0) == 0) {
      for (size_t id = 0; id < tokens.size(); ++id) {
        if (type_is(spec, id, GgufTokenType::kUserDefined)) respell_space_run(&tokens[id]);
      }
    }
    KVASIR_RETURN_IF_ERROR(build_llama(spec, tokens, &parts, spec.add_space_prefix.value_or(true)));
  } else {
    return unimplemented("GGUF tokenizer model '" + spec.model + "' is not supported (gpt2, llama)");
  }
  parts.added_tokens = added_tokens_of(spec, tokens);
  const int32_t n = static_cast<int32_t>(spec.tokens.size());
  auto valid = [n](int32_t id) { return id >= 0 && id < n ? id : -1; };
  TokenizerInfo& info = parts.info;
  info.bos_id = valid(spec.bos_id);
  info.eos_id = valid(spec.eos_id);
  info.unk_id = valid(spec.unk_id);
  info.pad_id = valid(spec.pad_id);
  if (info.bos_id >= 0) info.bos_token = spec.tokens[info.bos_id];
  if (info.eos_id >= 0) info.eos_token = spec.tokens[info.eos_id];
  info.chat_template = spec.chat_template;
  std::vector<int32_t> pre, suf;
  if (spec.add_bos.value_or(default_add_bos) && info.bos_id >= 0) pre.push_back(info.bos_id);
  if (spec.add_eos.value_or(false) && info.eos_id >= 0) suf.push_back(info.eos_id);
  parts.post_processor = tok::PostProcessor::wrap(std::move(pre), std::move(suf));
  return Tokenizer::create(std::move(parts));
}

}  // namespace kvasir
