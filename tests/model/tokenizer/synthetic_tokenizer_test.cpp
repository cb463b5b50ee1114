// Small hand-written tokenizer.json files exercising one feature each (merge formats, unk
// fusing, byte fallback, added-token whitespace rules, Metaspace, config-driven BOS/EOS,
// ignore_merges) and the load errors, which must name the offending file.
#include <gtest/gtest.h>

#include <fstream>

#include "model/loader/model_error.h"
#include "tests/model/tokenizer/test_tokenizers.h"

namespace pagedserve::model::testing {
namespace {

using nlohmann::json;

// A fresh directory per test holding the given files.
std::filesystem::path write_dir(const std::vector<std::pair<std::string, std::string>>& files) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      (std::string("ps_tok_") + info->test_suite_name() + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& [name, text] : files) std::ofstream(dir / name) << text;
  return dir;
}

json abc_model(json merges) {
  return {{"type", "BPE"},
          {"unk_token", "<unk>"},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab",
           {{"a", 0},
            {"b", 1},
            {"c", 2},
            {"ab", 3},
            {"abc", 4},
            {"<unk>", 5},
            {"<mask>", 6},
            {" ", 7},
            {"x", 8},
            {"y", 9},
            {"xy", 10}}},
          {"merges", std::move(merges)}};
}

Tokenizer load(const json& tokenizer_json, const std::optional<json>& config = std::nullopt) {
  std::vector<std::pair<std::string, std::string>> files{{"tokenizer.json", tokenizer_json.dump()}};
  if (config) files.emplace_back("tokenizer_config.json", config->dump());
  return Tokenizer::from_dir(write_dir(files));
}

using Ids = std::vector<int32_t>;

TEST(SyntheticTokenizer, BothMergeFormatsAgree) {
  const Tokenizer strings = load({{"model", abc_model({"a b", "ab c"})}});
  const Tokenizer pairs = load(
      {{"model", abc_model(json::array({json::array({"a", "b"}), json::array({"ab", "c"})}))}});
  for (const Tokenizer* t : {&strings, &pairs}) {
    EXPECT_EQ(t->encode("abcab"), (Ids{4, 3}));
    EXPECT_EQ(t->encode("cab"), (Ids{2, 3}));
    EXPECT_EQ(t->decode(Ids{4, 3}), "abc ab");  // no decoder: HF joins tokens with spaces
  }
}

