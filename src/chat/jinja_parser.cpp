#include "chat/jinja_parser.h"

#include "chat/jinja_parser_impl.h"

namespace kvasir::jinja::detail {
namespace {

// jinja2 rejects unknown filters and tests at compile time, except inside an `if` statement or an
// inline if-expression (a "soft" frame), where the error is deferred to the call. Loop bodies,
// macros, call/filter/set blocks and `with` bodies are new frames, hard again.
Status check_names(const Expr* e, bool soft) {
  if (!e) return Status();
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !filter_exists(e->name)) {
    return invalid_argument("line " + std::to_string(e->line) + ": No filter named '" + e->name + "'.");
  }
  if (!soft && e->kind == ExprKind::kTest && !test_exists(e->name)) {
    return invalid_argument("line " + std::to_string(e->line) + ": No test named '" + e->name + "'.");
  }
  for (const Expr* x : {e->a.get(), e->b.get(), e->c.get(), e->dyn_args.get(), e->dyn_kwargs.get()}) {
    KVASIR_RETURN_IF_ERROR(check_names(x, soft));
  }
  for (const auto& x : e->items) KVASIR_RETURN_IF_ERROR(check_names(x.get(), soft));
  for (const auto& [k, x] : e->kwargs) KVASIR_RETURN_IF_ERROR(check_names(x.get(), soft));
  return Status();
}

Status check_names(const Body& body, bool soft) {
  for (const auto& s : body) {
    bool inner = s->kind == StmtKind::kIf;  // everything of an `if` is soft
    bool hard_body = s->kind == StmtKind::kFor || s->kind == StmtKind::kMacro || s->kind == StmtKind::kCallBlock ||
                     s->kind == StmtKind::kFilterBlock || s->kind == StmtKind::kAssignBlock ||
                     s->kind == StmtKind::kWith || s->kind == StmtKind::kScope;
    bool body_soft = inner ? true : (hard_body ? false : soft);
    KVASIR_RETURN_IF_ERROR(check_names(s->expr.get(), soft || inner));
    KVASIR_RETURN_IF_ERROR(check_names(s->target.get(), soft));
    // A loop's filter, and the filter of a set/filter block, belong to the inner frame.
    KVASIR_RETURN_IF_ERROR(check_names(s->test.get(), inner ? true : (hard_body ? false : soft)));
    for (const auto& d : s->defaults) KVASIR_RETURN_IF_ERROR(check_names(d.get(), false));
    for (const auto& v : s->values) KVASIR_RETURN_IF_ERROR(check_names(v.get(), soft));
    KVASIR_RETURN_IF_ERROR(check_names(s->body, body_soft));
    KVASIR_RETURN_IF_ERROR(check_names(s->else_body, body_soft));
  }
  return Status();
}

}  // namespace

Status validate_names(const Program& prog) { return check_names(prog.body, false); }

Status Parser::subparse(Names end_tokens, Body* body) {
  Guard g(&stmt_depth_);
  if (stmt_depth_ > limits_.max_nesting_depth) return fail("statements nested too deeply");
  while (cur().type != Tok::kEof) {
    const Token& t = cur();
    if (t.type == Tok::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kData;
      s->line = t.line;
      s->text = t.text;
      body->push_back(std::move(s));
      next();
    } else if (t.type == Tok::kVarBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kPrint;
      s->line = cur().line;
      KVASIR_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false));
      KVASIR_RETURN_IF_ERROR(expect(Tok::kVarEnd));
      body->push_back(std::move(s));
    } else if (t.type == Tok::kBlockBegin) {
      next();
      if (end_tokens.size() && is_any_name(end_tokens)) return Status();
      KVASIR_RETURN_IF_ERROR(parse_statement(body));
      KVASIR_RETURN_IF_ERROR(expect(Tok::kBlockEnd));
    } else {
      return fail("unexpected '" + describe(t) + "'");
    }
  }
  return Status();
}

Status Parser::parse_statements(Names end_tokens, bool drop_needle, Body* body) {
  skip_if(Tok::kColon);
  KVASIR_RETURN_IF_ERROR(expect(Tok::kBlockEnd));
  KVASIR_RETURN_IF_ERROR(subparse(end_tokens, body));
  if (cur().type == Tok::kEof) {
    std::string want;
    for (const char* n : end_tokens) want += std::string(want.empty() ? "'" : " or '") + n + "'";
    return fail("Unexpected end of template. Jinja was looking for the following tags: " + want + ".");
  }
  if (drop_needle) next();
  return Status();
}

