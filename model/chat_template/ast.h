// AST of a parsed chat template: expression and statement nodes. One tagged struct per node
// family (not a class hierarchy) keeps the evaluator a pair of switch statements. The tree
// is immutable after parsing and shared by every render of the template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/chat_template/lexer.h"
#include "model/chat_template/value.h"

namespace pagedserve::model::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children[0][a:b:c]; children[1..3] may be null
  kCall,       // children[0](args, kwargs)
  kFilter,     // children[0] | name(args, kwargs)
  kTest,       // children[0] is [not] name(args); negated in `negated`
  kNot,        // not children[0]
  kNegate,     // -children[0]
  kPlus,       // +children[0]
  kBinary,     // children[0] op children[1]; op in name: + - * / // % ** ~
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ... (chained)
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kCondition,  // children[0] if children[1] else children[2] (children[2] may be null)
  kList,       // [children...] and tuples
  kDict,       // {keys[i]: children[i]}
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value literal;                  // kLiteral
  std::string name;               // kName, kGetAttr, kFilter, kTest, kBinary
  std::vector<ExprPtr> children;  // operands; for kCall/kFilter/kTest the object comes first
  std::vector<std::pair<std::string, ExprPtr>> keywords;  // kCall, kFilter, kTest
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  std::vector<ExprPtr> keys;     // kDict
  bool negated = false;          // kTest
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (condition, body); else_body
  kFor,       // for targets in expr [if condition] body [else else_body]
  kSet,       // set targets = expr, or set targets[0].attr = expr
  kSetBlock,  // set targets[0] %} body {% endset  (body rendered to a string)
  kMacro,     // macro name(params=defaults) body
  kBreak,
  kContinue,
  kFilterBlock,  // filter name(args) body: body rendered, then the filter (expr) applied
  kScope,        // a block rendered transparently ({% generation %})
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;                                // kText; kMacro: the macro name
  ExprPtr expr;                                    // kOutput, kSet, kFor (iterable), kFilterBlock
  ExprPtr condition;                               // kFor: optional `if` filter
  std::vector<std::string> targets;                // kFor, kSet, kSetBlock loop / assignment names
  std::string attr;                                // kSet: `set ns.attr = ...` when non-empty
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;                   // kIf, kFor
  std::vector<std::string> params;  // kMacro
  std::vector<ExprPtr> defaults;    // kMacro: one per param, null when required
};

// A parsed template: owns the tree.
struct Program {
  Body body;
};

}  // namespace pagedserve::model::chat
