// The real tokenizers against the golden vectors in ../shared/tokenizers (produced by Hugging
// Face's own implementation): ids with and without special tokens, the three decode variants,
// and the ids of rendered chat conversations.
#include <gtest/gtest.h>

#include "tests/model/tokenizer/test_tokenizers.h"

namespace pagedserve::model::testing {
namespace {

// Checks every golden.jsonl line; returns how many were checked.
size_t check_golden_file(const Tokenizer& tokenizer, const std::filesystem::path& path) {
  size_t checked = 0;
  for (const nlohmann::json& line : read_jsonl(path)) {
    const std::string label = line.at("label").get<std::string>();
    SCOPED_TRACE(path.parent_path().filename().string() + " / " + label);
    const std::string text = line.at("text").get<std::string>();
    const std::vector<int32_t> ids = ids_of(line.at("ids"));
    EXPECT_EQ(tokenizer.encode(text, true), ids);
    EXPECT_EQ(tokenizer.encode(text, false), ids_of(line.at("ids_no_special")));
    EXPECT_EQ(tokenizer.decode(ids, false), line.at("decoded").get<std::string>());
    EXPECT_EQ(tokenizer.decode(ids, true), line.at("decoded_skip_special").get<std::string>());
    EXPECT_EQ(tokenizer.decode(ids, false, false),
              line.at("decoded_no_cleanup").get<std::string>());
    // The golden token strings are the matched text, which for a normalized added token
    // includes the normalizer's "▁" ("▁<s>"); id_to_token gives the vocab string ("<s>").
    const auto tokens = line.at("tokens").get<std::vector<std::string>>();
    EXPECT_EQ(tokens.size(), ids.size());
    for (size_t i = 0; i < std::min(ids.size(), tokens.size()); ++i) {
      if (!tokenizer.is_special(ids[i])) {
        EXPECT_EQ(tokenizer.id_to_token(ids[i]), tokens[i]);
      }
    }
    ++checked;
  }
  return checked;
}

size_t check_chat_golden_file(const Tokenizer& tokenizer, const std::filesystem::path& path) {
  size_t checked = 0;
  for (const nlohmann::json& line : read_jsonl(path)) {
    if (!line.contains("rendered")) continue;  // the template raised for this conversation
    SCOPED_TRACE(path.filename().string() + " / " + line.at("label").get<std::string>() +
                 (line.value("add_generation_prompt", false) ? " +gen" : ""));
    const std::string rendered = line.at("rendered").get<std::string>();
    EXPECT_EQ(tokenizer.encode(rendered, false), ids_of(line.at("ids")));
    EXPECT_EQ(tokenizer.encode(rendered, true), ids_of(line.at("ids_with_special")));
    ++checked;
  }
  return checked;
}

TEST(TokenizerGolden, Llama2EveryLine) {
  EXPECT_EQ(check_golden_file(llama2_tokenizer(), tokenizers_dir() / "llama2" / "golden.jsonl"),
            40u);
}

TEST(TokenizerGolden, SmolLM2EveryLine) {
  EXPECT_EQ(check_golden_file(smollm2_tokenizer(),
                              tokenizers_dir() / "smollm2-135m-instruct" / "golden.jsonl"),
            40u);
}

TEST(TokenizerGolden, Llama2ChatTemplates) {
  const size_t checked =
      check_chat_golden_file(llama2_tokenizer(),
                             tokenizers_dir() / "llama2" / "chat_golden_llama2_chat.jsonl") +
      check_chat_golden_file(llama2_tokenizer(),
                             tokenizers_dir() / "llama2" / "chat_golden_tinyllama_chat.jsonl");
  EXPECT_GT(checked, 12u);
}

TEST(TokenizerGolden, SmolLM2ChatTemplate) {
  EXPECT_EQ(check_chat_golden_file(smollm2_tokenizer(), tokenizers_dir() / "smollm2-135m-instruct" /
                                                            "chat_golden.jsonl"),
            12u);
}

TEST(TokenizerGolden, Stories260KOnceUponATime) {
  EXPECT_EQ(stories260k_tokenizer().encode("Once upon a time"),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
}

}  // namespace
}  // namespace pagedserve::model::testing
