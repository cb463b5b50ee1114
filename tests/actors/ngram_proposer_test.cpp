// NgramProposer against a brute-force search written here from the definition: for n from
// ngram_max down to ngram_min, every earlier position whose n tokens equal the last n (and
// that some token follows), the latest one wins; its followers are the proposal.
#include "actors/ngram_proposer.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

namespace pagedserve::actors {
namespace {

using Tokens = std::vector<int32_t>;

Tokens brute_force(const Tokens& tokens, int min_n, int max_n, int k) {
  const int len = static_cast<int>(tokens.size());
  for (int n = max_n; n >= min_n; --n) {
    if (n >= len) continue;  // the suffix itself plus one follower must fit before it
    int best = -1;
    for (int start = 0; start + n < len; ++start) {  // some token follows the occurrence
      bool same = true;
      for (int j = 0; j < n; ++j) same = same && tokens[start + j] == tokens[len - n + j];
      if (same) best = start;  // keep the latest
    }
    if (best < 0) continue;
    Tokens out;
    for (int p = best + n; p < len && static_cast<int>(out.size()) < k; ++p) {
      out.push_back(tokens[p]);
    }
    return out;
  }
  return {};
}

TEST(NgramProposer, ProposesWhatFollowedTheLatestLongestMatch) {
  const NgramProposer proposer(1, 3);
  // "1 2 3 9 | 1 2 3 7 | 1 2 3": the suffix 1 2 3 last occurred before 7.
  EXPECT_EQ(proposer.propose(Tokens{1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3}, 2), (Tokens{7, 8}));
  // Only the 1-gram 5 matches: what followed its latest earlier occurrence.
  EXPECT_EQ(proposer.propose(Tokens{5, 6, 5, 4, 4, 2, 5}, 3), (Tokens{4, 4, 2}));
  // Proposals may run into the suffix itself (a repeating pattern).
  EXPECT_EQ(proposer.propose(Tokens{7, 7, 7}, 4), (Tokens{7}));
  EXPECT_TRUE(proposer.propose(Tokens{1, 2, 3, 4}, 4).empty());  // nothing repeats
  EXPECT_TRUE(proposer.propose(Tokens{1}, 4).empty());
  EXPECT_TRUE(proposer.propose(Tokens{}, 4).empty());
  EXPECT_TRUE(proposer.propose(Tokens{1, 1}, 0).empty());
  // A minimum of 2 ignores the 1-gram match.
  EXPECT_TRUE(NgramProposer(2, 3).propose(Tokens{5, 6, 5, 4, 4, 2, 5}, 3).empty());
}

TEST(NgramProposer, MatchesBruteForceOnRandomSequences) {
  std::mt19937 rng(7);
  int nonempty = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int alphabet = std::uniform_int_distribution<int>(2, 12)(rng);
    const int len = std::uniform_int_distribution<int>(0, 80)(rng);
    Tokens tokens(static_cast<size_t>(len));
    for (int32_t& t : tokens) t = std::uniform_int_distribution<int>(0, alphabet - 1)(rng);
    const int min_n = std::uniform_int_distribution<int>(1, 4)(rng);
    const int max_n = std::uniform_int_distribution<int>(min_n, 6)(rng);
    const int k = std::uniform_int_distribution<int>(1, 8)(rng);
    const Tokens got = NgramProposer(min_n, max_n).propose(tokens, k);
    ASSERT_EQ(got, brute_force(tokens, min_n, max_n, k))
        << "trial " << trial << " len " << len << " n " << min_n << ".." << max_n << " k " << k;
    nonempty += got.empty() ? 0 : 1;
  }
  EXPECT_GT(nonempty, 1000);  // the comparison covered matches, not only misses
}

TEST(SpeculativeConfig, ValidatesItsFields) {
  SpeculativeConfig config;
  EXPECT_EQ(config.validate(), "");  // off
  config.method = parse_speculative_method("ngram");
  EXPECT_EQ(config.validate(), "");
  config.ngram_min = 5;
  EXPECT_NE(config.validate().find("ngram_max"), std::string::npos);
  config.ngram_min = 1;
  config.num_speculative_tokens = 0;
  EXPECT_NE(config.validate().find("num_speculative_tokens"), std::string::npos);
  EXPECT_THROW(parse_speculative_method("medusa"), std::invalid_argument);
  EXPECT_STREQ(speculative_method_name(SpeculativeMethod::kNgram), "ngram");
  config.num_speculative_tokens = 4;
  config.method = parse_speculative_method("draft");
  EXPECT_NE(config.validate().find("draft model"), std::string::npos);
  config.draft_model = "stories260K.gguf";
  EXPECT_EQ(config.validate(), "");
  EXPECT_STREQ(speculative_method_name(config.method), "draft");
  config.min_accepted_per_seq = -0.5;
  EXPECT_NE(config.validate().find("min accepted"), std::string::npos);
  config.min_accepted_per_seq = 0.5;
  config.max_batch_seqs = -2;
  EXPECT_NE(config.validate().find("max batch"), std::string::npos);
}

// The batch limit by method when none is given (-1), as docs/speculative-decoding.md
// measures: n-gram proposals lose from batch 3-4, a well-accepted draft still gains there.
TEST(SpeculativeConfig, TheBatchLimitFollowsTheMethodUnlessGiven) {
  SpeculativeConfig config;
  EXPECT_EQ(config.max_batch_seqs, -1);
  config.method = SpeculativeMethod::kNgram;
  EXPECT_EQ(config.max_batch(), 2);
  config.method = SpeculativeMethod::kDraft;
  EXPECT_EQ(config.max_batch(), 4);
  config.max_batch_seqs = 0;  // no limit
  EXPECT_EQ(config.max_batch(), 0);
  config.method = SpeculativeMethod::kNgram;
  config.max_batch_seqs = 7;
  EXPECT_EQ(config.max_batch(), 7);
}

// The executor's half: each row's slots are filled with the lookup in its context, and the
// row shrinks to what was found (a plain decode when nothing was); rows without slots are
// left alone; a context with an unknown token (the carry did not fill it) is refused.
TEST(NgramProposer, TheExecutorFillsEachRowsSlotsFromItsContext) {
  constexpr int32_t kSlot = kProposalSlotToken;
  const NgramProposer proposer(1, 3);
  auto slotted = [&](std::vector<int32_t> context, int num_slots) {
    ScheduledSequence row;
    row.new_token_ids = {context.back()};
    row.new_token_ids.insert(row.new_token_ids.end(), static_cast<size_t>(num_slots), kSlot);
    row.num_proposed_tokens = num_slots;
    row.proposal_context = std::move(context);
    return row;
  };
  std::vector<ScheduledSequence> rows = {
      slotted({7, 8, 9, 1, 2, 7, 8}, 4),  // "7 8" occurred before: 9 1 2 7 follow it
      slotted({5, 6, 3, 5}, 4),           // "5" occurred, followed by 6 3 5: three only
      slotted({1, 2, 3, 4}, 2),           // nothing repeats
  };
  ScheduledSequence plain;
  plain.new_token_ids = {4};
  rows.push_back(plain);
  EXPECT_TRUE(fill_ngram_proposals(proposer, rows));
  for (size_t i = 0; i < 3; ++i) {  // against the lookup itself, row by row
    const std::vector<int32_t> expected =
        proposer.propose(rows[i].proposal_context, i == 2 ? 2 : 4);
    EXPECT_EQ(rows[i].num_proposed_tokens, static_cast<int>(expected.size())) << i;
    EXPECT_EQ(std::vector<int32_t>(rows[i].new_token_ids.begin() + 1, rows[i].new_token_ids.end()),
              expected)
        << i;
  }
  EXPECT_EQ(rows[0].new_token_ids, (std::vector<int32_t>{8, 9, 1, 2, 7}));
  EXPECT_EQ(rows[1].new_token_ids, (std::vector<int32_t>{5, 6, 3, 5}));
  EXPECT_EQ(rows[2].new_token_ids, std::vector<int32_t>{4});
  EXPECT_EQ(rows[2].num_proposed_tokens, 0);
  EXPECT_EQ(rows[3].new_token_ids, std::vector<int32_t>{4});
  std::vector<ScheduledSequence> none = {plain};
  EXPECT_FALSE(fill_ngram_proposals(proposer, none));
  std::vector<ScheduledSequence> unknown = {slotted({1, 2, kPlaceholderToken}, 2)};
  EXPECT_THROW(fill_ngram_proposals(proposer, unknown), std::invalid_argument);
  std::vector<ScheduledSequence> empty = {slotted({3}, 2)};
  empty[0].proposal_context.clear();
  EXPECT_THROW(fill_ngram_proposals(proposer, empty), std::invalid_argument);
}

}  // namespace
}  // namespace pagedserve::actors
