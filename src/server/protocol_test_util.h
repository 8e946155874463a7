// Test-only: what the OpenAI layer's unit tests (openai_protocol, chat_tools, responses_protocol)
// share: request bodies written as JSON text.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/json.h"

namespace kvasir::server::test_util {

// `s` parsed; a test failure (and null) when it is not JSON.
inline Json parse(const std::string& s) {
  auto j = parse_json(s);
  EXPECT_TRUE(j.ok()) << s;
  return j.ok() ? *j : Json();
}

}  // namespace kvasir::server::test_util
