#include "chat/jinja_parser_impl.h"

namespace kvasir::jinja::detail {

StatusOr<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  Guard g(&rec_);
  KVASIR_RETURN_IF_ERROR(check_recursion());
  return with_condexpr ? parse_condexpr() : parse_or();
}

StatusOr<ExprPtr> Parser::parse_condexpr() {
  Guard g(&rec_);
  KVASIR_RETURN_IF_ERROR(check_recursion());
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
  while (skip_name("if")) {
    auto e = mk(ExprKind::kCondExpr, line);
    KVASIR_ASSIGN_OR_RETURN(e->a, parse_or());
    if (skip_name("else")) {
      KVASIR_ASSIGN_OR_RETURN(e->c, parse_condexpr());
    }
    e->b = std::move(expr1);
    KVASIR_RETURN_IF_ERROR(done(*e));
    expr1 = std::move(e);
    line = cur().line;
  }
  return expr1;
}

StatusOr<ExprPtr> Parser::parse_or() {
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (skip_name("or")) {
    auto e = mk(ExprKind::kOr, line);
    e->a = std::move(left);
    KVASIR_ASSIGN_OR_RETURN(e->b, parse_and());
    KVASIR_RETURN_IF_ERROR(done(*e));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_and() {
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (skip_name("and")) {
    auto e = mk(ExprKind::kAnd, line);
    e->a = std::move(left);
    KVASIR_ASSIGN_OR_RETURN(e->b, parse_not());
    KVASIR_RETURN_IF_ERROR(done(*e));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_not() {
  Guard g(&rec_);
  KVASIR_RETURN_IF_ERROR(check_recursion());
  if (is_name("not")) {
    auto e = mk(ExprKind::kNot, cur().line);
    next();
    KVASIR_ASSIGN_OR_RETURN(e->a, parse_not());
    KVASIR_RETURN_IF_ERROR(done(*e));
    return e;
  }
  return parse_compare();
}

StatusOr<ExprPtr> Parser::parse_compare() {
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr expr, parse_math1());
  ExprPtr cmp;
  while (true) {
    CmpOp op;
    Tok t = cur().type;
    if (t == Tok::kEq) op = CmpOp::kEq;
    else if (t == Tok::kNe) op = CmpOp::kNe;
    else if (t == Tok::kLt) op = CmpOp::kLt;
    else if (t == Tok::kLtEq) op = CmpOp::kLtEq;
    else if (t == Tok::kGt) op = CmpOp::kGt;
    else if (t == Tok::kGtEq) op = CmpOp::kGtEq;
    else if (is_name("in")) op = CmpOp::kIn;
    else if (is_name("not") && look().type == Tok::kName && look().text == "in") op = CmpOp::kNotIn;
    else break;
    next();
    if (op == CmpOp::kNotIn) next();
    if (!cmp) {
      cmp = mk(ExprKind::kCompare, line);
      cmp->a = std::move(expr);
    }
    KVASIR_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
    cmp->items.push_back(std::move(rhs));
    cmp->cmp_ops.push_back(op);
  }
  if (!cmp) return expr;
  KVASIR_RETURN_IF_ERROR(done(*cmp));
  return cmp;
}

StatusOr<ExprPtr> Parser::parse_math1() {
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (cur().type == Tok::kAdd || cur().type == Tok::kSub) {
    auto e = mk(ExprKind::kBinary, line);
    e->op = cur().type == Tok::kAdd ? BinOp::kAdd : BinOp::kSub;
    next();
    e->a = std::move(left);
    KVASIR_ASSIGN_OR_RETURN(e->b, parse_concat());
    KVASIR_RETURN_IF_ERROR(done(*e));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_concat() {
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
  if (cur().type != Tok::kTilde) return first;
  auto e = mk(ExprKind::kConcat, line);
  e->items.push_back(std::move(first));
  while (skip_if(Tok::kTilde)) {
    KVASIR_ASSIGN_OR_RETURN(ExprPtr x, parse_math2());
    e->items.push_back(std::move(x));
  }
  KVASIR_RETURN_IF_ERROR(done(*e));
  return e;
}

StatusOr<ExprPtr> Parser::parse_math2() {
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (true) {
    Tok t = cur().type;
    BinOp op;
    if (t == Tok::kMul) op = BinOp::kMul;
    else if (t == Tok::kDiv) op = BinOp::kDiv;
    else if (t == Tok::kFloorDiv) op = BinOp::kFloorDiv;
    else if (t == Tok::kMod) op = BinOp::kMod;
    else break;
    next();
    auto e = mk(ExprKind::kBinary, line);
    e->op = op;
    e->a = std::move(left);
    KVASIR_ASSIGN_OR_RETURN(e->b, parse_pow());
    KVASIR_RETURN_IF_ERROR(done(*e));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_pow() {
  int line = cur().line;
  KVASIR_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (skip_if(Tok::kPow)) {
    auto e = mk(ExprKind::kBinary, line);
    e->op = BinOp::kPow;
    e->a = std::move(left);
    KVASIR_ASSIGN_OR_RETURN(e->b, parse_unary(true));
    KVASIR_RETURN_IF_ERROR(done(*e));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_unary(bool with_filter) {
  Guard g(&rec_);
  KVASIR_RETURN_IF_ERROR(check_recursion());
  ExprPtr node;
  if (cur().type == Tok::kSub || cur().type == Tok::kAdd) {
    node = mk(cur().type == Tok::kSub ? ExprKind::kNeg : ExprKind::kPos, cur().line);
    next();
    KVASIR_ASSIGN_OR_RETURN(node->a, parse_unary(false));
    KVASIR_RETURN_IF_ERROR(done(*node));
  } else {
    KVASIR_ASSIGN_OR_RETURN(node, parse_primary());
  }
  KVASIR_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    KVASIR_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

StatusOr<ExprPtr> Parser::parse_primary(bool with_namespace) {
  Guard g(&rec_);
  KVASIR_RETURN_IF_ERROR(check_recursion());
  const Token& t = cur();
  int line = t.line;
  if (t.type == Tok::kName) {
    std::string name = t.text;
    next();
    if (name == "true" || name == "false" || name == "True" || name == "False") {
      auto e = mk(ExprKind::kConst, line);
      e->constant = Value::boolean(name == "true" || name == "True");
      return e;
    }
    if (name == "none" || name == "None") {
      auto e = mk(ExprKind::kConst, line);
      e->constant = Value::none();
      return e;
    }
    if (with_namespace && cur().type == Tok::kDot) {
      next();
      auto e = mk(ExprKind::kNSRef, line);
      e->name = name;
      KVASIR_RETURN_IF_ERROR(expect_name(&e->attr));
      return e;
    }
    saw_caller_ |= name == "caller";
    saw_varargs_ |= name == "varargs";
    saw_kwargs_ |= name == "kwargs";
    auto e = mk(ExprKind::kName, line);
    e->name = std::move(name);
    return e;
  }
  if (t.type == Tok::kString) {
    std::string buf;
    while (cur().type == Tok::kString) {
      buf += cur().text;
      next();
    }
    auto e = mk(ExprKind::kConst, line);
    e->constant = Value::string(std::move(buf));
    return e;
  }
  if (t.type == Tok::kInteger || t.type == Tok::kFloat) {
    auto e = mk(ExprKind::kConst, line);
    e->constant = t.type == Tok::kInteger ? Value::integer(t.int_value) : Value::real(t.float_value);
    next();
    return e;
  }
  if (t.type == Tok::kLParen) {
    next();
    KVASIR_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(false, true, {}, true));
    KVASIR_RETURN_IF_ERROR(expect(Tok::kRParen));
    return e;
  }
  if (t.type == Tok::kLBracket || t.type == Tok::kLBrace) {
    bool is_list = t.type == Tok::kLBracket;
    Tok close = is_list ? Tok::kRBracket : Tok::kRBrace;
    auto e = mk(is_list ? ExprKind::kList : ExprKind::kDict, line);
    next();
    bool first = true;
    while (cur().type != close) {
      if (!first) KVASIR_RETURN_IF_ERROR(expect(Tok::kComma));
      first = false;
      if (cur().type == close) break;
      KVASIR_ASSIGN_OR_RETURN(ExprPtr x, parse_expression());
      e->items.push_back(std::move(x));
      if (!is_list) {
        KVASIR_RETURN_IF_ERROR(expect(Tok::kColon));
        KVASIR_ASSIGN_OR_RETURN(ExprPtr v, parse_expression());
        e->items.push_back(std::move(v));
      }
    }
    KVASIR_RETURN_IF_ERROR(expect(close));
    KVASIR_RETURN_IF_ERROR(done(*e));
    return e;
  }
  if (t.type == Tok::kEof) return fail("unexpected end of template");
  return fail("unexpected '" + describe(t) + "'");
}

StatusOr<ExprPtr> Parser::parse_tuple(bool simplified, bool with_condexpr, Names extra_end, bool explicit_parens,
                                      bool with_namespace) {
  int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) KVASIR_RETURN_IF_ERROR(expect(Tok::kComma));
    Tok t = cur().type;
    if (t == Tok::kVarEnd || t == Tok::kBlockEnd || t == Tok::kRParen || (extra_end.size() && is_any_name(extra_end))) {
      break;
    }
    if (simplified) {
      KVASIR_ASSIGN_OR_RETURN(ExprPtr x, parse_primary(with_namespace));
      args.push_back(std::move(x));
    } else {
      KVASIR_ASSIGN_OR_RETURN(ExprPtr x, parse_expression(with_condexpr));
      args.push_back(std::move(x));
    }
    if (cur().type == Tok::kComma) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) return fail("Expected an expression, got '" + describe(cur()) + "'");
  }
  auto e = mk(ExprKind::kTuple, line);
  e->items = std::move(args);
  KVASIR_RETURN_IF_ERROR(done(*e));
  return e;
}

StatusOr<ExprPtr> Parser::parse_postfix(ExprPtr node) {
  while (true) {
    Tok t = cur().type;
    if (t == Tok::kDot || t == Tok::kLBracket) {
      KVASIR_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (t == Tok::kLParen) {
      auto e = mk(ExprKind::kCall, cur().line);
      e->a = std::move(node);
      KVASIR_RETURN_IF_ERROR(parse_call_args(*e));
      KVASIR_RETURN_IF_ERROR(done(*e));
      node = std::move(e);
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (cur().type == Tok::kPipe) {
      KVASIR_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
    } else if (is_name("is")) {
      KVASIR_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (cur().type == Tok::kLParen) {
      auto e = mk(ExprKind::kCall, cur().line);
      e->a = std::move(node);
      KVASIR_RETURN_IF_ERROR(parse_call_args(*e));
      KVASIR_RETURN_IF_ERROR(done(*e));
      node = std::move(e);
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::parse_subscript(ExprPtr node) {
  int line = cur().line;
  if (skip_if(Tok::kDot)) {
    const Token& t = cur();
    if (t.type == Tok::kName) {
      auto e = mk(ExprKind::kGetattr, line);
      e->a = std::move(node);
      e->name = t.text;
      next();
      KVASIR_RETURN_IF_ERROR(done(*e));
      return e;
    }
    if (t.type != Tok::kInteger) return fail("expected name or number");
    auto e = mk(ExprKind::kGetitem, line);
    e->a = std::move(node);
    e->b = mk(ExprKind::kConst, line);
    e->b->constant = Value::integer(t.int_value);
    next();
    KVASIR_RETURN_IF_ERROR(done(*e));
    return e;
  }
  next();  // [
  std::vector<ExprPtr> args;
  while (cur().type != Tok::kRBracket) {
    if (!args.empty()) KVASIR_RETURN_IF_ERROR(expect(Tok::kComma));
    KVASIR_ASSIGN_OR_RETURN(ExprPtr x, parse_subscribed());
    args.push_back(std::move(x));
  }
  KVASIR_RETURN_IF_ERROR(expect(Tok::kRBracket));
  auto e = mk(ExprKind::kGetitem, line);
  e->a = std::move(node);
  if (args.size() == 1) {
    e->b = std::move(args[0]);
  } else {
    e->b = mk(ExprKind::kTuple, line);
    e->b->items = std::move(args);
    KVASIR_RETURN_IF_ERROR(done(*e->b));
  }
  KVASIR_RETURN_IF_ERROR(done(*e));
  return e;
}

StatusOr<ExprPtr> Parser::parse_subscribed() {
  auto e = mk(ExprKind::kSlice, cur().line);
  if (!skip_if(Tok::kColon)) {
    KVASIR_ASSIGN_OR_RETURN(ExprPtr x, parse_expression());
    if (cur().type != Tok::kColon) return x;
    next();
    e->a = std::move(x);
  }
  auto stop_here = [&] { Tok t = cur().type; return t == Tok::kRBracket || t == Tok::kComma; };
  if (cur().type != Tok::kColon && !stop_here()) {
    KVASIR_ASSIGN_OR_RETURN(e->b, parse_expression());
  }
  if (skip_if(Tok::kColon) && !stop_here()) {
    KVASIR_ASSIGN_OR_RETURN(e->c, parse_expression());
  }
  KVASIR_RETURN_IF_ERROR(done(*e));
  return e;
}

Status Parser::parse_call_args(Expr& e) {
  int line = cur().line;
  KVASIR_RETURN_IF_ERROR(expect(Tok::kLParen));
  bool require_comma = false;
  while (cur().type != Tok::kRParen) {
    if (require_comma) {
      KVASIR_RETURN_IF_ERROR(expect(Tok::kComma));
      if (cur().type == Tok::kRParen) break;
    }
    if (skip_if(Tok::kMul)) {
      if (e.dyn_args || e.dyn_kwargs) return fail("invalid syntax for function call expression", line);
      KVASIR_ASSIGN_OR_RETURN(e.dyn_args, parse_expression());
    } else if (skip_if(Tok::kPow)) {
      if (e.dyn_kwargs) return fail("invalid syntax for function call expression", line);
      KVASIR_ASSIGN_OR_RETURN(e.dyn_kwargs, parse_expression());
    } else if (cur().type == Tok::kName && look().type == Tok::kAssign) {
      if (e.dyn_kwargs) return fail("invalid syntax for function call expression", line);
      std::string key = cur().text;
      next();
      next();
      KVASIR_ASSIGN_OR_RETURN(ExprPtr v, parse_expression());
      e.kwargs.emplace_back(std::move(key), std::move(v));
    } else {
      if (e.dyn_args || e.dyn_kwargs || !e.kwargs.empty()) {
        return fail("invalid syntax for function call expression", line);
      }
      KVASIR_ASSIGN_OR_RETURN(ExprPtr v, parse_expression());
      e.items.push_back(std::move(v));
    }
    require_comma = true;
  }
  return expect(Tok::kRParen);
}

StatusOr<ExprPtr> Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (cur().type == Tok::kPipe || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    int line = cur().line;
    std::string name;
    KVASIR_RETURN_IF_ERROR(expect_name(&name));
    while (skip_if(Tok::kDot)) {
      std::string part;
      KVASIR_RETURN_IF_ERROR(expect_name(&part));
      name += "." + part;
    }
    auto e = mk(ExprKind::kFilter, line);
    e->a = std::move(node);
    e->name = std::move(name);
    if (cur().type == Tok::kLParen) KVASIR_RETURN_IF_ERROR(parse_call_args(*e));
    KVASIR_RETURN_IF_ERROR(done(*e));
    node = std::move(e);
  }
  return node;
}

StatusOr<ExprPtr> Parser::parse_test(ExprPtr node) {
  int line = cur().line;
  next();  // is
  bool negated = skip_name("not");
  std::string name;
  KVASIR_RETURN_IF_ERROR(expect_name(&name));
  while (skip_if(Tok::kDot)) {
    std::string part;
    KVASIR_RETURN_IF_ERROR(expect_name(&part));
    name += "." + part;
  }
  auto e = mk(ExprKind::kTest, line);
  e->a = std::move(node);
  e->name = std::move(name);
  Tok t = cur().type;
  if (t == Tok::kLParen) {
    KVASIR_RETURN_IF_ERROR(parse_call_args(*e));
  } else if ((t == Tok::kName || t == Tok::kString || t == Tok::kInteger || t == Tok::kFloat ||
              t == Tok::kLBracket || t == Tok::kLBrace) &&
             !is_any_name({"else", "or", "and"})) {
    if (is_name("is")) return fail("You cannot chain multiple tests with is");
    KVASIR_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
    KVASIR_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    e->items.push_back(std::move(arg));
  }
  KVASIR_RETURN_IF_ERROR(done(*e));
  if (!negated) return e;
  auto n = mk(ExprKind::kNot, line);
  n->a = std::move(e);
  KVASIR_RETURN_IF_ERROR(done(*n));
  return n;
}

}  // namespace kvasir::jinja::detail
