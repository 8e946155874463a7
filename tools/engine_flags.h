// Engine flags shared by `kvasir generate`, `serve` and `bench`: their names (vLLM's) and the
// conversion of parsed Args into EngineArgs.
#pragma once

#include <set>
#include <string>

#include "setup/engine_args.h"
#include "args.h"

namespace kvasir {

void add_engine_flags(std::set<std::string>& value_flags, std::set<std::string>& bool_flags);
StatusOr<EngineArgs> engine_args_from(const Args& args);
std::string engine_flags_help();

}  // namespace kvasir
