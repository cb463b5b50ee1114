// Fuzzes the chat-template engine: the input is a template, a NUL, then the render context as
// JSON ({"messages": [...], "add_generation_prompt": ..., "tools": ...}). A template of fewer
// than two bytes picks one of the real templates in ../shared/chat-templates instead, so the
// fuzzer also explores random message lists against the templates models ship; a missing or
// unparsable context renders a fixed conversation.
//
// Checks: ChatTemplateError is the only exception, from parse and from render (chat_template.h
// documents it for parse errors, run-time errors, limits and raise_exception); a parsed
// template renders the same text twice (render is pure, with the clock pinned).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string_view>

#include "model/chat_template/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

using namespace pagedserve;

namespace {

const std::vector<model::ChatTemplate>& real_templates() {
  static const std::vector<model::ChatTemplate> templates = [] {
    // Sorted by name, so a byte picks the same template on every machine.
    std::vector<std::filesystem::path> paths;
    for (const auto& entry :
         std::filesystem::directory_iterator(fuzz::shared_dir() / "chat-templates")) {
      if (entry.path().extension() == ".jinja") paths.push_back(entry.path());
    }
    std::sort(paths.begin(), paths.end());
    std::vector<model::ChatTemplate> out;
    for (const std::filesystem::path& path : paths) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      out.push_back(model::ChatTemplate::parse(text.str()));
    }
    out.push_back(model::ChatTemplate::parse(model::kDefaultChatTemplate));
    return out;
  }();
  return templates;
}

nlohmann::ordered_json default_context() {
  return nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What is 2+2?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "4"},
      {"role": "assistant", "content": "4"},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  real_templates();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  nlohmann::ordered_json context = nlohmann::ordered_json::parse(
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1), nullptr, false);
  if (!context.is_object()) context = default_context();

  std::optional<model::ChatTemplate> parsed;
  try {
    if (source.size() < 2) {
      const auto& templates = real_templates();
      parsed = templates[(source.empty() ? 0 : static_cast<uint8_t>(source[0])) % templates.size()];
    } else {
      parsed = model::ChatTemplate::parse(source);
    }
  } catch (const model::ChatTemplateError& e) {
    FUZZ_CHECK(e.kind() == model::ChatTemplateError::Kind::kParse, "parse threw a non-parse error");
    return 0;
  }
  model::RenderOptions options;
  options.now = model::parse_local_time("2026-01-02T03:04:05");
  std::string first;
  try {
    first = parsed->render(context, options);
  } catch (const model::ChatTemplateError&) {
    return 0;
  }
  FUZZ_CHECK(parsed->render(context, options) == first, "two renders differ");
  return 0;
}
