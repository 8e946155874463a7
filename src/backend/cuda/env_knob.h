// A/B knobs of the CUDA backend: environment variables read once, on the host, by the code they
// steer. One parser so that every knob treats unset and out-of-range values the same way.
#pragma once

#include <cstdlib>
#include <initializer_list>

namespace kvasir::cuda {

// The integer value of `name` when it lies in [lo, hi], else `def`.
inline int env_int(const char* name, int def, int lo, int hi) {
  const char* e = std::getenv(name);
  if (e == nullptr) return def;
  const int v = std::atoi(e);
  return v < lo || v > hi ? def : v;
}

// The integer value of `name` when it is one of `allowed`, else `def`.
inline int env_choice(const char* name, int def, std::initializer_list<int> allowed) {
  const char* e = std::getenv(name);
  if (e == nullptr) return def;
  const int v = std::atoi(e);
  for (int a : allowed) {
    if (v == a) return v;
  }
  return def;
}

// An on/off switch: unset gives `def`; a default-on switch turns off only on a leading '0', a
// default-off one turns on only on a leading '1'.
inline bool env_flag(const char* name, bool def) {
  const char* e = std::getenv(name);
  if (e == nullptr) return def;
  return def ? e[0] != '0' : e[0] == '1';
}

}  // namespace kvasir::cuda
