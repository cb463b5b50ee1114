// `pagedserve chat-template render`: renders a chat template with a JSON context, as the
// server would render a request's prompt, to check a model's template against Hugging Face
// transformers (../shared/chat-templates/README.md describes the goldens it is checked with).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/chat_template/chat_template.h"
#include "tools/cli_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kChatTemplateHelp =
    "usage: pagedserve chat-template render --template FILE.jinja --input CONTEXT.json\n"
    "                                      [--now YYYY-MM-DDTHH:MM:SS]\n"
    "  --template F  the Jinja chat template (a model's chat_template, as text)\n"
    "  --input F     a JSON object whose keys become the template's variables, in their order:\n"
    "                {\"messages\": [...], \"tools\": [...] or null, \"add_generation_prompt\":\n"
    "                true, \"bos_token\": \"...\", ...}; '-' reads standard input\n"
    "  --now T       the local time strftime_now() formats (default: the system clock)\n"
    "Prints the rendered text exactly (no newline added) and exits 0; a template error\n"
    "(including the template's raise_exception) goes to stderr with exit code 1.\n";

std::string read_file_text(const std::string& path, const char* flag) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    throw std::runtime_error(std::string(flag) + ": cannot read '" + path + "'");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::ordered_json read_context(const std::string& path) {
  const std::string text = read_file_text(path, "--input");
  nlohmann::ordered_json context;
  try {
    context = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("--input: '" + path + "' is not valid JSON: " + e.what());
  }
  if (!context.is_object()) {
    throw std::runtime_error("--input: '" + path + "' must hold a JSON object, not " +
                             std::string(context.type_name()));
  }
  return context;
}

int run_render(const std::vector<std::string>& args) {
  const CliFlags flags(args, {"template", "input", "now"}, {"help"});
  if (flags.has("help")) {
    std::cout << kChatTemplateHelp;
    return 0;
  }
  const std::string template_path = flags.require("template");
  const std::string input_path = flags.require("input");
  model::RenderOptions options;
  if (flags.has("now")) {
    options.now = model::parse_local_time(flags.require("now"));
    if (!options.now) {
      throw UsageError("--now: '" + flags.require("now") +
                       "' is not a local time like 2026-03-05T09:07:02");
    }
  }
  const std::string source = read_file_text(template_path, "--template");
  const nlohmann::ordered_json context = read_context(input_path);
  std::string text;
  try {
    text = model::ChatTemplate::parse(source).render(context, options);
  } catch (const model::ChatTemplateError& e) {
    // The template's own raise_exception message is reported verbatim, after the prefix.
    std::cerr << "pagedserve chat-template render: error: " << e.what() << "\n";
    return 1;
  }
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
  return 0;
}

}  // namespace

int run_chat_template(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kChatTemplateHelp;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "render") return run_render({args.begin() + 1, args.end()});
  throw UsageError("unknown chat-template command '" + args[0] + "' (expected 'render')\n" +
                   kChatTemplateHelp);
}

}  // namespace pagedserve::tools
