// The tool-call scanner both parsers of tool_calls.h share: a state machine fed the output
// text in pieces that turns it into events (content, a call's name, its argument fragments,
// its end), holding back only what may still be markup. parse_tool_calls feeds it the whole
// output at once, ToolCallStreamParser each delta, so both see the same calls wherever the
// deltas split the text. Internal to net/protocol.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "net/protocol/tool_calls.h"

namespace pagedserve::net::tool_calls_detail {

struct ScanEvent {
  enum class Kind {
    kContent,    // text: text outside any call (not yet stripped)
    kCallBegin,  // text: the call's name; its arguments follow
    kArguments,  // text: the next fragment of the call's arguments, whitespace removed
    kCallEnd,    // text: the call's whole source text; well_formed as below
  };
  Kind kind;
  std::string text;
  // kCallEnd: the arguments closed and so did the call's markup. False when the output
  // ended inside the call or the markup after the arguments was wrong.
  bool well_formed = true;
};

// A JSON value's structure, one character at a time: depth of {} and [], strings and their
// escapes; no other validation (parse_tool_calls checks the arguments with a JSON parser).
struct JsonDepth {
  int depth = 0;
  bool in_string = false;
  bool escape = false;
  // Feeds c; appends it to `out` (if given) unless it is whitespace outside a string.
  // True when c closed the outermost container.
  bool step(char c, std::string* out);
};

enum class Match { kComplete, kIncomplete, kInvalid };

struct HeaderMatch {
  Match match = Match::kIncomplete;
  std::string name;
  size_t end = 0;  // kComplete: the position of the arguments' opening '{'
};

// `{"name": "NAME", "arguments": ` (or "parameters" when allowed) at the start of `text`,
// whitespace allowed around every token, followed by the '{' of the arguments.
HeaderMatch match_call_header(std::string_view text, bool allow_parameters);

class Scanner {
 public:
  explicit Scanner(ToolCallFormat format);

  void feed(std::string_view text, std::vector<ScanEvent>& events);
  void finish(std::vector<ScanEvent>& events);

 private:
  enum class State {
    kText,            // content; looking for <tool_call> or [TOOL_CALLS]
    kLlamaStart,      // Llama: the output must open with <|python_tag|> or '{'
    kHeader,          // a call object's {"name": ..., "arguments": up to its '{'
    kArguments,       // inside the arguments object
    kObjectTail,      // after the arguments, up to the call object's '}'
    kHermesClose,     // whitespace, then </tool_call>
    kMistralOpen,     // after [TOOL_CALLS]: '['
    kMistralNext,     // after a call in the list: ',' or ']'
    kLlamaNext,       // after a call: ';' and whitespace, then '{' or <|python_tag|>
    kMalformedBlock,  // Hermes: a <tool_call> block that is no call: content to </tool_call>
    kRestContent,     // Llama: all the rest is content
  };

  bool step();  // one transition; false when it needs more text
  bool step_text();
  bool step_llama_start();
  bool step_header();
  bool step_arguments();
  bool step_object_tail();
  bool step_hermes_close();
  bool step_mistral_open();
  bool step_mistral_next();
  bool step_llama_next();
  bool step_malformed_block();
  void flush_at_end();

  // Emits buf_ as content up to the last `keep` bytes that may begin `tag`.
  void emit_content_before_partial(std::string_view tag);
  void emit_content(std::string_view text);
  void fail();  // the markup read since the last call is no call: it becomes content
  void end_call(bool well_formed);
  std::string take(size_t n);  // removes and returns the first n bytes of buf_
  std::string take_whitespace();

  ToolCallFormat format_;
  State state_;
  std::string buf_;       // text fed and not yet consumed
  std::string pending_;   // markup consumed since the last call: content if no call follows
  std::string call_raw_;  // the current call's source text
  JsonDepth json_;
  bool at_end_ = false;
  std::vector<ScanEvent>* events_ = nullptr;
};

}  // namespace pagedserve::net::tool_calls_detail
