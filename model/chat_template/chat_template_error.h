// ChatTemplateError: the one exception type the chat-template renderer throws, for parse
// errors, runtime errors and the template's own raise_exception(). Separate from
// chat_template.h so the lexer, parser and evaluator can throw it without the public API.
#pragma once

#include <stdexcept>
#include <string>

namespace pagedserve::model {

class ChatTemplateError : public std::runtime_error {
 public:
  enum class Kind {
    kParse,   // the template text is malformed or uses an unsupported construct
    kRender,  // evaluation failed (type error, undefined call, limits exceeded)
    kRaised,  // the template called raise_exception(msg); what() is exactly msg
  };
  ChatTemplateError(Kind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }
  // True when the template itself rejected the input (e.g. roles not alternating): the
  // server should answer 400 with what(), not 500.
  bool raised_by_template() const { return kind_ == Kind::kRaised; }

 private:
  Kind kind_;
};

}  // namespace pagedserve::model
