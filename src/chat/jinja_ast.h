// Jinja syntax tree: expressions and statements as the parser builds them, mirroring jinja2's
// nodes closely enough that evaluation order and scoping match. Plain data; the parser bounds the
// tree's depth so that walking and destroying it never recurses deeply. No evaluation here.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace kvasir::jinja {

enum class ExprKind : uint8_t {
  kConst, kName, kGetattr, kGetitem, kSlice, kTuple, kList, kDict,
  kNeg, kPos, kNot, kBinary, kAnd, kOr, kConcat, kCompare, kCondExpr,
  kCall, kFilter, kTest, kNSRef,
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLtEq, kGt, kGtEq, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  int depth = 1;
  Value constant;    // kConst
  std::string name;  // kName, kGetattr attribute, kFilter/kTest name, kNSRef: namespace variable
  std::string attr;  // kNSRef attribute
  BinOp op = BinOp::kAdd;
  // Operands: Getattr/Neg/Pos/Not/Call/Filter/Test: a; Getitem: a[b]; Slice: start a, stop b, step c
  // (each may be null); Binary/And/Or: a, b; CondExpr: b if a else c (c may be null).
  // A kFilter whose input is null takes its input from a filter block or `set` block.
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;  // Tuple/List/Concat items, Dict keys and values alternating,
                               // Call/Filter/Test positional args, Compare operands after `a`
  std::vector<CmpOp> cmp_ops;  // kCompare, one per item
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;  // *args, **kwargs in calls
};

enum class StmtKind : uint8_t {
  kData, kPrint, kIf, kFor, kAssign, kAssignBlock, kMacro, kCallBlock, kFilterBlock,
  kBreak, kContinue, kWith, kScope,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;  // kData text, kMacro name
  // kPrint: expr. kIf: test, body, else_body (an elif is an If inside else_body).
  // kFor: target, expr (iterable), test (loop filter, may be null), body, else_body.
  // kAssign: target = expr. kAssignBlock: target, test (filter chain, may be null), body.
  // kCallBlock: expr (the call), params/defaults, body. kFilterBlock: test (filter chain), body.
  // kWith: targets = values, body. kScope: body (HF's {% generation %} block).
  ExprPtr target, expr, test;
  Body body, else_body;
  std::vector<std::string> params;  // kMacro, kCallBlock
  std::vector<ExprPtr> defaults;    // defaults for the last params
  std::vector<ExprPtr> targets, values;
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;  // kMacro
};

struct Program {
  Body body;
};

}  // namespace kvasir::jinja
