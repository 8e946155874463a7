#include "setup/generation_defaults.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/mapped_file.h"

namespace kvasir {
namespace {

// The same type checks (and messages) as a request's sampling fields get on the server.
Status read_number(const Json& obj, const char* key, const std::string& where, std::optional<double>* out) {
  const Json* v = obj.find(key);
  if (v == nullptr || v->is_null()) return Status();
  if (!v->is_number()) return invalid_argument(where + ": '" + key + "' must be a number");
  const double d = v->as_double();
  if (!std::isfinite(d)) return invalid_argument(where + ": '" + key + "' must be finite");
  *out = d;
  return Status();
}

Status read_top_k(const Json& obj, const std::string& where, std::optional<int>* out) {
  const Json* v = obj.find("top_k");
  if (v == nullptr || v->is_null()) return Status();
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const double d = v->is_number() ? v->as_double() : 0.5;
  if (!v->is_number() || !std::isfinite(d) || std::floor(d) != d) {
    return invalid_argument(where + ": 'top_k' must be an integer");
  }
  const bool in_range = v->is_int() ? (v->as_int() >= -kMax && v->as_int() <= kMax) : (d >= -kMax && d <= kMax);
  if (!in_range) return invalid_argument(where + ": 'top_k' must be in [" + std::to_string(-kMax) + ", " + std::to_string(kMax) + "]");
  *out = static_cast<int>(v->is_int() ? v->as_int() : static_cast<int64_t>(d));
  return Status();
}

}  // namespace

bool GenerationDefaults::empty() const {
  return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_new_tokens;
}

void GenerationDefaults::apply_to(SamplingParams* p) const {
  if (temperature) p->temperature = static_cast<float>(*temperature);
  if (top_p) p->top_p = static_cast<float>(*top_p);
  if (top_k) p->top_k = *top_k;
  if (min_p) p->min_p = static_cast<float>(*min_p);
  if (repetition_penalty) p->repetition_penalty = static_cast<float>(*repetition_penalty);
}

Json GenerationDefaults::to_json() const {
  Json o = Json::object();
  if (temperature) o.set("temperature", *temperature);
  if (top_p) o.set("top_p", *top_p);
  if (top_k) o.set("top_k", *top_k);
  if (min_p) o.set("min_p", *min_p);
  if (repetition_penalty) o.set("repetition_penalty", *repetition_penalty);
  return o;
}

StatusOr<GenerationDefaults> generation_defaults_from_json(const Json& gen, const std::string& where) {
  if (!gen.is_object()) return invalid_argument(where + ": not a JSON object");
  GenerationDefaults d;
  KVASIR_RETURN_IF_ERROR(read_number(gen, "temperature", where, &d.temperature));
  KVASIR_RETURN_IF_ERROR(read_number(gen, "top_p", where, &d.top_p));
  KVASIR_RETURN_IF_ERROR(read_top_k(gen, where, &d.top_k));
  KVASIR_RETURN_IF_ERROR(read_number(gen, "min_p", where, &d.min_p));
  KVASIR_RETURN_IF_ERROR(read_number(gen, "repetition_penalty", where, &d.repetition_penalty));
  if (const Json* m = gen.find("max_new_tokens"); m && m->is_int() && m->as_int() > 0) {
    d.max_new_tokens = static_cast<int>(std::min<int64_t>(m->as_int(), 1 << 30));
  }
  return d;
}

StatusOr<std::optional<Json>> read_generation_config(const std::string& dir) {
  const std::string path = dir + "/generation_config.json";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::optional<Json>();
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(path, 16u << 20));
  auto j = parse_json(text);
  if (!j.ok()) return invalid_argument(path + ": not valid JSON: " + j.status().message());
  return std::optional<Json>(std::move(j).value());
}

}  // namespace kvasir
