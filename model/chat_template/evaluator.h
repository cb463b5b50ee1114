// Renderer: walks a parsed Program against one request's context and produces the text.
// One Renderer per render() call, used on that call's thread only; it holds the variable
// scopes (template level, one per for-loop iteration, one per macro call) and nothing that
// outlives the call, so a ChatTemplate can render from many threads at once.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/chat_template/ast.h"

namespace pagedserve::model::chat {

class Renderer {
 public:
  // `context` is a dict: the request's variables (messages, add_generation_prompt, ...).
  // `now`: the local time strftime_now() formats; nullopt reads the system clock.
  explicit Renderer(Value context, std::optional<std::tm> now = std::nullopt);

  std::string render(const Program& program);

  Value eval(const Expr& e);
  // Runs a {% macro %} body with its parameters bound; returns what it rendered.
  Value call_macro(const Stmt& macro, const CallArgs& args);

  const std::optional<std::tm>& now() const { return now_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    // A macro call's frame: lookups skip from it straight to the template level, since a
    // macro does not see its caller's loop variables.
    bool isolated = false;
  };

  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  Flow exec_stmt_inner(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s);

  Value eval_node(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e, const Value* block_input);
  CallArgs eval_args(const Expr& e, size_t first_arg);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void bind_targets(const std::vector<std::string>& targets, const Value& value);

  Value context_;
  std::vector<Frame> frames_;
  int macro_depth_ = 0;
  std::optional<std::tm> now_;
};

}  // namespace pagedserve::model::chat
