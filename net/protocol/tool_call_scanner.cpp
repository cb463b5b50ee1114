// The tool-call scanner's state machine (see tool_call_scanner.h).
#include "net/protocol/tool_call_scanner.h"

#include <algorithm>

namespace pagedserve::net::tool_calls_detail {

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// True when `text` is shorter than `tag` and could still grow into it.
bool is_proper_prefix(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.starts_with(text);
}

// Reads the JSON tokens of a call header from the start of a text that may still grow.
class HeaderCursor {
 public:
  explicit HeaderCursor(std::string_view text) : text_(text) {}

  void skip_space() {
    while (pos_ < text_.size() && is_json_space(text_[pos_])) ++pos_;
  }
  // One of `a` or `b` (b may be empty) next, after whitespace.
  Match literal(std::string_view a, std::string_view b = {}) {
    skip_space();
    const std::string_view rest = text_.substr(pos_);
    for (std::string_view lit : {a, b}) {
      if (lit.empty()) continue;
      if (rest.starts_with(lit)) {
        pos_ += lit.size();
        return Match::kComplete;
      }
    }
    return is_proper_prefix(rest, a) || (!b.empty() && is_proper_prefix(rest, b))
               ? Match::kIncomplete
               : Match::kInvalid;
  }
  // A JSON string next, after whitespace, decoded into `out`.
  Match string(std::string& out) {
    skip_space();
    if (pos_ >= text_.size()) return Match::kIncomplete;
    if (text_[pos_] != '"') return Match::kInvalid;
    for (size_t i = pos_ + 1; i < text_.size(); ++i) {
      if (text_[i] == '\\') {
        ++i;
      } else if (text_[i] == '"') {
        const nlohmann::json decoded =
            nlohmann::json::parse(text_.substr(pos_, i + 1 - pos_), nullptr, false);
        if (!decoded.is_string()) return Match::kInvalid;
        out = decoded.get<std::string>();
        pos_ = i + 1;
        return Match::kComplete;
      }
    }
    return Match::kIncomplete;
  }
  size_t pos() const { return pos_; }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

bool JsonDepth::step(char c, std::string* out) {
  if (in_string) {
    if (out) out->push_back(c);
    if (escape) {
      escape = false;
    } else if (c == '\\') {
      escape = true;
    } else if (c == '"') {
      in_string = false;
    }
    return false;
  }
  if (is_json_space(c)) return false;
  if (out) out->push_back(c);
  if (c == '"') in_string = true;
  if (c == '{' || c == '[') ++depth;
  if (c == '}' || c == ']') return --depth == 0;
  return false;
}

HeaderMatch match_call_header(std::string_view text, bool allow_parameters) {
  HeaderCursor cursor(text);
  HeaderMatch result;
  const auto step = [&](Match m) {
    if (m != Match::kComplete) result.match = m;
    return m == Match::kComplete;
  };
  if (!step(cursor.literal("{")) || !step(cursor.literal("\"name\"")) ||
      !step(cursor.literal(":")) || !step(cursor.string(result.name)) ||
      !step(cursor.literal(",")) ||
      !step(cursor.literal("\"arguments\"", allow_parameters ? "\"parameters\"" : "")) ||
      !step(cursor.literal(":"))) {
    return result;
  }
  cursor.skip_space();
  if (cursor.at_end()) return result;  // kIncomplete
  if (cursor.peek() != '{' || result.name.empty()) {
    result.match = Match::kInvalid;
    return result;
  }
  result.match = Match::kComplete;
  result.end = cursor.pos();
  return result;
}

Scanner::Scanner(ToolCallFormat format)
    : format_(format),
      state_(format == ToolCallFormat::kLlama3Json ? State::kLlamaStart : State::kText) {}

void Scanner::feed(std::string_view text, std::vector<ScanEvent>& events) {
  events_ = &events;
  buf_.append(text);
  while (step()) {
  }
  events_ = nullptr;
}

void Scanner::finish(std::vector<ScanEvent>& events) {
  events_ = &events;
  at_end_ = true;
  while (step()) {
  }
  flush_at_end();
  events_ = nullptr;
}

bool Scanner::step() {
  switch (state_) {
    case State::kText:
      return step_text();
    case State::kLlamaStart:
      return step_llama_start();
    case State::kHeader:
      return step_header();
    case State::kArguments:
      return step_arguments();
    case State::kObjectTail:
      return step_object_tail();
    case State::kHermesClose:
      return step_hermes_close();
    case State::kMistralOpen:
      return step_mistral_open();
    case State::kMistralNext:
      return step_mistral_next();
    case State::kLlamaNext:
      return step_llama_next();
    case State::kMalformedBlock:
      return step_malformed_block();
    case State::kRestContent:
      emit_content(take(buf_.size()));
      return false;
  }
  return false;
}

bool Scanner::step_text() {
  const std::string_view tag = format_ == ToolCallFormat::kHermes ? kHermesOpen : kMistralTag;
  const size_t at = buf_.find(tag);
  if (at == std::string::npos) {
    emit_content_before_partial(tag);
    return false;
  }
  emit_content(take(at));
  pending_ = take(tag.size());
  state_ = format_ == ToolCallFormat::kHermes ? State::kHeader : State::kMistralOpen;
  return true;
}

bool Scanner::step_llama_start() {
  emit_content(take_whitespace());  // leading whitespace: stripped from content anyway
  if (buf_.empty()) return false;
  if (buf_.starts_with(kPythonTag)) {
    pending_ = take(kPythonTag.size());
    state_ = State::kHeader;
  } else if (buf_[0] == '{') {
    state_ = State::kHeader;
  } else if (is_proper_prefix(buf_, kPythonTag) && !at_end_) {
    return false;
  } else {
    state_ = State::kRestContent;
  }
  return true;
}

bool Scanner::step_header() {
  HeaderMatch header =
      match_call_header(buf_, /*allow_parameters=*/format_ == ToolCallFormat::kLlama3Json);
  if (header.match == Match::kIncomplete) return false;  // at the end: flush_at_end fails it
  if (header.match == Match::kInvalid) {
    fail();
    return true;
  }
  call_raw_ = std::move(pending_) + take(header.end);
  pending_.clear();
  events_->push_back({ScanEvent::Kind::kCallBegin, std::move(header.name)});
  json_ = JsonDepth{};
  state_ = State::kArguments;
  return true;
}

bool Scanner::step_arguments() {
  std::string fragment;
  size_t used = 0;
  bool closed = false;
  while (used < buf_.size() && !closed) closed = json_.step(buf_[used++], &fragment);
  call_raw_ += take(used);
  if (!fragment.empty()) events_->push_back({ScanEvent::Kind::kArguments, std::move(fragment)});
  if (!closed) return false;
  json_ = JsonDepth{.depth = 1};  // inside the call object, after its arguments
  state_ = State::kObjectTail;
  return true;
}

bool Scanner::step_object_tail() {
  size_t used = 0;
  bool closed = false;
  while (used < buf_.size() && !closed) closed = json_.step(buf_[used++], nullptr);
  call_raw_ += take(used);
  if (!closed) return false;
  if (format_ == ToolCallFormat::kHermes) {
    state_ = State::kHermesClose;
  } else {
    end_call(/*well_formed=*/true);
    state_ = format_ == ToolCallFormat::kMistral ? State::kMistralNext : State::kLlamaNext;
  }
  return true;
}

bool Scanner::step_hermes_close() {
  call_raw_ += take_whitespace();
  if (buf_.empty() || is_proper_prefix(buf_, kHermesClose)) return false;
  if (buf_.starts_with(kHermesClose)) {
    call_raw_ += take(kHermesClose.size());
    end_call(/*well_formed=*/true);
    state_ = State::kText;
  } else {
    // Something other than </tool_call> after the call object: the call was streamed
    // already; the rest of the block is content.
    end_call(/*well_formed=*/false);
    state_ = State::kMalformedBlock;
  }
  return true;
}

bool Scanner::step_mistral_open() {
  pending_ += take_whitespace();
  if (buf_.empty()) return false;
  if (buf_[0] == '[') {
    pending_ += take(1);
    state_ = State::kHeader;
  } else {
    fail();
  }
  return true;
}

bool Scanner::step_mistral_next() {
  pending_ += take_whitespace();
  if (buf_.empty()) return false;
  if (buf_[0] == ',') {
    pending_ += take(1);
    state_ = State::kHeader;
  } else if (buf_[0] == ']') {
    take(1);
    pending_.clear();  // the list's markup and its whitespace
    state_ = State::kText;
  } else {
    fail();
  }
  return true;
}

bool Scanner::step_llama_next() {
  while (!buf_.empty() && (is_json_space(buf_[0]) || buf_[0] == ';')) pending_ += take(1);
  if (buf_.empty()) return false;
  if (buf_.starts_with(kPythonTag)) {
    pending_ += take(kPythonTag.size());
    state_ = State::kHeader;
  } else if (buf_[0] == '{') {
    state_ = State::kHeader;
  } else if (is_proper_prefix(buf_, kPythonTag) && !at_end_) {
    return false;
  } else {
    fail();
  }
  return true;
}

bool Scanner::step_malformed_block() {
  const size_t at = buf_.find(kHermesClose);
  if (at == std::string::npos) {
    emit_content_before_partial(kHermesClose);
    return false;
  }
  emit_content(take(at + kHermesClose.size()));
  state_ = State::kText;
  return true;
}

void Scanner::flush_at_end() {
  switch (state_) {
    case State::kArguments:
    case State::kObjectTail:
      end_call(/*well_formed=*/false);  // cut inside the call
      break;
    case State::kHermesClose:
      // The call object closed; a missing or cut </tool_call> is forgiven (vLLM too).
      call_raw_ += take(buf_.size());
      end_call(/*well_formed=*/true);
      break;
    case State::kMistralNext:
    case State::kLlamaNext:
      pending_.clear();  // separators and whitespace after the last call
      break;
    default:
      break;
  }
  emit_content(pending_);
  pending_.clear();
  emit_content(take(buf_.size()));
}

void Scanner::emit_content_before_partial(std::string_view tag) {
  size_t keep = 0;
  if (!at_end_) {
    for (size_t n = std::min(buf_.size(), tag.size() - 1); n > 0; --n) {
      if (tag.starts_with(std::string_view(buf_).substr(buf_.size() - n))) {
        keep = n;
        break;
      }
    }
  }
  emit_content(take(buf_.size() - keep));
}

void Scanner::emit_content(std::string_view text) {
  if (text.empty()) return;
  if (!events_->empty() && events_->back().kind == ScanEvent::Kind::kContent) {
    events_->back().text.append(text);
  } else {
    events_->push_back({ScanEvent::Kind::kContent, std::string(text)});
  }
}

void Scanner::fail() {
  emit_content(pending_);
  pending_.clear();
  switch (format_) {
    case ToolCallFormat::kHermes:
      state_ = State::kMalformedBlock;
      break;
    case ToolCallFormat::kLlama3Json:
      state_ = State::kRestContent;
      break;
    case ToolCallFormat::kMistral:
      state_ = State::kText;
      break;
  }
}

void Scanner::end_call(bool well_formed) {
  events_->push_back({ScanEvent::Kind::kCallEnd, std::move(call_raw_), well_formed});
  call_raw_.clear();
}

std::string Scanner::take(size_t n) {
  std::string head = buf_.substr(0, n);
  buf_.erase(0, n);
  return head;
}

std::string Scanner::take_whitespace() {
  size_t n = 0;
  while (n < buf_.size() && is_json_space(buf_[n])) ++n;
  return take(n);
}

}  // namespace pagedserve::net::tool_calls_detail
