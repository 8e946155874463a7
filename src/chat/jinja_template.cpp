#include "chat/jinja_template.h"

#include <algorithm>

#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"

namespace kvasir::jinja {

StatusOr<Template> Template::parse(std::string_view source, const JinjaLimits& limits) {
  ParseLimits pl;
  pl.max_template_bytes = limits.max_template_bytes;
  pl.max_nesting_depth = limits.max_nesting_depth;
  pl.max_tokens = std::min<size_t>(limits.max_template_bytes, 1u << 18);  // real templates: a few thousand
  KVASIR_ASSIGN_OR_RETURN(std::shared_ptr<const Program> prog, parse_template(source, pl));
  Template t;
  t.program_ = std::move(prog);
  return t;
}

StatusOr<std::string> Template::render(const Json& context, const RenderOptions& opts) const {
  if (!program_) return invalid_argument("template was not parsed");
  Interpreter in(opts);
  return in.render(*program_, context);
}

}  // namespace kvasir::jinja
