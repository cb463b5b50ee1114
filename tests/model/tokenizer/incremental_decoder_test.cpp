// IncrementalDecoder: every piece is valid UTF-8, partial characters are held back, and the
// pieces (plus flush) add up to the full decode of prompt + generation minus the prompt's text.
#include <gtest/gtest.h>

#include <random>

#include "model/tokenizer/unicode_tables.h"
#include "tests/model/tokenizer/test_tokenizers.h"

namespace pagedserve::model::testing {
namespace {

using Ids = std::vector<int32_t>;
namespace unicode = tokenizer::unicode;

struct StreamResult {
  std::vector<std::string> pieces;  // one per push, then the flush
  std::string text;
};

StreamResult stream(const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                    std::span<const int32_t> generated, bool skip_special) {
  IncrementalDecoder decoder(tokenizer, prompt, skip_special);
  StreamResult result;
  for (const int32_t id : generated) result.pieces.push_back(decoder.push(id));
  result.pieces.push_back(decoder.flush());
  for (const std::string& piece : result.pieces) {
    EXPECT_TRUE(unicode::is_valid_utf8(piece)) << "piece is not valid UTF-8";
    result.text += piece;
  }
  return result;
}

// Streams the golden texts split into prompt + generation at several points; returns how many
// (text, split) cases were compared.
size_t check_streams_match_full_decode(const Tokenizer& tokenizer,
                                       const std::filesystem::path& golden, bool skip_special) {
  size_t compared = 0;
  for (const nlohmann::json& line : read_jsonl(golden)) {
    const Ids ids = tokenizer.encode(line.at("text").get<std::string>(), true);
    const std::string full = tokenizer.decode(ids, skip_special, false);
    for (const size_t split : {size_t{0}, size_t{1}, ids.size() / 3, ids.size() / 2,
                               ids.size() > 0 ? ids.size() - 1 : 0}) {
      if (split > ids.size()) continue;
      const std::span<const int32_t> all(ids);
      const std::string prompt_text = tokenizer.decode(all.first(split), skip_special, false);
      // A split inside a character leaves the prompt's text undefined there; skip it.
      if (!full.starts_with(prompt_text)) continue;
      SCOPED_TRACE(line.at("label").get<std::string>() + " split at " + std::to_string(split));
      EXPECT_EQ(stream(tokenizer, all.first(split), all.subspan(split), skip_special).text,
                full.substr(prompt_text.size()));
      ++compared;
    }
  }
  return compared;
}

TEST(IncrementalDecoder, Llama2StreamsEqualFullDecode) {
  const auto golden = tokenizers_dir() / "llama2" / "golden.jsonl";
  EXPECT_GT(check_streams_match_full_decode(llama2_tokenizer(), golden, true), 150u);
  EXPECT_GT(check_streams_match_full_decode(llama2_tokenizer(), golden, false), 150u);
}

TEST(IncrementalDecoder, SmolLM2StreamsEqualFullDecode) {
  const auto golden = tokenizers_dir() / "smollm2-135m-instruct" / "golden.jsonl";
  EXPECT_GT(check_streams_match_full_decode(smollm2_tokenizer(), golden, true), 150u);
  EXPECT_GT(check_streams_match_full_decode(smollm2_tokenizer(), golden, false), 150u);
}

TEST(IncrementalDecoder, HoldsEmojiUntilItsLastByteToken) {
  const Tokenizer& t = llama2_tokenizer();
  // "▁" then 🤗 as <0xF0><0x9F><0xA4><0x97>, then "▁and".
  const Ids prompt = t.encode("I love", true);
  IncrementalDecoder decoder(t, prompt);
  EXPECT_EQ(decoder.push(29871), " ");
  EXPECT_EQ(decoder.push(243), "");
  EXPECT_EQ(decoder.push(162), "");
  EXPECT_EQ(decoder.push(167), "");
  EXPECT_EQ(decoder.push(154), "\xF0\x9F\xA4\x97");
  EXPECT_EQ(decoder.push(322), " and");
  EXPECT_EQ(decoder.flush(), "");
}

TEST(IncrementalDecoder, FirstTokenWithoutPromptHasNoLeadingSpace) {
  const Tokenizer& t = llama2_tokenizer();
  IncrementalDecoder decoder(t, {});
  EXPECT_EQ(decoder.push(15043), "Hello");  // "▁Hello"
  EXPECT_EQ(decoder.push(3186), " world");
  IncrementalDecoder after_bos(t, Ids{1});
  EXPECT_EQ(after_bos.push(15043), "Hello");
}

TEST(IncrementalDecoder, ByteLevelMultiByteCharacters) {
  const Tokenizer& t = smollm2_tokenizer();
  const Ids ids = t.encode("\u4f60\u597d\u4e16\u754c \U0001F600!", false);
  IncrementalDecoder decoder(t, t.encode("Say:", false));
  std::string text;
  size_t held = 0;
  for (const int32_t id : ids) {
    const std::string piece = decoder.push(id);
    held += piece.empty();
    text += piece;
  }
  text += decoder.flush();
  EXPECT_EQ(text, "\u4f60\u597d\u4e16\u754c \U0001F600!");
  EXPECT_GT(held, 0u);  // some tokens end mid-character
}

TEST(IncrementalDecoder, FlushEmitsAnIncompleteCharacterAsReplacement) {
  IncrementalDecoder llama(llama2_tokenizer(), Ids{1});
  EXPECT_EQ(llama.push(243), "");
  EXPECT_EQ(llama.push(162), "");
  EXPECT_EQ(llama.flush(), "\uFFFD\uFFFD");  // byte fallback: one per byte
  EXPECT_EQ(llama.flush(), "");

  const Tokenizer& smol = smollm2_tokenizer();
  const Ids emoji = smol.encode("\U0001F600", false);
  ASSERT_GE(emoji.size(), 2u);
  IncrementalDecoder byte_level(smol, {});
  EXPECT_EQ(byte_level.push(emoji[0]), "");
  EXPECT_EQ(byte_level.flush(), "\uFFFD");  // lossy UTF-8: one per truncated sequence
}

TEST(IncrementalDecoder, SpecialTokensKeptOrSkipped) {
  const Tokenizer& t = smollm2_tokenizer();
  const Ids ids = t.encode("Hi<|im_end|>\n", false);
  EXPECT_EQ(stream(t, {}, ids, false).text, "Hi<|im_end|>\n");
  EXPECT_EQ(stream(t, {}, ids, true).text, "Hi\n");
}

TEST(IncrementalDecoder, PromptEndingInsideACharacter) {
  // The prompt ends after two of 🤗's four byte tokens; generation completes it.
  const Tokenizer& t = llama2_tokenizer();
  const Ids prompt{1, 306, 5360, 29871, 243, 162};
  const Ids generated{167, 154, 322};
  EXPECT_EQ(stream(t, prompt, generated, true).text, "\xF0\x9F\xA4\x97 and");
}

TEST(IncrementalDecoder, RandomIdsAlwaysGiveValidUtf8) {
  std::mt19937 rng(1234);
  for (const Tokenizer* t : {&llama2_tokenizer(), &smollm2_tokenizer()}) {
    std::uniform_int_distribution<int32_t> any_id(0, t->vocab_size() - 1);
    // Llama 2's byte tokens are ids 3..258; SmolLM2's single-byte tokens are low ids too.
    std::uniform_int_distribution<int32_t> byte_id(3, 258);
    for (int trial = 0; trial < 40; ++trial) {
      Ids ids;
      for (int i = 0; i < 30; ++i) ids.push_back(rng() % 3 == 0 ? any_id(rng) : byte_id(rng));
      const StreamResult result = stream(*t, {}, ids, trial % 2 == 0);
      EXPECT_TRUE(unicode::is_valid_utf8(result.text));
    }
  }
}

}  // namespace
}  // namespace pagedserve::model::testing
