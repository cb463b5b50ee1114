// The 90 goldens of ../shared/chat-templates (see its README.md): eight real chat templates
// rendered by Python Jinja2 set up as transformers' apply_chat_template sets it up. Each case
// must render byte for byte, or fail as Jinja2 failed: with the template's own message when
// it called raise_exception, in our own words otherwise.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/chat_template/chat_template.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

using nlohmann::ordered_json;

std::filesystem::path templates_dir() { return testing::shared_dir() / "chat-templates"; }

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<ordered_json> load_goldens() {
  std::vector<ordered_json> goldens;
  std::ifstream in(templates_dir() / "goldens.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) goldens.push_back(ordered_json::parse(line));
  }
  return goldens;
}

// The README's context: {"messages", "tools", "documents", **kwargs}, in that order.
ordered_json context_of(const ordered_json& golden) {
  ordered_json context = ordered_json::object();
  context["messages"] = golden.at("messages");
  context["tools"] = golden.at("tools");
  context["documents"] = golden.at("documents");
  for (const auto& [key, value] : golden.at("kwargs").items()) context[key] = value;
  return context;
}

class SharedGoldens : public ::testing::TestWithParam<ordered_json> {};

TEST_P(SharedGoldens, RendersAsJinja2Does) {
  const ordered_json& golden = GetParam();
  const std::string name = golden.at("template").get<std::string>();
  const ChatTemplate chat_template =
      ChatTemplate::parse(read_text(templates_dir() / (name + ".jinja")));
  RenderOptions options;
  options.now = parse_local_time(golden.at("now").get<std::string>());
  ASSERT_TRUE(options.now.has_value()) << golden.at("now");
  const ordered_json context = context_of(golden);
  if (golden.contains("expected")) {
    EXPECT_EQ(chat_template.render(context, options), golden.at("expected").get<std::string>());
    return;
  }
  try {
    const std::string text = chat_template.render(context, options);
    ADD_FAILURE() << "rendered instead of failing with " << golden.at("expected_error") << ":\n"
                  << text;
  } catch (const ChatTemplateError& e) {
    const bool raised = golden.at("raised_by_template").get<bool>();
    EXPECT_EQ(e.raised_by_template(), raised) << e.what();
    if (raised) {
      EXPECT_EQ(std::string(e.what()), golden.at("expected_error").get<std::string>());
    }
  }
}

TEST(SharedGoldensFile, HoldsNinetyCases) { EXPECT_EQ(load_goldens().size(), 90u); }

std::string case_name(const ::testing::TestParamInfo<ordered_json>& info) {
  std::string name =
      info.param.at("template").get<std::string>() + "_" + info.param.at("case").get<std::string>();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, SharedGoldens, ::testing::ValuesIn(load_goldens()),
                         case_name);

}  // namespace
}  // namespace pagedserve::model
