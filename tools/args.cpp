#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kvasir {

StatusOr<Args> Args::parse(int argc, char** argv, const std::set<std::string>& value_flags,
                           const std::set<std::string>& bool_flags) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      a.positionals_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (value_flags.count(name)) {
      if (!has_value) {
        if (i + 1 >= argc) return invalid_argument("flag --" + name + " needs a value");
        value = argv[++i];
      }
      a.values_.emplace(name, value);
    } else if (bool_flags.count(name)) {
      a.values_.emplace(name, has_value ? value : "true");
    } else if (name.rfind("no-", 0) == 0 && bool_flags.count(name.substr(3))) {
      a.values_.emplace(name.substr(3), "false");
    } else {
      return invalid_argument("unknown flag --" + name);
    }
  }
  return a;
}

std::string Args::get(const std::string& name, const std::string& def) const {
  auto range = values_.equal_range(name);
  if (range.first == range.second) return def;
  return std::prev(range.second)->second;  // the last occurrence wins
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

StatusOr<int64_t> Args::get_int(const std::string& name, int64_t def) const {
  if (!has(name)) return def;
  std::string s = get(name);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') return invalid_argument("--" + name + " expects an integer, got '" + s + "'");
  return static_cast<int64_t>(v);
}

StatusOr<double> Args::get_double(const std::string& name, double def) const {
  if (!has(name)) return def;
  std::string s = get(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !std::isfinite(v)) return invalid_argument("--" + name + " expects a number, got '" + s + "'");
  return v;
}

bool Args::get_bool(const std::string& name, bool def) const {
  if (!has(name)) return def;
  std::string v = get(name);
  return v == "true" || v == "1" || v == "yes";
}

}  // namespace kvasir