TEST(SyntheticTokenizer, UnknownCharactersFuseOnlyWithFuseUnk) {
  json tokenizer = {{"model", abc_model({"a b"})}};
  EXPECT_EQ(load(tokenizer).encode("ab\u00e9\u00e9c"), (Ids{3, 5, 5, 2}));
  tokenizer["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(tokenizer).encode("ab\u00e9\u00e9c"), (Ids{3, 5, 2}));
}

TEST(SyntheticTokenizer, ByteFallbackSpellsUnknownCharactersAsBytes) {
  json model = abc_model({"a b"});
  model["byte_fallback"] = true;
  model["vocab"]["<0xC3>"] = 11;
  model["vocab"]["<0xA9>"] = 12;
  const Tokenizer t = load(
      {{"model", model},
       {"decoder",
        {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}}});
  EXPECT_EQ(t.encode("a\u00e9"), (Ids{0, 11, 12}));
  EXPECT_EQ(t.encode("\u00e8"), (Ids{5}));  // 0xA8 has no byte token: unk
  EXPECT_EQ(t.decode(Ids{0, 11, 12}), "a\u00e9");
  EXPECT_EQ(t.decode(Ids{0, 11}), "a\uFFFD");  // an incomplete character
}

TEST(SyntheticTokenizer, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json model = abc_model({"a b"});
  EXPECT_EQ(load({{"model", model}}).encode("abc"), (Ids{3, 2}));
  model["ignore_merges"] = true;
  EXPECT_EQ(load({{"model", model}}).encode("abc"), (Ids{4}));
}

json added(const std::string& content, int id, json flags) {
  json token = {{"content", content},  {"id", id},        {"special", true},
                {"lstrip", false},     {"rstrip", false}, {"normalized", false},
                {"single_word", false}};
  if (!flags.is_null()) token.update(flags);
  return token;
}

TEST(SyntheticTokenizer, AddedTokenStripsWhitespaceOnRequestedSides) {
  const json model = abc_model({"a b"});
  const Tokenizer plain = load({{"model", model}, {"added_tokens", {added("<mask>", 6, {})}}});
  EXPECT_EQ(plain.encode("ab <mask> c"), (Ids{3, 7, 6, 7, 2}));
  const Tokenizer both =
      load({{"model", model},
            {"added_tokens", {added("<mask>", 6, {{"lstrip", true}, {"rstrip", true}})}}});
  EXPECT_EQ(both.encode("ab  <mask> \tc"), (Ids{3, 6, 2}));
  const Tokenizer left =
      load({{"model", model}, {"added_tokens", {added("<mask>", 6, {{"lstrip", true}})}}});
  EXPECT_EQ(left.encode("ab <mask> c"), (Ids{3, 6, 7, 2}));
}

TEST(SyntheticTokenizer, SingleWordAddedTokenNeedsWordBoundaries) {
  const Tokenizer t =
      load({{"model", abc_model({"a b"})},
            {"added_tokens", {added("xy", 10, {{"single_word", true}, {"special", false}})}}});
  EXPECT_EQ(t.encode("xy a"), (Ids{10, 7, 0}));
  EXPECT_EQ(t.encode("a xy"), (Ids{0, 7, 10}));
  EXPECT_EQ(t.encode("axy"), (Ids{0, 8, 9}));  // inside a word: plain text, no xy merge
  EXPECT_FALSE(t.is_special(10));
}

TEST(SyntheticTokenizer, LongestAddedTokenWins) {
  json model = abc_model({"a b"});
  model["vocab"]["<m>"] = 11;
  const Tokenizer t =
      load({{"model", model}, {"added_tokens", {added("<m>", 11, {}), added("<mask>", 6, {})}}});
  EXPECT_EQ(t.encode("<mask><m>a"), (Ids{6, 11, 0}));
}

TEST(SyntheticTokenizer, MetaspacePreTokenizerAndDecoder) {
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", "\u2581"},
                          {"prepend_scheme", "always"},
                          {"split", true}};
  const Tokenizer t =
      load({{"model",
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"vocab",
               {{"\u2581", 0}, {"a", 1}, {"b", 2}, {"\u2581a", 3}, {"\u2581b", 4}, {"<unk>", 5}}},
              {"merges", {"\u2581 a", "\u2581 b"}}}},
            {"pre_tokenizer", metaspace},
            {"decoder", metaspace}});
  EXPECT_EQ(t.encode("a b"), (Ids{3, 4}));
  EXPECT_EQ(t.encode("ab  a"), (Ids{3, 2, 0, 3}));
  EXPECT_EQ(t.decode(Ids{3, 2, 0, 3}), "ab  a");
}

TEST(SyntheticTokenizer, ConfigAddsBosAndEosWithoutPostProcessor) {
  const json tokenizer = {{"model", abc_model({"a b"})},
                          {"added_tokens", {added("<s>", 11, {}), added("</s>", 12, {})}}};
  const Tokenizer t = load(tokenizer, json{{"add_bos_token", true},
                                           {"add_eos_token", true},
                                           {"bos_token", "<s>"},
                                           {"eos_token", {{"content", "</s>"}}},
                                           {"clean_up_tokenization_spaces", true}});
  EXPECT_EQ(t.bos_token_id(), 11);
  EXPECT_EQ(t.eos_token_id(), 12);
  EXPECT_EQ(t.vocab_size(), 13);
  EXPECT_EQ(t.encode("ab"), (Ids{11, 3, 12}));
  EXPECT_EQ(t.encode("ab", false), (Ids{3}));
  EXPECT_EQ(t.decode(Ids{11, 3, 12}, true), "ab");
}

