// `pagedserve chat-template render` as a user runs it: one golden of ../shared/chat-templates
// (rendered with --now, compared byte for byte), one raise_exception golden (exit 1, the
// template's message on stderr), a Jinja run-time error, and bad flags and paths.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_paths.h"
#include "tests/tools/run_pagedserve.h"

namespace {

using nlohmann::ordered_json;
using pagedserve::testing::CommandResult;
using pagedserve::testing::run_pagedserve;
using pagedserve::testing::shared_dir;

std::filesystem::path templates_dir() { return shared_dir() / "chat-templates"; }

ordered_json find_golden(const std::string& name, const std::string& case_name) {
  std::ifstream in(templates_dir() / "goldens.jsonl");
  for (std::string line; std::getline(in, line);) {
    ordered_json golden = ordered_json::parse(line);
    if (golden["template"] == name && golden["case"] == case_name) return golden;
  }
  ADD_FAILURE() << "no golden " << name << " / " << case_name;
  return ordered_json::object();
}

// Writes the README's context for `golden` to a file named per process and test, and
// returns the flags to render it.
std::string render_flags(const ordered_json& golden, const std::string& tag) {
  ordered_json context = ordered_json::object();
  context["messages"] = golden["messages"];
  context["tools"] = golden["tools"];
  context["documents"] = golden["documents"];
  for (const auto& [key, value] : golden["kwargs"].items()) context[key] = value;
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("chat_template_cli_" + std::to_string(getpid()) + "_" + tag + ".json");
  std::ofstream(path) << context.dump();
  const std::filesystem::path jinja =
      templates_dir() / (golden["template"].get<std::string>() + ".jinja");
  return "chat-template render --template '" + jinja.string() + "' --input '" + path.string() +
         "' --now " + golden["now"].get<std::string>();
}

TEST(ChatTemplateCli, RendersAGoldenByteForByte) {
  const ordered_json golden = find_golden("mistralai-Mistral-Nemo-Instruct-2407", "tools_parallel");
  ASSERT_TRUE(golden.contains("expected"));
  const CommandResult result =
      run_pagedserve(render_flags(golden, "golden"), /*keep_stderr_apart=*/true);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output, golden["expected"].get<std::string>());
}

TEST(ChatTemplateCli, TemplateRaiseExitsOneWithItsMessage) {
  const ordered_json golden = find_golden("google-gemma-2-2b-it", "alternation_violation");
  ASSERT_TRUE(golden.value("raised_by_template", false));
  const CommandResult result = run_pagedserve(render_flags(golden, "raise"));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.output, "pagedserve chat-template render: error: " +
                               golden["expected_error"].get<std::string>() + "\n");
}

TEST(ChatTemplateCli, JinjaRuntimeErrorExitsOne) {
  // Hermes 3's tool_use template iterates `tools` unconditionally: None is not iterable.
  const ordered_json golden =
      find_golden("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "single_user");
  ASSERT_TRUE(golden.contains("expected_error"));
  const CommandResult result = run_pagedserve(render_flags(golden, "runtime"));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("pagedserve chat-template render: error: "), std::string::npos)
      << result.output;
}

TEST(ChatTemplateCli, BadFlagsAndPaths) {
  const ordered_json golden = find_golden("Qwen-Qwen2.5-7B-Instruct", "single_user");
  const std::string flags = render_flags(golden, "flags");
  EXPECT_EQ(run_pagedserve("chat-template").exit_code, 2);
  EXPECT_EQ(run_pagedserve("chat-template --help").exit_code, 0);
  EXPECT_EQ(run_pagedserve("chat-template draw").exit_code, 2);
  EXPECT_EQ(run_pagedserve("chat-template render --input x.json").exit_code, 2);
  EXPECT_EQ(run_pagedserve(flags + " --bogus").exit_code, 2);
  const CommandResult bad_now = run_pagedserve(flags + " --now yesterday");
  EXPECT_EQ(bad_now.exit_code, 2);
  EXPECT_NE(bad_now.output.find("--now"), std::string::npos) << bad_now.output;
  const CommandResult missing =
      run_pagedserve("chat-template render --template /nonexistent.jinja --input /nonexistent");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("/nonexistent.jinja"), std::string::npos) << missing.output;
  const std::filesystem::path not_json = std::filesystem::temp_directory_path() /
                                         ("chat_template_cli_" + std::to_string(getpid()) + ".txt");
  std::ofstream(not_json) << "[1, 2";
  const CommandResult bad_input =
      run_pagedserve("chat-template render --template '" +
                     (templates_dir() / "Qwen-Qwen2.5-7B-Instruct.jinja").string() + "' --input '" +
                     not_json.string() + "'");
  EXPECT_EQ(bad_input.exit_code, 1);
  EXPECT_NE(bad_input.output.find("not valid JSON"), std::string::npos) << bad_input.output;
}

}  // namespace
