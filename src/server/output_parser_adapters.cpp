#include "server/output_parser_adapters.h"

#include "server/openai_response.h"

namespace kvasir::server {

// Until the toolcall/ and reasoning/ libraries are merged no parser name is known.
StatusOr<std::unique_ptr<AutoToolCalls>> make_auto_tool_calls(const std::string& name) {
  return invalid_argument("unknown tool call parser '" + name + "'");
}

StatusOr<std::unique_ptr<ReasoningSplitter>> make_reasoning_splitter(const std::string& name) {
  return invalid_argument("unknown reasoning parser '" + name + "'");
}

}  // namespace kvasir::server
