#include "tokenizer/vocab_spec.h"

#include <initializer_list>

#include "common/json.h"
#include "common/quoted_text.h"
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
// Qwen3.5: Qwen2's with combining marks kept on their letters.
constexpr const char* kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kBloom = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

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

// Phi-3's tokenizer.json strips the spaces after its chat tokens and "</s>" (rstrip), but not after
// <unk>, <s> and <|endoftext|>; GGUF has no field for it, so llama.cpp sets it by model name and
// so do we (Phi-3 and 3.5 are the SentencePiece vocabularies of architecture "phi3").
void set_phi3_rstrip(std::vector<tok::AddedToken>* tokens) {
  for (tok::AddedToken& t : *tokens) {
    t.rstrip = t.content != "<unk>" && t.content != "<s>" && t.content != "<|endoftext|>";
  }
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

// Qwen's tokenizer.json (Qwen1.5 to Qwen3, and the R1 distills on its vocabulary) NFC-normalizes
// before splitting; llama.cpp does not, and would split "e\u0301" differently from HF.
bool nfc_family(const std::string& pre) { return is_one_of(pre, {"qwen2", "deepseek-r1-qwen", "qwen35"}); }

Status build_gpt2(const VocabSpec& spec, TokenizerParts* parts) {
  tok::TokenMap vocab;
  vocab.reserve(spec.tokens.size());
  for (size_t i = 0; i < spec.tokens.size(); ++i) vocab[spec.tokens[i]] = static_cast<int32_t>(i);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(spec.merges.size());
  for (const std::string& m : spec.merges) {
    size_t sp = m.find(' ', 1);  // a merge may start with a space-like token; never split at 0
    if (sp == std::string::npos) return invalid_argument("GGUF merge '" + quoted_text(m) + "' has no space");
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
  if (nfc_family(spec.pre)) parts->normalizer.add_nfc();
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

// BERT's WordPiece as llama.cpp's GGUF converter writes it: word-start pieces carry U+2581,
// continuations ("##x" in HF) are bare. HF's pipeline for these vocabularies: BertNormalizer
// (lowercase, strip accents), BertPreTokenizer, WordPiece, [CLS] ... [SEP].
Status build_bert(const VocabSpec& spec, TokenizerParts* parts) {
  tok::TokenMap vocab;
  vocab.reserve(spec.tokens.size());
  for (size_t i = 0; i < spec.tokens.size(); ++i) vocab.emplace(spec.tokens[i], static_cast<int32_t>(i));
  KVASIR_ASSIGN_OR_RETURN(parts->model, tok::BpeModel::from_merges(std::move(vocab), {}, tok::BpeOptions{}));
  const std::string kSpace = "\xE2\x96\x81";
  tok::WordPieceOptions wp;
  wp.word_prefix = kSpace;
  wp.continuing_subword_prefix = "";
  wp.unk_id = spec.unk_id >= 0 && static_cast<size_t>(spec.unk_id) < spec.tokens.size() ? spec.unk_id : -1;
  parts->word_piece = tok::WordPiece(std::move(wp));
  parts->normalizer.add_bert(/*clean_text=*/true, /*handle_chinese_chars=*/true, /*strip_accents=*/true,
                             /*lowercase=*/true);
  Json bert_pre = Json::object();
  bert_pre.set("type", "BertPreTokenizer");
  KVASIR_ASSIGN_OR_RETURN(parts->pre_tokenizer, tok::PreTokenizer::from_json(bert_pre));
  parts->decoder.add_replace(tok::Pattern::literal(kSpace), " ");
  parts->decoder.add_cleanup();
  parts->decoder.add_fuse();
  parts->decoder.add_strip(" ", 1, 0);
  return Status();
}

// One row per family of `pre` names that share their split regexes.
struct PreFamily {
  std::vector<std::string> names;
  std::vector<std::string> regexes;
};

const std::vector<PreFamily>& pre_families() {
  // Non-ASCII characters are written as \x{...}: an editor or tool that normalizes the source
  // (NFC folds U+1F7D into U+03CE, U+212A into 'K') would otherwise turn ranges backwards or wide.
  static const std::vector<PreFamily> kFamilies = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "dbrx", "smaug-bpe", "chatglm-bpe", "pixtral",
        "midm-2.0", "lfm2"},
       {kLlama3}},
      {{"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez", "hunyuan", "kormo", "f2llmv2"}, {kQwen2}},
      {{"qwen35"}, {kQwen35}},
      {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "roberta-bpe", "gigachat", "jina-es", "jina-de", "jina-v1-en",
        "jina-v2-es", "jina-v2-de", "jina-v2-code", "trillion"},
       {kGpt2}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", kGpt2}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      {{"deepseek-coder"}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
      {{"deepseek-llm"},
       {"[\r\n]",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)", R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
      {{"deepseek-v3"},
       {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
      {{"viking"}, {kBloom, R"(\p{N})"}},
      {{"tekken"}, {kTekken}},
      {{"gpt-4o", "llama4", "kimi-k2"}, {kGpt4o}},
  };
  return kFamilies;
}

}  // namespace

std::vector<std::string> bpe_pre_tokenizer_names() {
  std::vector<std::string> out;
  for (const PreFamily& f : pre_families()) out.insert(out.end(), f.names.begin(), f.names.end());
  return out;
}

StatusOr<std::vector<std::string>> bpe_pre_tokenizer_regexes(const std::string& pre) {
  const std::string name = pre.empty() ? "default" : pre;
  for (const PreFamily& f : pre_families()) {
    for (const std::string& n : f.names) {
      if (n == name) return f.regexes;
    }
  }
  return unimplemented("GGUF pre-tokenizer '" + quoted_text(pre) + "' is not supported");
}

StatusOr<Tokenizer> tokenizer_from_vocab_spec(const VocabSpec& spec) {
  if (spec.tokens.empty()) return invalid_argument("GGUF vocabulary has no tokens");
  if (!spec.token_types.empty() && spec.token_types.size() != spec.tokens.size()) {
    return invalid_argument("GGUF vocabulary: token_type and tokens differ in length");
  }
  TokenizerParts parts;
  bool default_add_bos = false;
  bool default_add_eos = false;
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
  } else if (spec.model == "bert") {
    default_add_bos = true;  // [CLS] text [SEP]
    default_add_eos = true;
    KVASIR_RETURN_IF_ERROR(build_bert(spec, &parts));
  } else {
    return unimplemented("GGUF tokenizer model '" + quoted_text(spec.model) + "' is not supported (gpt2, llama, bert)");
  }
  parts.added_tokens = added_tokens_of(spec, tokens);
  if (spec.model == "llama" && spec.architecture == "phi3") set_phi3_rstrip(&parts.added_tokens);
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
  if (spec.add_eos.value_or(default_add_eos) && info.eos_id >= 0) suf.push_back(info.eos_id);
  parts.post_processor = tok::PostProcessor::wrap(std::move(pre), std::move(suf));
  return Tokenizer::create(std::move(parts));
}

}  // namespace kvasir
