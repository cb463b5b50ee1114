// Chat templates: renders an OpenAI-style `messages` list into the prompt text a model was
// trained on, by interpreting the Jinja template shipped with the model (the subset of
// Jinja2 that Hugging Face chat templates use, with transformers' settings: trim_blocks and
// lstrip_blocks on, raise_exception and strftime_now available). Pure: no I/O except
// load_chat_template. Parse once, render per request; a ChatTemplate is immutable, cheap to
// copy, and render() is safe to call from many threads at once.
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (-, +); if/elif/else, for/else (with
// `if` filter, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/
// cycle, break/continue), set (names, tuples, namespace attributes, set blocks), macro,
// filter blocks, raw, {% generation %}; literals, arithmetic, comparisons, and/or/not, in,
// ~, ternaries, attribute/index/slice access; the filters and tests in filters.cpp and the
// str/dict methods in methods.cpp. Everything else (call blocks, include/import/extends,
// recursive loops, printf-style `%` formatting, ...) is a ChatTemplateError at parse time
// naming the construct.
#pragma once

#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/chat_template/chat_template_error.h"

namespace pagedserve::model {

namespace chat {
struct Program;
}

struct RenderOptions {
  // The local wall-clock time strftime_now() formats (all std::tm fields, wday and yday
  // included, as parse_local_time fills them); nullopt reads the system clock. Pinned by
  // tests and `pagedserve chat-template render --now` for reproducible renders.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // Throws ChatTemplateError (kParse) naming line:column and the offending construct.
  static ChatTemplate parse(std::string_view source);

  // `context` is a JSON object: {"messages": [...], "add_generation_prompt": bool,
  // "bos_token": "...", "eos_token": "...", "tools": [...], ...}; every key becomes a
  // template variable. Throws ChatTemplateError: kRaised for the template's own
  // raise_exception(msg) (what() == msg), kRender for run-time errors. Keys of objects are
  // seen in nlohmann::json's (sorted) order; pass an ordered_json to keep the request's
  // order, which matters for templates that print dicts with tojson or items().
  std::string render(const nlohmann::json& context) const;
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options) const;

  const std::string& source() const { return *source_; }

 private:
  ChatTemplate() = default;  // only parse() makes one, so a ChatTemplate always has a program

  std::shared_ptr<const chat::Program> program_;
  std::shared_ptr<const std::string> source_;
};

// "YYYY-MM-DDTHH:MM:SS" (ISO 8601 local time, no zone; a space may replace the 'T') as a
// std::tm with its weekday and day of the year; nullopt when the text is not such a time.
std::optional<std::tm> parse_local_time(std::string_view iso);

// The model's chat template: a GGUF model's tokenizer.chat_template, or for a Hugging Face
// folder `chat_template.jinja` if present, else
// tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} from
// which "default" is taken). nullopt when the model ships none. Throws ChatTemplateError
// when tokenizer_config.json exists but is not valid JSON.
std::optional<std::string> load_chat_template(const std::filesystem::path& model_dir);

// For models that ship no template: ChatML, as Qwen and SmolLM use it:
//   <|im_start|>{role}\n{content}<|im_end|>\n ... then "<|im_start|>assistant\n" when
//   add_generation_prompt. `content` may be a string or a list of {"type": "text", "text"}
//   parts (other part types are skipped).
inline constexpr std::string_view kDefaultChatTemplate =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
    "{%- if message['content'] is string -%}\n"
    "{{- message['content'] -}}\n"
    "{%- elif message['content'] is sequence -%}\n"
    "{%- for part in message['content'] if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";

}  // namespace pagedserve::model
