// Schema grammars under token-level decoding: random walks over a real vocabulary (SmolLM2's),
// each token drawn from the matcher's mask, leaning towards closing tokens after a while. Every
// walk must find an allowed token at every step (no dead end), end within the step budget, and
// its text must parse as JSON and satisfy the schema's constraints (checked by hand here).
// PRINT_WALKS=1 prints the texts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace pagedserve::model::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const TokenVocabulary> smollm2_vocabulary() {
  static const std::shared_ptr<const TokenVocabulary> vocab = [] {
    const Tokenizer tok = Tokenizer::from_dir(pagedserve::testing::shared_dir() / "tokenizers" /
                                              "smollm2-135m-instruct");
    std::vector<std::string> bytes(tok.vocab_size());
    std::vector<int32_t> end_ids;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.is_special(id)) {
        end_ids.push_back(id);
      } else {
        bytes[id] = tok.token_bytes(id);
      }
    }
    return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(end_ids));
  }();
  return vocab;
}

// One walk; returns the text, or "" when it did not end within `max_steps`.
std::string random_walk(const std::shared_ptr<const CompiledGrammar>& compiled, std::mt19937& rng,
                        int max_steps) {
  const TokenVocabulary& vocab = compiled->vocabulary();
  GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(bitmask_words(vocab.size()));
  std::string text;
  for (int step = 0; step < max_steps; ++step) {
    m.fill_next_token_bitmask(mask);
    std::vector<int32_t> allowed, closing;
    for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
      if (!(mask[id >> 5] >> (id & 31) & 1)) continue;
      allowed.push_back(id);
      const std::string& b = vocab.bytes(id);
      if (vocab.is_end_token(id) || b == "\"" || b == "}" || b == "]" || b == "0" || b == "1") {
        closing.push_back(id);
      }
    }
    EXPECT_FALSE(allowed.empty()) << "dead end after: " << text;
    if (allowed.empty()) return "";
    bool lean = step > 20 && !closing.empty() && rng() % 4 != 0;
    const std::vector<int32_t>& pool = lean ? closing : allowed;
    int32_t id = pool[rng() % pool.size()];
    EXPECT_TRUE(m.accept_token(id));
    if (m.is_terminated()) return text;
    text += vocab.bytes(id);
  }
  return "";
}

struct DecodeCase {
  std::string schema;
  std::function<void(const Json&)> check;
};

TEST(JsonSchemaDecodeTest, RandomWalksEndInValidJson) {
  if (!std::filesystem::exists(pagedserve::testing::shared_dir() / "tokenizers")) {
    GTEST_SKIP() << "no shared tokenizers";
  }
  const std::vector<DecodeCase> cases = {
      {R"({"type": "object", "properties": {
          "unit": {"enum": ["celsius", "fahrenheit"]},
          "days": {"type": "integer", "minimum": 1, "maximum": 14},
          "city": {"type": "string", "maxLength": 12}},
          "required": ["city", "days"]})",
       [](const Json& v) {
         ASSERT_TRUE(v.is_object());
         EXPECT_TRUE(v.at("days").is_number_integer());
         EXPECT_GE(v["days"].get<int>(), 1);
         EXPECT_LE(v["days"].get<int>(), 14);
         EXPECT_TRUE(v.at("city").is_string());
         if (v.contains("unit")) EXPECT_TRUE(v["unit"] == "celsius" || v["unit"] == "fahrenheit");
       }},
      {R"({"$defs": {"t": {"type": "array", "maxItems": 3,
          "items": {"anyOf": [{"type": "number", "minimum": -1.5, "maximum": 2}, {"$ref": "#/$defs/t"}]}}},
          "$ref": "#/$defs/t"})",
       [](const Json& v) {
         std::function<void(const Json&)> walk = [&](const Json& x) {
           if (x.is_number()) {
             EXPECT_GE(x.get<double>(), -1.5);
             EXPECT_LE(x.get<double>(), 2.0);
             return;
           }
           ASSERT_TRUE(x.is_array());
           EXPECT_LE(x.size(), 3u);
           for (const auto& item : x) walk(item);
         };
         walk(v);
       }},
      {R"({"type": "object", "additionalProperties": {"type": "boolean"},
          "properties": {"id": {"type": "string", "format": "uuid"}}})",
       [](const Json& v) {
         ASSERT_TRUE(v.is_object());
         for (const auto& [key, value] : v.items()) {
           if (key == "id") {
             EXPECT_EQ(value.get<std::string>().size(), 36u);
           } else {
             EXPECT_TRUE(value.is_boolean()) << key;
           }
         }
       }},
  };
  std::mt19937 rng(7);
  for (const DecodeCase& c : cases) {
    SCOPED_TRACE(c.schema);
    auto compiled = CompiledGrammar::compile(parse_gbnf(json_schema_to_gbnf(Json::parse(c.schema))),
                                             smollm2_vocabulary());
    int ended = 0;
    for (int walk = 0; walk < 8; ++walk) {
      std::string text = random_walk(compiled, rng, 300);
      if (text.empty()) continue;
      ++ended;
      if (std::getenv("PRINT_WALKS")) std::printf("%s\n", text.c_str());
      Json value = Json::parse(text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << text;
      c.check(value);
    }
    EXPECT_GE(ended, 6);
  }
}

}  // namespace
}  // namespace pagedserve::model::grammar
