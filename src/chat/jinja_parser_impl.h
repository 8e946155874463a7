// Internal to the parser (jinja_parser.cpp: statements, jinja_parser_expr.cpp: expressions).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace kvasir::jinja::detail {

Status validate_names(const Program& prog);

class Parser {
 public:
  Parser(std::vector<Token> toks, const ParseLimits& limits) : toks_(std::move(toks)), limits_(limits) {}

  StatusOr<std::shared_ptr<const Program>> run() {
    auto prog = std::make_shared<Program>();
    KVASIR_RETURN_IF_ERROR(subparse({}, &prog->body));
    if (cur().type != Tok::kEof) return fail("unexpected '" + cur().text + "'");
    KVASIR_RETURN_IF_ERROR(validate_names(*prog));
    return std::shared_ptr<const Program>(std::move(prog));
  }

 private:
  using Names = std::initializer_list<const char*>;

  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool is_any_name(Names names) const {
    for (const char* n : names) {
      if (is_name(n)) return true;
    }
    return false;
  }
  bool skip_if(Tok t) {
    if (cur().type != t) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  Status fail(const std::string& msg, int line = 0) const {
    return invalid_argument("line " + std::to_string(line ? line : cur().line) + ": " + msg);
  }
  std::string describe(const Token& t) const {
    if (t.type == Tok::kName || (t.type >= Tok::kAdd && t.type < Tok::kEof)) return t.text;
    return tok_describe(t.type);
  }
  Status expect(Tok t) {
    if (cur().type != t) {
      if (cur().type == Tok::kEof) return fail(std::string("unexpected end of template, expected '") + tok_describe(t) + "'");
      return fail(std::string("expected token '") + tok_describe(t) + "', got '" + describe(cur()) + "'");
    }
    next();
    return Status();
  }
  Status expect_name(std::string* out) {
    if (cur().type != Tok::kName) return fail("expected name, got '" + describe(cur()) + "'");
    *out = cur().text;
    next();
    return Status();
  }

  ExprPtr mk(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }
  // Computes the node's depth from its children and enforces the nesting limit.
  Status done(Expr& e) {
    int d = 0;
    auto see = [&](const ExprPtr& x) {
      if (x) d = std::max(d, x->depth);
    };
    see(e.a), see(e.b), see(e.c), see(e.dyn_args), see(e.dyn_kwargs);
    for (const auto& x : e.items) see(x);
    for (const auto& [k, x] : e.kwargs) see(x);
    e.depth = d + 1;
    if (e.depth > limits_.max_nesting_depth) return fail("expression nested too deeply", e.line);
    return Status();
  }
  struct Guard {
    explicit Guard(int* d) : d_(d) { ++*d_; }
    ~Guard() { --*d_; }
    int* d_;
  };
  Status check_recursion() const {
    return rec_ > limits_.max_nesting_depth ? fail("template nested too deeply") : Status();
  }

  Status subparse(Names end_tokens, Body* body);
  Status parse_statements(Names end_tokens, bool drop_needle, Body* body);
  Status parse_statement(Body* body);
  Status parse_for(StmtPtr& s);
  Status parse_if(StmtPtr& s);
  Status parse_set(StmtPtr& s);
  Status parse_signature(Stmt& s);
  Status parse_assign_target(ExprPtr* out, bool with_namespace, Names extra_end);

  StatusOr<ExprPtr> parse_expression(bool with_condexpr = true);
  StatusOr<ExprPtr> parse_condexpr();
  StatusOr<ExprPtr> parse_or();
  StatusOr<ExprPtr> parse_and();
  StatusOr<ExprPtr> parse_not();
  StatusOr<ExprPtr> parse_compare();
  StatusOr<ExprPtr> parse_math1();
  StatusOr<ExprPtr> parse_concat();
  StatusOr<ExprPtr> parse_math2();
  StatusOr<ExprPtr> parse_pow();
  StatusOr<ExprPtr> parse_unary(bool with_filter);
  StatusOr<ExprPtr> parse_primary(bool with_namespace = false);
  StatusOr<ExprPtr> parse_tuple(bool simplified, bool with_condexpr, Names extra_end, bool explicit_parens,
                                bool with_namespace = false);
  StatusOr<ExprPtr> parse_postfix(ExprPtr node);
  StatusOr<ExprPtr> parse_filter_expr(ExprPtr node);
  StatusOr<ExprPtr> parse_subscript(ExprPtr node);
  StatusOr<ExprPtr> parse_subscribed();
  Status parse_call_args(Expr& e);
  StatusOr<ExprPtr> parse_filter(ExprPtr node, bool start_inline);
  StatusOr<ExprPtr> parse_test(ExprPtr node);

  std::vector<Token> toks_;
  ParseLimits limits_;
  size_t pos_ = 0;
  int rec_ = 0;         // recursion depth of the parser itself
  int stmt_depth_ = 0;  // nesting of statement bodies
  int loop_depth_ = 0;  // for `break`/`continue` checks; reset inside macros
  bool saw_caller_ = false, saw_varargs_ = false, saw_kwargs_ = false;
};

}  // namespace kvasir::jinja::detail
