// Args: a small command-line flag reader for the kvasir tool: `--name value`, `--name=value`,
// boolean `--flag` / `--no-flag`, and positionals. Unknown flags are an error, so a typo never
// silently falls back to a default. Must not know any subcommand's meaning.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvasir {

class Args {
 public:
  // `value_flags` take a value, `bool_flags` do not (and accept a --no- prefix).
  static StatusOr<Args> parse(int argc, char** argv, const std::set<std::string>& value_flags,
                              const std::set<std::string>& bool_flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  StatusOr<int64_t> get_int(const std::string& name, int64_t def) const;
  StatusOr<double> get_double(const std::string& name, double def) const;
  bool get_bool(const std::string& name, bool def) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

}  // namespace kvasir
