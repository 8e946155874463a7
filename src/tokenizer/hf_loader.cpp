#include "tokenizer/hf_loader.h"

#include <algorithm>
#include <filesystem>

#include "common/json.h"
#include "common/mapped_file.h"
#include "common/quoted_text.h"

namespace kvasir {
namespace {

using tok::AddedToken;

// The tokenizer keeps per-id tables sized by the largest id, so a sparse id (a 1 KB file naming id
// 49,999,999) would cost gigabytes and seconds. Real vocabularies are dense; this many unused ids
// is far more than any has, and keeps the tables proportional to the file.
constexpr int64_t kMaxUnusedIds = 65536;

StatusOr<tok::BpeModel> parse_bpe_model(const Json& m) {
  const std::string type = m.get_string("type", "BPE");
  if (type != "BPE") return unimplemented("tokenizer model '" + quoted_text(type) + "' is not supported (only BPE)");
  const Json* vocab = m.find("vocab");
  const Json* merges = m.find("merges");
  if (vocab == nullptr || !vocab->is_object()) return invalid_argument("BPE model lacks a vocab object");
  tok::TokenMap map;
  map.reserve(vocab->size());
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab->as_object()) {
    if (!id.is_int() || id.as_int() < 0 || id.as_int() > INT32_MAX) {
      return invalid_argument("BPE vocab entry '" + quoted_text(token) + "' has a bad id");
    }
    map[token] = static_cast<int32_t>(id.as_int());
    max_id = std::max(max_id, id.as_int());
  }
  if (max_id >= static_cast<int64_t>(map.size()) + kMaxUnusedIds) {
    return invalid_argument("BPE vocab id " + std::to_string(max_id) + " leaves more than " +
                            std::to_string(kMaxUnusedIds) + " ids unused");
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  if (merges != nullptr && merges->is_array()) {
    pairs.reserve(merges->size());
    for (const Json& item : merges->as_array()) {
      if (item.is_string()) {  // "a b" (older files)
        const std::string& s = item.as_string();
        size_t sp = s.find(' ');
        if (sp == std::string::npos) return invalid_argument("BPE merge '" + quoted_text(s) + "' has no space");
        pairs.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (item.is_array() && item.size() == 2 && item.as_array()[0].is_string() &&
                 item.as_array()[1].is_string()) {
        pairs.emplace_back(item.as_array()[0].as_string(), item.as_array()[1].as_string());
      } else {
        return invalid_argument("BPE merge must be \"a b\" or [a, b]");
      }
    }
  }
  tok::BpeOptions opts;
  opts.byte_fallback = m.get_bool("byte_fallback", false);
  opts.fuse_unk = m.get_bool("fuse_unk", false);
  opts.ignore_merges = m.get_bool("ignore_merges", false);
  opts.continuing_subword_prefix = m.get_string("continuing_subword_prefix");
  opts.end_of_word_suffix = m.get_string("end_of_word_suffix");
  if (const Json* unk = m.find("unk_token"); unk != nullptr && unk->is_string()) {
    auto it = map.find(unk->as_string());
    if (it == map.end()) return invalid_argument("BPE unk_token '" + quoted_text(unk->as_string()) + "' is not in the vocab");
    opts.unk_id = it->second;
  }
  return tok::BpeModel::from_merges(std::move(map), pairs, std::move(opts));
}

StatusOr<std::vector<AddedToken>> parse_added_tokens(const Json& root) {
  std::vector<AddedToken> out;
  const Json* list = root.find("added_tokens");
  if (list == nullptr || list->is_null()) return out;
  if (!list->is_array()) return invalid_argument("added_tokens must be a list");
  for (const Json& a : list->as_array()) {
    const Json* id = a.find("id");
    if (id == nullptr || !id->is_int() || id->as_int() < 0 || id->as_int() > INT32_MAX) {
      return invalid_argument("added token without a valid id");
    }
    AddedToken t;
    t.id = static_cast<int32_t>(id->as_int());
    t.content = a.get_string("content");
    t.special = a.get_bool("special", false);
    t.lstrip = a.get_bool("lstrip", false);
    t.rstrip = a.get_bool("rstrip", false);
    t.single_word = a.get_bool("single_word", false);
    t.normalized = a.get_bool("normalized", !t.special);
    out.push_back(std::move(t));
  }
  return out;
}

// tokenizer_config.json writes special tokens as "<s>" or {"content": "<s>", ...}.
std::string token_string(const Json& config, const char* key) {
  const Json* v = config.find(key);
  if (v == nullptr) return "";
  if (v->is_string()) return v->as_string();
  if (v->is_object()) return v->get_string("content");
  return "";
}

std::string chat_template_from_config(const Json& config) {
  const Json* t = config.find("chat_template");
  if (t == nullptr) return "";
  if (t->is_string()) return t->as_string();
  if (t->is_array()) {  // [{"name": "default", "template": ...}, ...]
    std::string first;
    for (const Json& item : t->as_array()) {
      if (item.get_string("name") == "default") return item.get_string("template");
      if (first.empty()) first = item.get_string("template");
    }
    return first;
  }
  return "";
}

}  // namespace

StatusOr<Tokenizer> tokenizer_from_hf_json(std::string_view tokenizer_json,
                                           std::string_view tokenizer_config_json,
                                           std::string_view chat_template) {
  KVASIR_ASSIGN_OR_RETURN(Json root, parse_json(tokenizer_json));
  if (!root.is_object()) return invalid_argument("tokenizer.json must be an object");
  Json config = Json::object();
  if (!tokenizer_config_json.empty()) {
    KVASIR_ASSIGN_OR_RETURN(config, parse_json(tokenizer_config_json));
    if (!config.is_object()) return invalid_argument("tokenizer_config.json must be an object");
  }
  static const Json kNull;
  auto field = [&](const char* key) -> const Json& {
    const Json* v = root.find(key);
    return v != nullptr ? *v : kNull;
  };
  const Json* model = root.find("model");
  if (model == nullptr || !model->is_object()) return invalid_argument("tokenizer.json lacks a model");

  TokenizerParts parts;
  KVASIR_ASSIGN_OR_RETURN(parts.model, parse_bpe_model(*model));
  KVASIR_ASSIGN_OR_RETURN(parts.normalizer, tok::Normalizer::from_json(field("normalizer")));
  KVASIR_ASSIGN_OR_RETURN(parts.pre_tokenizer, tok::PreTokenizer::from_json(field("pre_tokenizer")));
  KVASIR_ASSIGN_OR_RETURN(parts.post_processor, tok::PostProcessor::from_json(field("post_processor")));
  KVASIR_ASSIGN_OR_RETURN(parts.decoder, tok::Decoder::from_json(field("decoder")));
  KVASIR_ASSIGN_OR_RETURN(parts.added_tokens, parse_added_tokens(root));
  const int64_t id_limit =
      static_cast<int64_t>(parts.model.vocab_size() + parts.added_tokens.size()) + kMaxUnusedIds;
  for (const AddedToken& a : parts.added_tokens) {
    if (a.id >= id_limit) {
      return invalid_argument("added token id " + std::to_string(a.id) + " leaves more than " +
                              std::to_string(kMaxUnusedIds) + " ids unused");
    }
  }

  auto lookup = [&](const std::string& token) -> int32_t {
    if (token.empty()) return -1;
    for (const AddedToken& a : parts.added_tokens) {
      if (a.content == token) return a.id;
    }
    return parts.model.token_to_id(token);
  };
  TokenizerInfo& info = parts.info;
  info.bos_token = token_string(config, "bos_token");
  info.eos_token = token_string(config, "eos_token");
  info.bos_id = lookup(info.bos_token);
  info.eos_id = lookup(info.eos_token);
  info.pad_id = lookup(token_string(config, "pad_token"));
  info.unk_id = parts.model.options().unk_id;
  if (info.unk_id < 0) info.unk_id = lookup(token_string(config, "unk_token"));
  info.chat_template = chat_template.empty() ? chat_template_from_config(config) : std::string(chat_template);

  // transformers rebuilds the post-processor of Llama/Gemma-style tokenizers from these flags;
  // honour them when the config states them (and the tokens exist).
  const Json* add_bos = config.find("add_bos_token");
  const Json* add_eos = config.find("add_eos_token");
  if ((add_bos != nullptr && add_bos->is_bool()) || (add_eos != nullptr && add_eos->is_bool())) {
    bool want_bos = add_bos != nullptr && add_bos->is_bool() && add_bos->as_bool() && info.bos_id >= 0;
    bool want_eos = add_eos != nullptr && add_eos->is_bool() && add_eos->as_bool() && info.eos_id >= 0;
    std::vector<int32_t> pre, suf;
    if (want_bos) pre.push_back(info.bos_id);
    if (want_eos) suf.push_back(info.eos_id);
    parts.post_processor = tok::PostProcessor::wrap(std::move(pre), std::move(suf));
  }
  return Tokenizer::create(std::move(parts));
}

StatusOr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = path;
  fs::path json_path = path;
  if (fs::is_directory(dir, ec)) {
    json_path = dir / "tokenizer.json";
  } else {
    dir = json_path.parent_path();
  }
  if (!fs::exists(json_path, ec)) return not_found("no tokenizer.json at " + json_path.string());
  KVASIR_ASSIGN_OR_RETURN(std::string json, read_text_file(json_path.string()));
  std::string config, chat_template;
  if (fs::path c = dir / "tokenizer_config.json"; fs::exists(c, ec)) {
    KVASIR_ASSIGN_OR_RETURN(config, read_text_file(c.string()));
  }
  if (fs::path t = dir / "chat_template.jinja"; fs::exists(t, ec)) {
    KVASIR_ASSIGN_OR_RETURN(chat_template, read_text_file(t.string()));
  }
  return tokenizer_from_hf_json(json, config, chat_template);
}

}  // namespace kvasir
