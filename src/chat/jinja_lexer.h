// Jinja lexer: turns template source into a flat token list with HF's whitespace settings
// (trim_blocks, lstrip_blocks, `-`/`+` tag modifiers, comments and raw blocks) applied exactly as
// jinja2's regex lexer does, so text between tags comes out byte-identical. It must not interpret
// anything: statements and expressions are the parser's job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvasir::jinja {

enum class Tok : uint8_t {
  kData, kBlockBegin, kBlockEnd, kVarBegin, kVarEnd,
  kName, kString, kInteger, kFloat,
  kAdd, kSub, kDiv, kFloorDiv, kMul, kMod, kPow, kTilde,
  kLBracket, kRBracket, kLParen, kRParen, kLBrace, kRBrace,
  kEq, kNe, kGt, kGtEq, kLt, kLtEq, kAssign, kDot, kColon, kPipe, kComma, kSemicolon,
  kEof,
};

struct Token {
  Tok type = Tok::kEof;
  int line = 1;
  std::string text;  // data, name, decoded string literal, or operator spelling
  int64_t int_value = 0;
  double float_value = 0;
};

const char* tok_describe(Tok t);

// Errors carry "line N: ..." in their message. max_tokens bounds memory for hostile input.
StatusOr<std::vector<Token>> tokenize(std::string_view source, size_t max_tokens);

}  // namespace kvasir::jinja
