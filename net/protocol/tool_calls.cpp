// Tool-call formats, the complete-output parser and the stream parser (see tool_calls.h);
// both parsers run the scanner of tool_call_scanner.h and differ in what they do with its
// events.
#include "net/protocol/tool_calls.h"

#include <cassert>
#include <random>

#include "net/protocol/tool_call_scanner.h"

namespace pagedserve::net {

using tool_calls_detail::ScanEvent;
using tool_calls_detail::Scanner;

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string strip(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  return std::string(text.substr(begin, end - begin));
}

uint64_t seed_or_random(std::optional<uint64_t> seed) {
  if (seed) return *seed;
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

std::string make_call_id(ToolCallFormat format, std::mt19937_64& rng) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[pick(rng)];
  return id;
}

// The stream's content with leading and trailing whitespace held back, so that what it
// lets through concatenates to strip(all content), as parse_tool_calls returns it.
class ContentTrimmer {
 public:
  std::string take(std::string_view text) {
    std::string out;
    for (char c : text) {
      if (is_space(c)) {
        if (started_) held_ += c;
        continue;
      }
      started_ = true;
      out += held_;
      held_.clear();
      out += c;
    }
    return out;
  }

 private:
  bool started_ = false;
  std::string held_;
};

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_template(std::string_view source) {
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallFormat::kMistral;
  if (source.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::kHermes;
  // Llama 3.1-3.3 print `{"name": function name, "parameters": ...}` and write calls back
  // as '"parameters": '; 3.1 also names <|python_tag|> for its built-in tools.
  if (source.find("<|python_tag|>") != std::string_view::npos ||
      source.find("\"parameters\": ") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return std::nullopt;
}

std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return std::nullopt;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "";
}

nlohmann::ordered_json tool_call_json(const ToolCall& call) {
  nlohmann::ordered_json function = nlohmann::ordered_json::object();
  function["name"] = call.name;
  function["arguments"] = call.arguments;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["id"] = call.id;
  out["type"] = "function";
  out["function"] = std::move(function);
  return out;
}

ParsedToolCalls parse_tool_calls(std::string_view output, ToolCallFormat format,
                                 std::optional<uint64_t> id_seed) {
  std::vector<ScanEvent> events;
  Scanner scanner(format);
  scanner.feed(output, events);
  scanner.finish(events);

  std::mt19937_64 rng(seed_or_random(id_seed));
  ParsedToolCalls parsed;
  std::string content;
  ToolCall call;
  for (ScanEvent& event : events) {
    switch (event.kind) {
      case ScanEvent::Kind::kContent:
        content += event.text;
        break;
      case ScanEvent::Kind::kCallBegin:
        call = ToolCall{make_call_id(format, rng), std::move(event.text), ""};
        break;
      case ScanEvent::Kind::kArguments:
        call.arguments += event.text;
        break;
      case ScanEvent::Kind::kCallEnd:
        // Only a call whose arguments are a JSON object and whose markup closed counts;
        // otherwise its text stays where it was, as content.
        if (event.well_formed && nlohmann::json::accept(call.arguments)) {
          parsed.calls.push_back(std::move(call));
        } else {
          content += event.text;
        }
        call = ToolCall{};
        break;
    }
  }
  parsed.content = strip(content);
  return parsed;
}

// ---- ToolCallStreamParser

struct ToolCallStreamParser::State {
  State(ToolCallFormat f, uint64_t seed) : format(f), scanner(f), rng(seed) {}

  ToolCallStreamDelta translate(std::vector<ScanEvent>& events);

  ToolCallFormat format;
  Scanner scanner;
  std::mt19937_64 rng;
  ContentTrimmer trimmer;
  size_t num_calls = 0;
  bool finished = false;
};

ToolCallStreamDelta ToolCallStreamParser::State::translate(std::vector<ScanEvent>& events) {
  ToolCallStreamDelta delta;
  for (ScanEvent& event : events) {
    switch (event.kind) {
      case ScanEvent::Kind::kContent:
        delta.content += trimmer.take(event.text);
        break;
      case ScanEvent::Kind::kCallBegin:
        delta.tool_calls.push_back(
            {{"index", num_calls++},
             {"id", make_call_id(format, rng)},
             {"type", "function"},
             {"function", {{"name", std::move(event.text)}, {"arguments", ""}}}});
        break;
      case ScanEvent::Kind::kArguments: {
        // Fragments of one call within one delta go out as one entry.
        const size_t index = num_calls - 1;
        nlohmann::ordered_json* last =
            delta.tool_calls.empty() ? nullptr : &delta.tool_calls.back();
        if (last && (*last)["index"] == index && !last->contains("id")) {
          (*last)["function"]["arguments"] =
              (*last)["function"]["arguments"].get<std::string>() + event.text;
        } else {
          delta.tool_calls.push_back(
              {{"index", index}, {"function", {{"arguments", std::move(event.text)}}}});
        }
        break;
      }
      case ScanEvent::Kind::kCallEnd:
        break;
    }
  }
  return delta;
}

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format, std::optional<uint64_t> id_seed)
    : state_(std::make_unique<State>(format, seed_or_random(id_seed))) {}
ToolCallStreamParser::~ToolCallStreamParser() = default;
ToolCallStreamParser::ToolCallStreamParser(ToolCallStreamParser&&) noexcept = default;
ToolCallStreamParser& ToolCallStreamParser::operator=(ToolCallStreamParser&&) noexcept = default;

ToolCallStreamDelta ToolCallStreamParser::feed(std::string_view text) {
  assert(!state_->finished && "feed() after finish()");
  std::vector<ScanEvent> events;
  state_->scanner.feed(text, events);
  return state_->translate(events);
}

ToolCallStreamDelta ToolCallStreamParser::finish() {
  std::vector<ScanEvent> events;
  state_->scanner.finish(events);
  state_->finished = true;
  return state_->translate(events);
}

size_t ToolCallStreamParser::num_calls() const { return state_->num_calls; }

}  // namespace pagedserve::net