Status Parser::parse_statement(Body* body) {
  if (cur().type != Tok::kName) return fail("tag name expected");
  const std::string tag = cur().text;
  int line = cur().line;
  auto s = std::make_unique<Stmt>();
  s->line = line;
  if (tag == "for") {
    KVASIR_RETURN_IF_ERROR(parse_for(s));
  } else if (tag == "if") {
    KVASIR_RETURN_IF_ERROR(parse_if(s));
  } else if (tag == "set") {
    KVASIR_RETURN_IF_ERROR(parse_set(s));
  } else if (tag == "macro" || tag == "call") {
    next();
    bool is_macro = tag == "macro";
    s->kind = is_macro ? StmtKind::kMacro : StmtKind::kCallBlock;
    if (is_macro) {
      KVASIR_RETURN_IF_ERROR(expect_name(&s->text));
      KVASIR_RETURN_IF_ERROR(parse_signature(*s));
    } else {
      if (cur().type == Tok::kLParen) KVASIR_RETURN_IF_ERROR(parse_signature(*s));
      KVASIR_ASSIGN_OR_RETURN(s->expr, parse_expression());
      if (s->expr->kind != ExprKind::kCall) return fail("expected call", line);
    }
    bool c = saw_caller_, v = saw_varargs_, k = saw_kwargs_;
    saw_caller_ = saw_varargs_ = saw_kwargs_ = false;
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    KVASIR_RETURN_IF_ERROR(parse_statements({is_macro ? "endmacro" : "endcall"}, true, &s->body));
    loop_depth_ = saved_loops;
    s->uses_caller = saw_caller_, s->uses_varargs = saw_varargs_, s->uses_kwargs = saw_kwargs_;
    saw_caller_ |= c, saw_varargs_ |= v, saw_kwargs_ |= k;
  } else if (tag == "filter") {
    next();
    s->kind = StmtKind::kFilterBlock;
    KVASIR_ASSIGN_OR_RETURN(s->test, parse_filter(nullptr, true));
    KVASIR_RETURN_IF_ERROR(parse_statements({"endfilter"}, true, &s->body));
  } else if (tag == "with") {
    next();
    s->kind = StmtKind::kWith;
    while (cur().type != Tok::kBlockEnd) {
      if (!s->targets.empty()) KVASIR_RETURN_IF_ERROR(expect(Tok::kComma));
      ExprPtr target;
      KVASIR_RETURN_IF_ERROR(parse_assign_target(&target, false, {}));
      KVASIR_RETURN_IF_ERROR(expect(Tok::kAssign));
      KVASIR_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      s->targets.push_back(std::move(target));
      s->values.push_back(std::move(value));
    }
    KVASIR_RETURN_IF_ERROR(parse_statements({"endwith"}, true, &s->body));
  } else if (tag == "generation") {  // HF's AssistantTracker extension: renders its body as is
    next();
    s->kind = StmtKind::kScope;
    KVASIR_RETURN_IF_ERROR(parse_statements({"endgeneration"}, true, &s->body));
  } else if (tag == "print") {
    next();
    bool first = true;
    while (cur().type != Tok::kBlockEnd) {
      if (!first) KVASIR_RETURN_IF_ERROR(expect(Tok::kComma));
      first = false;
      auto p = std::make_unique<Stmt>();
      p->kind = StmtKind::kPrint;
      p->line = cur().line;
      KVASIR_ASSIGN_OR_RETURN(p->expr, parse_expression());
      body->push_back(std::move(p));
    }
    return Status();
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return fail("'" + tag + "' outside loop", line);
    next();
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
  } else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block" ||
             tag == "autoescape") {
    return unimplemented("line " + std::to_string(line) + ": '" + tag +
                         "' is not supported in chat templates (no template loading or inheritance)");
  } else {
    return fail("Encountered unknown tag '" + tag + "'.", line);
  }
  body->push_back(std::move(s));
  return Status();
}

