#include "tokenizer/post_processor.h"

#include <string>

#include "common/quoted_text.h"

namespace kvasir::tok {
namespace {

// Roberta/Bert: "cls": ["<s>", 0].
StatusOr<int32_t> pair_id(const Json& j, const char* key) {
  const Json* v = j.find(key);
  if (v == nullptr || !v->is_array() || v->size() != 2 || !v->as_array()[1].is_int()) {
    return invalid_argument(std::string("post_processor needs \"") + key + "\": [token, id]");
  }
  return static_cast<int32_t>(v->as_array()[1].as_int());
}

}  // namespace

StatusOr<PostProcessor> PostProcessor::from_json(const Json& j) {
  PostProcessor p;
  if (!j.is_null()) KVASIR_RETURN_IF_ERROR(p.add_from_json(j));
  return p;
}

PostProcessor PostProcessor::wrap(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  PostProcessor p;
  p.prefix_ = std::move(prefix);
  p.suffix_ = std::move(suffix);
  return p;
}

Status PostProcessor::add_from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("tokenizer post_processor must be an object");
  const std::string type = j.get_string("type");
  // Each processor wraps what the previous ones produced.
  auto wrap_more = [&](const std::vector<int32_t>& pre, const std::vector<int32_t>& suf) {
    prefix_.insert(prefix_.begin(), pre.begin(), pre.end());
    suffix_.insert(suffix_.end(), suf.begin(), suf.end());
  };
  if (type == "Sequence") {
    const Json* list = j.find("processors");
    if (list == nullptr || !list->is_array()) return invalid_argument("post_processor Sequence needs a list");
    for (const Json& item : list->as_array()) KVASIR_RETURN_IF_ERROR(add_from_json(item));
    return Status();
  }
  if (type == "ByteLevel") return Status();
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    KVASIR_ASSIGN_OR_RETURN(int32_t cls, pair_id(j, "cls"));
    KVASIR_ASSIGN_OR_RETURN(int32_t sep, pair_id(j, "sep"));
    wrap_more({cls}, {sep});
    return Status();
  }
  if (type == "TemplateProcessing") {
    const Json* single = j.find("single");
    const Json* specials = j.find("special_tokens");
    if (single == nullptr || !single->is_array()) return invalid_argument("TemplateProcessing needs \"single\"");
    std::vector<int32_t> pre, suf;
    bool seen_sequence = false;
    for (const Json& item : single->as_array()) {
      if (const Json* seq = item.find("Sequence"); seq != nullptr) {
        if (seen_sequence || seq->get_string("id", "A") != "A") {
          return unimplemented("TemplateProcessing: only one $A sequence is supported");
        }
        seen_sequence = true;
        continue;
      }
      const Json* sp = item.find("SpecialToken");
      if (sp == nullptr) return invalid_argument("TemplateProcessing item must be Sequence or SpecialToken");
      const std::string name = sp->get_string("id");
      const Json* entry = specials != nullptr ? specials->find(name) : nullptr;
      const Json* ids = entry != nullptr ? entry->find("ids") : nullptr;
      if (ids == nullptr || !ids->is_array()) {
        return invalid_argument("TemplateProcessing: special token '" + quoted_text(name) + "' has no ids");
      }
      for (const Json& id : ids->as_array()) {
        if (!id.is_int()) return invalid_argument("TemplateProcessing: non-integer id");
        (seen_sequence ? suf : pre).push_back(static_cast<int32_t>(id.as_int()));
      }
    }
    if (!seen_sequence) return invalid_argument("TemplateProcessing \"single\" lacks $A");
    wrap_more(pre, suf);
    return Status();
  }
  return unimplemented("tokenizer post_processor '" + quoted_text(type) + "' is not supported");
}

}  // namespace kvasir::tok
