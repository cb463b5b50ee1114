// Tokenizer behaviour on the real tokenizers beyond the goldens: the API accessors, round
// trips, stories260K, clean-up, long inputs, and errors naming the file.
#include <gtest/gtest.h>

#include <thread>

#include "model/loader/model_error.h"
#include "tests/model/tokenizer/test_tokenizers.h"

namespace pagedserve::model::testing {
namespace {

const std::vector<std::string> kRoundTripTexts = {
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces, trailing   ",
    "tabs\tand\nnewlines\r\n\n  mixed \t ",
    "     ",
    "\n",
    "你好，世界！日本語のテキストです。한국어",
    "Привет, мир! Γειά σου Κόσμε. café naïve Ångström",
    "emoji 🤗🍕👍🏽 and zwj 👨‍👩‍👧‍👦 flags 🇺🇸",
    "math 𝔘𝔫𝔦𝔠 x² ∑∫√ ≠ ≤ and digits 1234567890 ٣٤٥",
    "code: for (int i = 0; i < n; ++i) { sum += v[i]; } // done\n",
    "don't I'm we'll THEY'RE it's",
};

void expect_round_trips(const Tokenizer& tokenizer) {
  for (const std::string& text : kRoundTripTexts) {
    SCOPED_TRACE(text);
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, true), true), text);
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, false), true), text);
  }
}

TEST(Tokenizer, RoundTripsLlama2) { expect_round_trips(llama2_tokenizer()); }
TEST(Tokenizer, RoundTripsSmolLM2) { expect_round_trips(smollm2_tokenizer()); }
TEST(Tokenizer, RoundTripsStories260K) { expect_round_trips(stories260k_tokenizer()); }

// token_bytes: one token's raw bytes, a partial UTF-8 character kept as is (what OpenAI's
// logprobs `bytes` carry), where decode() gives U+FFFD.
TEST(Tokenizer, TokenBytesKeepPartialCharactersRaw) {
  const Tokenizer& llama = llama2_tokenizer();
  const int32_t byte_f0[1] = {243};  // byte fallback <0xF0>: ids 3..258 are bytes 0..255
  EXPECT_EQ(llama.id_to_token(243), "<0xF0>");
  EXPECT_EQ(llama.token_bytes(243), "\xF0");
  EXPECT_EQ(llama.decode(byte_f0, false, false), "\uFFFD");
  const std::vector<int32_t> word = llama.encode("Hello world", false);
  for (int32_t id : word) {
    const int32_t one[1] = {id};
    EXPECT_EQ(llama.token_bytes(id), llama.decode(one, false, false)) << id;
  }
  EXPECT_EQ(llama.token_bytes(-1), "");
  EXPECT_EQ(llama.token_bytes(llama.vocab_size()), "");

  const Tokenizer& smol = smollm2_tokenizer();  // byte-level
  const std::vector<int32_t> emoji = smol.encode("\U0001F600", false);
  ASSERT_GE(emoji.size(), 2u);
  std::string joined;
  for (int32_t id : emoji) joined += smol.token_bytes(id);
  EXPECT_EQ(joined, "\U0001F600");
  const int32_t first[1] = {emoji[0]};
  EXPECT_EQ(smol.decode(first, false, false), "\uFFFD");
}

TEST(Tokenizer, Llama2Accessors) {
  const Tokenizer& t = llama2_tokenizer();
  EXPECT_EQ(t.vocab_size(), 32000);
  EXPECT_EQ(t.bos_token_id(), 1);
  EXPECT_EQ(t.eos_token_id(), 2);
  EXPECT_EQ(t.token_to_id("\u2581the"), 278);
  EXPECT_EQ(t.token_to_id("</s>"), 2);
  EXPECT_EQ(t.token_to_id("no such token"), std::nullopt);
  EXPECT_EQ(t.id_to_token(278), "\u2581the");
  EXPECT_EQ(t.id_to_token(13), "<0x0A>");
  EXPECT_EQ(t.id_to_token(32000), "");
  EXPECT_EQ(t.id_to_token(-1), "");
  EXPECT_TRUE(t.is_special(0));
  EXPECT_TRUE(t.is_special(1));
  EXPECT_TRUE(t.is_special(2));
  EXPECT_FALSE(t.is_special(278));
  EXPECT_FALSE(t.is_special(99999));
}

TEST(Tokenizer, SmolLM2Accessors) {
  const Tokenizer& t = smollm2_tokenizer();
  EXPECT_EQ(t.vocab_size(), 49152);
  EXPECT_EQ(t.bos_token_id(), 1);  // <|im_start|>, as tokenizer_config.json says
  EXPECT_EQ(t.eos_token_id(), 2);  // <|im_end|>
  EXPECT_EQ(t.token_to_id("\u0120the"), 260);
  for (int32_t id = 0; id <= 16; ++id) EXPECT_TRUE(t.is_special(id)) << id;
  EXPECT_FALSE(t.is_special(17));
  // No post-processor and no add_bos_token: special tokens change nothing.
  EXPECT_EQ(t.encode("Hello", true), t.encode("Hello", false));
}

