// Template: a parsed Jinja template that renders like jinja2 under Hugging Face's chat-template
// environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, HF's
// tojson / raise_exception / strftime_now / namespace / dict). Template text is untrusted: every
// resource it can spend is bounded by JinjaLimits and a hostile template yields an error Status,
// never a hang or a crash. No file, environment or object-internals access exists to be sandboxed.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace kvasir::jinja {

struct Program;

struct JinjaLimits {
  size_t max_template_bytes = 1u << 20;
  int max_nesting_depth = 100;           // parse: expression tree depth, statement nesting
  size_t max_output_bytes = 32u << 20;   // the rendered text, and any macro/block capture
  size_t max_string_bytes = 32u << 20;   // any one string or list the template builds
  int max_call_depth = 64;               // macro calls in flight (self-recursion)
  int max_recursion_depth = 500;         // evaluator recursion: expressions + statements + calls
  uint64_t max_loop_iterations = 1000000;  // all loop iterations of one render
  uint64_t max_steps = 5000000;          // expression and statement evaluations (~1 s)
  uint64_t max_bytes_built = 1ull << 30; // bytes of strings/lists built over the whole render
  int64_t max_range = 100000;            // range() length, as jinja's sandbox MAX_RANGE
  int max_value_depth = 200;             // nesting of lists/dicts, input JSON included
  double max_render_seconds = 5;         // wall-clock backstop behind the budgets above
};

struct RenderOptions {
  JinjaLimits limits;
  // The clock of strftime_now(); nullopt means the local time now. Tests fix it.
  std::optional<std::tm> now;
};

class Template {
 public:
  // Parse errors carry "line N: ..." and come back as kInvalidArgument (kUnimplemented for
  // valid Jinja this engine does not support, kOutOfRange for limits).
  static StatusOr<Template> parse(std::string_view source, const JinjaLimits& limits = {});

  // `context` must be a JSON object; its members become the template's variables (JSON null is
  // Python None). raise_exception(msg) in the template comes back as kInvalidArgument with msg.
  // Const and thread-safe: one parsed Template may render on many threads at once.
  StatusOr<std::string> render(const Json& context, const RenderOptions& opts = {}) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace kvasir::jinja
