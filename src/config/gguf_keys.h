// GgufKeys: reads `<arch>.<suffix>` metadata keys of a GGUF file, turning absent keys into
// defaults and everything else into errors that name the key. Shared by the generic GGUF reader
// and the model families that read keys of their own. Must not know any family.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "loader/gguf_file.h"

namespace kvasir {

// Reads `<arch>.<suffix>` keys, turning absent keys into defaults and everything else into
// errors that name the key.
class GgufKeys {
 public:
  GgufKeys(const GgufFile& f, std::string arch) : f_(f), prefix_(std::move(arch) + ".") {}

  std::string key(std::string_view suffix) const { return prefix_ + std::string(suffix); }
  // The file, for the rare family fact stored as a tensor (Phi-3's longrope factors).
  const GgufFile& file() const { return f_; }
  bool has(std::string_view suffix) const { return f_.has(key(suffix)); }

  // An integer that must fit in int64; per-layer arrays are accepted when all entries agree.
  StatusOr<int64_t> integer(std::string_view suffix) const {
    const std::string k = key(suffix);
    const GgufValue* v = f_.find(k);
    if (v == nullptr) return not_found("GGUF: required key '" + k + "' is missing");
    if (v->type == GgufType::kArray) return uniform_array(k, *v);
    auto r = f_.get_i64(k);
    if (!r.ok()) return r.status();
    return *r;
  }
  StatusOr<int64_t> integer_or(std::string_view suffix, int64_t def) const {
    return has(suffix) ? integer(suffix) : StatusOr<int64_t>(def);
  }
  StatusOr<double> number_or(std::string_view suffix, double def) const {
    return has(suffix) ? f_.get_f64(key(suffix)) : StatusOr<double>(def);
  }

 private:
  StatusOr<int64_t> uniform_array(const std::string& k, const GgufValue& v) const {
    KVASIR_ASSIGN_OR_RETURN(std::vector<int32_t> values, f_.get_i32_array(k));
    if (values.empty()) return invalid_argument("GGUF: key '" + k + "' is an empty array");
    for (int32_t x : values) {
      if (x != values[0]) {
        return unimplemented("GGUF: key '" + k +
                             "' differs between layers; per-layer sizes are not supported");
      }
    }
    return int64_t{values[0]};
  }

  const GgufFile& f_;
  std::string prefix_;
};

}  // namespace kvasir