TEST(Tokenizer, Stories260K) {
  const Tokenizer& t = stories260k_tokenizer();
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_token_id(), 1);
  EXPECT_EQ(t.eos_token_id(), 2);
  const std::vector<int32_t> ids = t.encode("Once upon a time");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(t.decode(ids, true), "Once upon a time");
  EXPECT_EQ(t.decode(ids, false), "<s> Once upon a time");
  // Its special tokens are normalized=false, so "<s>" in text is split out before the "▁"
  // normalizer runs (unlike the Llama 2 file's).
  EXPECT_EQ(t.encode("<s>Once", false).front(), 1);
}

TEST(Tokenizer, Llama2NormalizedSpecialTokensOnlyMatchAfterSpace) {
  const Tokenizer& t = llama2_tokenizer();
  // "▁</s>" matches (after a space); "x</s>" does not.
  const std::vector<int32_t> spaced = t.encode("x </s>", false);
  EXPECT_EQ(spaced.back(), 2);
  const std::vector<int32_t> glued = t.encode("x</s>", false);
  EXPECT_EQ(std::count(glued.begin(), glued.end(), 2), 0);
}

TEST(Tokenizer, CleanUpTokenizationSpaces) {
  const Tokenizer& t = llama2_tokenizer();
  const std::vector<int32_t> ids = t.encode("Hello , world ! I 'm here . Don 't", false);
  EXPECT_EQ(t.decode(ids, true, false), "Hello , world ! I 'm here . Don 't");
  EXPECT_EQ(t.decode(ids, true, true), "Hello, world! I'm here. Don 't");
  EXPECT_EQ(t.decode(ids, true), t.decode(ids, true, false));  // config says false
}

TEST(Tokenizer, EmptyInput) {
  EXPECT_EQ(llama2_tokenizer().encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(llama2_tokenizer().encode("", false).empty());
  EXPECT_TRUE(smollm2_tokenizer().encode("", true).empty());
  EXPECT_EQ(llama2_tokenizer().decode(std::vector<int32_t>{}), "");
}

TEST(Tokenizer, UnknownIdsAreDroppedInDecode) {
  const Tokenizer& t = smollm2_tokenizer();
  EXPECT_EQ(t.decode(std::vector<int32_t>{-5, 19556, 1000000}), "Hello");
}

TEST(Tokenizer, LongSingleWordInputRoundTrips) {
  // SentencePiece style has no pre-tokenizer: 120 KB of text is one BPE word. (Its speed is
  // measured by tools/bench/tokenizer_bench.)
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "the quick brown fox, 42 jumps! ";
  const std::vector<int32_t> ids = llama2_tokenizer().encode(text, false);
  EXPECT_EQ(llama2_tokenizer().decode(ids, true), text);
  // Merging is local: the long text tokenizes as its repeated phrase does.
  const std::vector<int32_t> phrase =
      llama2_tokenizer().encode("the quick brown fox, 42 jumps! ", false);
  ASSERT_GE(ids.size(), phrase.size());
  EXPECT_TRUE(std::equal(phrase.begin(), phrase.end() - 1, ids.begin()));
}

TEST(Tokenizer, ConcurrentEncodeMatchesSequential) {
  const Tokenizer& t = smollm2_tokenizer();
  const std::vector<int32_t> expected = t.encode(kRoundTripTexts[8]);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) mismatches[w] += t.encode(kRoundTripTexts[8]) != expected;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// token_bytes_after_text: what a token adds to a text it continues, so that the pieces of an
// encoded text (after its first token) concatenate to the decoded text: the reference a
// grammar matcher needs. SentencePiece's "▁" pieces keep their space there.
TEST(Tokenizer, TokenBytesAfterTextConcatenateToTheDecodedText) {
  for (const Tokenizer* tokenizer : {&llama2_tokenizer(), &smollm2_tokenizer()}) {
    const std::string text = "Once upon a time, Lily said: \"héllo\" 42 \U0001F600 times.";
    const std::vector<int32_t> ids = tokenizer->encode(text, false);
    ASSERT_GE(ids.size(), 3u);
    const std::string first =
        tokenizer->decode(std::span<const int32_t>(ids.data(), 1), false, false);
    std::string joined = first;
    for (size_t i = 1; i < ids.size(); ++i) joined += tokenizer->token_bytes_after_text(ids[i]);
    EXPECT_EQ(joined, tokenizer->decode(ids, false, false));
  }
  const Tokenizer& llama = llama2_tokenizer();
  const int32_t space_the = *llama.token_to_id("\xE2\x96\x81the");  // "▁the"
  EXPECT_EQ(llama.token_bytes(space_the), "the");
  EXPECT_EQ(llama.token_bytes_after_text(space_the), " the");
  EXPECT_EQ(llama.token_bytes_after_text(243), "\xF0");
  EXPECT_EQ(llama.token_bytes_after_text(-1), "");
}

}  // namespace
}  // namespace pagedserve::model::testing