Status Parser::parse_for(StmtPtr& s) {
  next();
  s->kind = StmtKind::kFor;
  KVASIR_RETURN_IF_ERROR(parse_assign_target(&s->target, false, {"in"}));
  if (!skip_name("in")) return fail("expected 'in'");
  KVASIR_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, false, {"recursive"}, false));
  if (skip_name("if")) {
    KVASIR_ASSIGN_OR_RETURN(s->test, parse_expression());
  }
  if (is_name("recursive")) return unimplemented("line " + std::to_string(s->line) + ": recursive loops are not supported");
  ++loop_depth_;
  KVASIR_RETURN_IF_ERROR(parse_statements({"endfor", "else"}, false, &s->body));
  --loop_depth_;
  bool is_else = is_name("else");
  next();
  if (is_else) KVASIR_RETURN_IF_ERROR(parse_statements({"endfor"}, true, &s->else_body));
  return Status();
}

Status Parser::parse_if(StmtPtr& s) {
  next();
  Stmt* node = s.get();
  while (true) {
    node->kind = StmtKind::kIf;
    KVASIR_ASSIGN_OR_RETURN(node->test, parse_tuple(false, false, {}, false));
    KVASIR_RETURN_IF_ERROR(parse_statements({"elif", "else", "endif"}, false, &node->body));
    if (skip_name("elif")) {
      auto elif = std::make_unique<Stmt>();
      elif->line = cur().line;
      Stmt* raw = elif.get();
      node->else_body.push_back(std::move(elif));
      node = raw;
      continue;
    }
    if (skip_name("else")) {
      KVASIR_RETURN_IF_ERROR(parse_statements({"endif"}, true, &node->else_body));
    } else {
      next();  // endif
    }
    return Status();
  }
}

Status Parser::parse_set(StmtPtr& s) {
  next();
  KVASIR_RETURN_IF_ERROR(parse_assign_target(&s->target, true, {}));
  if (skip_if(Tok::kAssign)) {
    s->kind = StmtKind::kAssign;
    KVASIR_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false));
    return Status();
  }
  s->kind = StmtKind::kAssignBlock;
  KVASIR_ASSIGN_OR_RETURN(s->test, parse_filter(nullptr, false));
  return parse_statements({"endset"}, true, &s->body);
}

Status Parser::parse_signature(Stmt& s) {
  KVASIR_RETURN_IF_ERROR(expect(Tok::kLParen));
  while (cur().type != Tok::kRParen) {
    if (!s.params.empty()) KVASIR_RETURN_IF_ERROR(expect(Tok::kComma));
    std::string name;
    KVASIR_RETURN_IF_ERROR(expect_name(&name));
    if (skip_if(Tok::kAssign)) {
      KVASIR_ASSIGN_OR_RETURN(ExprPtr d, parse_expression());
      s.defaults.push_back(std::move(d));
    } else if (!s.defaults.empty()) {
      return fail("non-default argument follows default argument");
    }
    s.params.push_back(std::move(name));
  }
  return expect(Tok::kRParen);
}

Status Parser::parse_assign_target(ExprPtr* out, bool with_namespace, Names extra_end) {
  KVASIR_ASSIGN_OR_RETURN(*out, parse_tuple(true, true, extra_end, false, with_namespace));
  const Expr& t = **out;
  bool ok = t.kind == ExprKind::kName || t.kind == ExprKind::kNSRef;
  if (t.kind == ExprKind::kTuple) {
    ok = true;
    for (const auto& x : t.items) ok = ok && x->kind == ExprKind::kName;
  }
  if (ok && t.kind == ExprKind::kName && (t.name == "true" || t.name == "false" || t.name == "none")) ok = false;
  if (!ok) return fail("can't assign to this expression", t.line);
  return Status();
}

}  // namespace kvasir::jinja::detail

namespace kvasir::jinja {

StatusOr<std::shared_ptr<const Program>> parse_template(std::string_view source, const ParseLimits& limits) {
  if (source.size() > limits.max_template_bytes) return out_of_range("chat template is larger than the limit");
  KVASIR_ASSIGN_OR_RETURN(std::vector<Token> toks, tokenize(source, limits.max_tokens));
  detail::Parser p(std::move(toks), limits);
  return p.run();
}

}  // namespace kvasir::jinja