TEST(SyntheticTokenizer, TemplateProcessingAddsPrefixAndSuffix) {
  json tokenizer = {{"model", abc_model({"a b"})},
                    {"added_tokens", {added("<s>", 11, {}), added("</s>", 12, {})}}};
  tokenizer["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {11}}, {"tokens", {"<s>"}}}},
        {"</s>", {{"id", "</s>"}, {"ids", {12}}, {"tokens", {"</s>"}}}}}}};
  const Tokenizer t = load(tokenizer);
  EXPECT_EQ(t.encode("ab"), (Ids{11, 3, 12}));
  EXPECT_EQ(t.bos_token_id(), 11);  // no config: the template's leading token
}

void expect_model_error(const std::filesystem::path& dir, const std::string& file,
                        const std::string& detail) {
  try {
    (void)Tokenizer::from_dir(dir);
    ADD_FAILURE() << "expected a ModelError";
  } catch (const ModelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file), std::string::npos) << what;
    EXPECT_NE(what.find(detail), std::string::npos) << what;
  }
}

TEST(TokenizerErrors, MissingTokenizerJson) {
  expect_model_error(write_dir({}), "tokenizer.json", "cannot open");
}

TEST(TokenizerErrors, InvalidJson) {
  expect_model_error(write_dir({{"tokenizer.json", "{\"model\": [1, 2"}}), "tokenizer.json",
                     "invalid JSON");
}

TEST(TokenizerErrors, InvalidConfigJson) {
  expect_model_error(
      write_dir({{"tokenizer.json", json{{"model", abc_model(json::array())}}.dump()},
                 {"tokenizer_config.json", "not json"}}),
      "tokenizer_config.json", "invalid JSON");
}

TEST(TokenizerErrors, UnsupportedModelType) {
  json model = abc_model(json::array());
  model["type"] = "Unigram";
  expect_model_error(write_dir({{"tokenizer.json", json{{"model", model}}.dump()}}),
                     "tokenizer.json", "Unigram");
}

TEST(TokenizerErrors, UnsupportedPreTokenizerRegex) {
  const json tokenizer = {
      {"model", abc_model(json::array())},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}}}};
  expect_model_error(write_dir({{"tokenizer.json", tokenizer.dump()}}), "tokenizer.json", "Split");
}

TEST(TokenizerErrors, UnsupportedNormalizer) {
  const json tokenizer = {{"model", abc_model(json::array())}, {"normalizer", {{"type", "NFKD"}}}};
  expect_model_error(write_dir({{"tokenizer.json", tokenizer.dump()}}), "tokenizer.json", "NFKD");
}

TEST(TokenizerErrors, MergeOfUnknownTokens) {
  expect_model_error(write_dir({{"tokenizer.json", json{{"model", abc_model({"a q"})}}.dump()}}),
                     "tokenizer.json", "a q");
}

// Ids index dense tables: an id no vocabulary reaches (or one that does not fit int32 and
// used to wrap, here to 623009787) was a multi-GB allocation from a 2 KB file, found by
// tests/fuzz/tokenizer_json_fuzz.cpp. Now a ModelError naming the token.
TEST(TokenizerErrors, IdsBeyondAnyVocabulary) {
  json model = abc_model(json::array());
  model["vocab"]["huge"] = int64_t{69999999999995};
  expect_model_error(write_dir({{"tokenizer.json", json{{"model", model}}.dump()}}),
                     "tokenizer.json", "vocab token \"huge\" has id 69999999999995");
  model["vocab"]["huge"] = 2000000000;
  expect_model_error(write_dir({{"tokenizer.json", json{{"model", model}}.dump()}}),
                     "tokenizer.json", "outside [0, 4194304)");
  const json added = {{"model", abc_model(json::array())},
                      {"added_tokens", {{{"id", 5000000}, {"content", "<x>"}}}}};
  expect_model_error(write_dir({{"tokenizer.json", added.dump()}}), "tokenizer.json",
                     "added token \"<x>\" has id 5000000");
}

TEST(TokenizerErrors, MissingModel) {
  expect_model_error(write_dir({{"tokenizer.json", "{}"}}), "tokenizer.json", "model");
}

}  // namespace
}  // namespace pagedserve::model::testing
