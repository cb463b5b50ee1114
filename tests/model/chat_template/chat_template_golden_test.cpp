// Golden tests: the real templates in ../shared/tokenizers must reproduce, byte for byte, what
// @huggingface/jinja and Python jinja2 rendered for each conversation (chat_golden*.jsonl),
// with bos/eos tokens taken from the model folder's own config files as a server would.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "model/chat_template/chat_template.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A special token as tokenizer_config.json / special_tokens_map.json store it: a string or
// an AddedToken object with "content".
std::optional<std::string> special_token(const fs::path& dir, const std::string& key) {
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (!fs::exists(dir / file)) continue;
    auto config = nlohmann::json::parse(read_text(dir / file));
    if (!config.contains(key)) continue;
    const auto& token = config[key];
    if (token.is_string()) return token.get<std::string>();
    if (token.is_object() && token.contains("content")) return token["content"].get<std::string>();
  }
  return std::nullopt;
}

struct GoldenSet {
  const char* folder;
  const char* jsonl;
  const char* template_file;
};

void check_golden(const GoldenSet& set) {
  const fs::path dir = testing::shared_dir() / "tokenizers" / set.folder;
  const ChatTemplate tmpl = ChatTemplate::parse(read_text(dir / set.template_file));
  const auto bos = special_token(dir, "bos_token");
  const auto eos = special_token(dir, "eos_token");
  ASSERT_TRUE(bos && eos) << "no bos/eos token in " << dir;

  std::ifstream lines(dir / set.jsonl);
  ASSERT_TRUE(lines) << "cannot open " << dir / set.jsonl;
  int cases = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const auto golden = nlohmann::json::parse(line);
    SCOPED_TRACE(std::string(set.jsonl) + ": " + golden.value("label", "?") +
                 " add_generation_prompt=" + golden["add_generation_prompt"].dump());
    EXPECT_EQ(golden.value("bos_token", *bos), *bos);  // the golden used the folder's tokens
    EXPECT_EQ(golden.value("eos_token", *eos), *eos);
    nlohmann::json context = {{"messages", golden["messages"]},
                              {"add_generation_prompt", golden["add_generation_prompt"]},
                              {"bos_token", *bos},
                              {"eos_token", *eos}};
    if (golden.contains("error")) {
      try {
        tmpl.render(context);
        ADD_FAILURE() << "expected ChatTemplateError containing " << golden["error"];
      } catch (const ChatTemplateError& e) {
        EXPECT_NE(std::string(e.what()).find(golden["error"].get<std::string>()), std::string::npos)
            << e.what();
      }
    } else {
      EXPECT_EQ(tmpl.render(context), golden["rendered"].get<std::string>());
    }
    ++cases;
  }
  EXPECT_GT(cases, 0);
}

TEST(ChatTemplateGolden, SmolLM2ChatML) {
  check_golden({"smollm2-135m-instruct", "chat_golden.jsonl", "chat_template.jinja"});
}

TEST(ChatTemplateGolden, Llama2Chat) {
  check_golden({"llama2", "chat_golden_llama2_chat.jsonl", "chat_template.llama2-chat.jinja"});
}

TEST(ChatTemplateGolden, TinyLlamaChat) {
  check_golden(
      {"llama2", "chat_golden_tinyllama_chat.jsonl", "chat_template.tinyllama-chat.jinja"});
}

// The golden files hold no error case, so check Llama-2-chat's own role check here: the
// message must be exactly the template's text, and flagged as raised by the template.
TEST(ChatTemplateGolden, Llama2ChatRejectsNonAlternatingRoles) {
  const fs::path dir = testing::shared_dir() / "tokenizers" / "llama2";
  const ChatTemplate tmpl = ChatTemplate::parse(read_text(dir / "chat_template.llama2-chat.jinja"));
  nlohmann::json context = {
      {"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"}};
  try {
    tmpl.render(context);
    FAIL() << "expected raise_exception";
  } catch (const ChatTemplateError& e) {
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_TRUE(e.raised_by_template());
  }
}

TEST(ChatTemplateLoader, PrefersChatTemplateJinja) {
  const fs::path dir = testing::shared_dir() / "tokenizers" / "smollm2-135m-instruct";
  auto text = load_chat_template(dir);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, read_text(dir / "chat_template.jinja"));
}

TEST(ChatTemplateLoader, NoTemplateGivesNullopt) {
  // The llama2 folder keeps its templates under other names; tokenizer_config has none.
  EXPECT_FALSE(load_chat_template(testing::shared_dir() / "tokenizers" / "llama2"));
  EXPECT_FALSE(load_chat_template("/nonexistent/model/dir"));
}

class TempDir {
 public:
  TempDir() {
    path_ =
        fs::temp_directory_path() /
        ("chat_template_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

TEST(ChatTemplateLoader, ReadsTokenizerConfigStringAndNamedList) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "{{ 'hi' }}"})");
  EXPECT_EQ(load_chat_template(dir.path()), "{{ 'hi' }}");
  dir.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                  {"name": "default", "template": "D"}]})");
  EXPECT_EQ(load_chat_template(dir.path()), "D");
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "R"}]})");
  EXPECT_FALSE(load_chat_template(dir.path()));
  dir.write("chat_template.jinja", "J");
  EXPECT_EQ(load_chat_template(dir.path()), "J");  // the .jinja file wins, as in transformers
}

TEST(ChatTemplateLoader, MalformedConfigThrows) {
  TempDir dir;
  dir.write("tokenizer_config.json", "{not json");
  EXPECT_THROW(load_chat_template(dir.path()), ChatTemplateError);
}

TEST(ChatTemplateDefault, RendersChatMLWithTextParts) {
  const ChatTemplate tmpl = ChatTemplate::parse(kDefaultChatTemplate);
  nlohmann::json context = {{"messages",
                             {{{"role", "system"}, {"content", "Be brief."}},
                              {{"role", "user"},
                               {"content",
                                {{{"type", "text"}, {"text", "Hi "}},
                                 {{"type", "image_url"}, {"image_url", "x"}},
                                 {{"type", "text"}, {"text", "there"}}}}},
                              {{"role", "assistant"}, {"content", nullptr}}}},
                            {"add_generation_prompt", true}};
  EXPECT_EQ(tmpl.render(context),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi there<|im_end|>\n"
            "<|im_start|>assistant\n<|im_end|>\n"
            "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace pagedserve::model
