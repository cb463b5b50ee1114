// The paper's workloads: the ShareGPT / Alpaca / Azure selections against the CSVs parsed here
// and the numbers their READMEs publish, the synthesized requests (shared prefix only where
// asked), fixed-duration traces at a rate, and the translation and chatbot lengths of Figs.
// 16-17 against their definitions.
#include "tools/paper/workloads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_paths.h"

namespace pagedserve::paper {
namespace {

std::filesystem::path traces_root() { return testing::shared_dir() / "traces"; }

// A CSV's rows parsed here, independently of the trace readers: the header line skipped, each
// row "a,b" (Azure rows: the last two of three fields). Raw values: no clamping.
std::vector<LengthPair> raw_rows(const std::filesystem::path& path, bool azure) {
  std::ifstream in(path);
  std::vector<LengthPair> rows;
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    long long a = 0, b = 0;
    const char* text = line.c_str();
    if (azure) text = line.c_str() + line.find(',') + 1;
    if (std::sscanf(text, "%lld,%lld", &a, &b) != 2) {
      ADD_FAILURE() << "unreadable row: " << line;
      continue;
    }
    rows.push_back({a, b});
  }
  return rows;
}

std::vector<std::pair<int64_t, int64_t>> as_pairs(const std::vector<LengthPair>& lengths) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const LengthPair& p : lengths) out.emplace_back(p.input, p.output);
  return out;
}

#define SKIP_WITHOUT(path) \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << (path) << " not found"

TEST(PaperWorkload, NamesRoundTripAndUnknownNamesAreRejected) {
  for (PaperWorkload kind : {PaperWorkload::kShareGpt, PaperWorkload::kAlpaca,
                             PaperWorkload::kAzureConv, PaperWorkload::kAzureCode}) {
    const std::optional<PaperWorkload> parsed = parse_workload(workload_name(kind));
    ASSERT_TRUE(parsed.has_value()) << workload_name(kind);
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_STREQ(workload_name(PaperWorkload::kShareGpt), "sharegpt");
  EXPECT_STREQ(workload_name(PaperWorkload::kAlpaca), "alpaca");
  EXPECT_STREQ(workload_name(PaperWorkload::kAzureConv), "azure-conv");
  EXPECT_STREQ(workload_name(PaperWorkload::kAzureCode), "azure-code");
  for (const char* bad : {"", "ShareGPT", "sharegpt ", "azure", "azure_conv", "wmt16", "?"}) {
    EXPECT_FALSE(parse_workload(bad).has_value()) << "'" << bad << "'";
  }
}

// The paper's filter over the whole file, in file order, is exactly the rows with
// input + output <= 2048 (79,731 of them, as the README says).
TEST(SelectLengths, ShareGptAllUnshuffledIsTheFilteredFileInOrder) {
  const auto path = workload_file(PaperWorkload::kShareGpt, traces_root());
  SKIP_WITHOUT(path);
  std::vector<LengthPair> expected;
  for (const LengthPair& row : raw_rows(path, false)) {
    if (row.input + row.output <= 2048) expected.push_back(row);
  }
  ASSERT_EQ(expected.size(), 79731u);
  const std::vector<LengthPair> got =
      select_lengths(PaperWorkload::kShareGpt, traces_root(), -1, 2048, 7, /*shuffle=*/false);
  EXPECT_EQ(as_pairs(got), as_pairs(expected));
}

TEST(SelectLengths, ShareGptShuffledIsAPermutationOfTheFirstFilteredRows) {
  const auto path = workload_file(PaperWorkload::kShareGpt, traces_root());
  SKIP_WITHOUT(path);
  std::vector<std::pair<int64_t, int64_t>> first;
  for (const LengthPair& row : raw_rows(path, false)) {
    if (first.size() == 1000) break;
    if (row.input + row.output <= 2048) first.emplace_back(row.input, row.output);
  }
  ASSERT_EQ(first.size(), 1000u);
  const auto got = as_pairs(select_lengths(PaperWorkload::kShareGpt, traces_root(), 1000, 2048, 3));
  ASSERT_EQ(got.size(), 1000u);
  EXPECT_NE(got, first);  // shuffled: 1000 rows keep their order with probability 1 / 1000!
  auto sorted_got = got, sorted_first = first;
  std::sort(sorted_got.begin(), sorted_got.end());
  std::sort(sorted_first.begin(), sorted_first.end());
  EXPECT_EQ(sorted_got, sorted_first);
  // A smaller context filters more: every kept row fits it.
  for (const LengthPair& p : select_lengths(PaperWorkload::kShareGpt, traces_root(), 500, 512, 3)) {
    EXPECT_LE(p.input + p.output, 512);
  }
}

// Alpaca: all 5,000 rows fit 2048; the README's means (18.96 input, 58.55 output) hold for the
// raw file, and the selection keeps every row in order with empty answers (output 0) as 1.
TEST(SelectLengths, AlpacaKeepsAllRowsWithEmptyAnswersAsOneToken) {
  const auto path = workload_file(PaperWorkload::kAlpaca, traces_root());
  SKIP_WITHOUT(path);
  const std::vector<LengthPair> raw = raw_rows(path, false);
  ASSERT_EQ(raw.size(), 5000u);
  double input_sum = 0, output_sum = 0;
  int zero_outputs = 0;
  for (const LengthPair& row : raw) {
    input_sum += static_cast<double>(row.input);
    output_sum += static_cast<double>(row.output);
    zero_outputs += row.output == 0 ? 1 : 0;
  }
  EXPECT_NEAR(input_sum / 5000, 18.96, 0.005);
  EXPECT_NEAR(output_sum / 5000, 58.55, 0.005);
  EXPECT_GT(zero_outputs, 0);  // the case this test is about is in the file

  const std::vector<LengthPair> got =
      select_lengths(PaperWorkload::kAlpaca, traces_root(), -1, 2048, 1, /*shuffle=*/false);
  ASSERT_EQ(got.size(), 5000u);
  for (size_t i = 0; i < raw.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].input, raw[i].input);
    EXPECT_EQ(got[i].output, std::max<int64_t>(raw[i].output, 1));
  }
}

// The Azure traces are not filtered: the first rows in order, clipped to fit the context.
TEST(SelectLengths, AzureConvTakesTheFirstRowsClippedToTheContext) {
  const auto path = workload_file(PaperWorkload::kAzureConv, traces_root());
  SKIP_WITHOUT(path);
  const std::vector<LengthPair> raw = raw_rows(path, true);
  ASSERT_EQ(raw.size(), 19366u);
  constexpr int kContext = 1024;
  const std::vector<LengthPair> got =
      select_lengths(PaperWorkload::kAzureConv, traces_root(), 3000, kContext, 5);
  ASSERT_EQ(got.size(), 3000u);
  int clipped = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(got[i].input + got[i].output, kContext);
    EXPECT_GE(got[i].input, 1);
    EXPECT_GE(got[i].output, 1);
    if (raw[i].input + raw[i].output <= kContext) {
      EXPECT_EQ(got[i].input, raw[i].input);  // a row that fits is left alone, in its place
      EXPECT_EQ(got[i].output, raw[i].output);
    } else {
      ++clipped;
      EXPECT_LE(got[i].input, raw[i].input);
      EXPECT_LE(got[i].output, raw[i].output);
    }
  }
  EXPECT_GT(clipped, 100);  // the median prompt (1020) is about the context: many are clipped
  EXPECT_EQ(select_lengths(PaperWorkload::kAzureConv, traces_root(), -1, 1 << 20, 5).size(),
            19366u);
}

TEST(SelectLengths, ThrowsWhenTheFileIsMissing) {
  EXPECT_ANY_THROW(select_lengths(PaperWorkload::kShareGpt, "/nonexistent", 10, 2048, 0));
}

// Every prompt: the shared prefix, then its own input's ids. No two requests share the first
// block (16 ids) after the prefix, so a prefix cache shares exactly the given prefix.
TEST(MakeWorkload, PromptsShareOnlyTheGivenPrefix) {
  std::vector<LengthPair> lengths;
  for (int i = 0; i < 600; ++i) lengths.push_back({16 + (i * 37) % 90, (i * 13) % 50});
  for (int prefix : {0, 24, 64}) {
    SCOPED_TRACE(prefix);
    const Workload w = make_workload(lengths, prefix, 11, "test");
    ASSERT_EQ(w.requests.size(), lengths.size());
    const std::vector<int32_t>& first = w.requests[0].prompt_token_ids;
    std::set<std::vector<int32_t>> first_blocks;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const SimRequest& r = w.requests[i];
      ASSERT_EQ(r.prompt_token_ids.size(), static_cast<size_t>(prefix + lengths[i].input));
      EXPECT_EQ(r.output_len, std::max<int64_t>(lengths[i].output, 1));
      EXPECT_EQ(r.arrival_s, 0.0);
      EXPECT_EQ(r.n, 1);
      EXPECT_TRUE(std::equal(first.begin(), first.begin() + prefix, r.prompt_token_ids.begin()));
      first_blocks.emplace(r.prompt_token_ids.begin() + prefix,
                           r.prompt_token_ids.begin() + prefix + 16);
    }
    EXPECT_EQ(first_blocks.size(), lengths.size()) << "two requests share a block after the prefix";
  }
}

TEST(MakeWorkload, DescriptionHasTheCountAndMeans) {
  // Prefix 4: prompts 14 and 24 (mean 19), outputs 5 and max(0, 1) = 1 (mean 3).
  const Workload w = make_workload({{10, 5}, {20, 0}}, 4, 1, "hand");
  EXPECT_NE(w.description.find("hand (2 requests"), std::string::npos) << w.description;
  EXPECT_NE(w.description.find("mean prompt 19.00"), std::string::npos) << w.description;
  EXPECT_NE(w.description.find("mean output 3.00"), std::string::npos) << w.description;
}

std::vector<SimRequest> pool_of(const std::vector<std::pair<int, int>>& shapes) {
  std::vector<SimRequest> pool;
  for (auto [prompt, output] : shapes) {
    SimRequest r;
    r.prompt_token_ids.assign(prompt, 9);
    r.output_len = output;
    pool.push_back(r);
  }
  return pool;
}

std::multiset<std::pair<size_t, int>> shapes_of(const std::vector<SimRequest>& requests) {
  std::multiset<std::pair<size_t, int>> out;
  for (const SimRequest& r : requests) out.emplace(r.prompt_token_ids.size(), r.output_len);
  return out;
}

TEST(TraceAtRate, CountIsRateTimesDurationFromTheCycledPool) {
  const std::vector<SimRequest> pool =
      pool_of({{3, 1}, {5, 2}, {7, 3}, {11, 4}, {13, 5}, {17, 6}, {19, 7}});
  // {rate, duration, min_requests, N}: ceil(rate x duration), at least min_requests. 1.1 x 100
  // is 110.00000000000001 in doubles: still 110 requests.
  const struct {
    double rate, duration;
    int min_requests;
    size_t n;
  } cases[] = {{10, 123.4, 1, 1234}, {3, 0.5, 1, 2},     {0.5, 3, 50, 50}, {2.5, 4, 1, 10},
               {1, 5, 5, 5},         {1.1, 100, 1, 110}, {0.1, 1, 0, 1}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.rate << " x " << c.duration << " min " << c.min_requests);
    const std::vector<SimRequest> trace =
        trace_at_rate(pool, c.rate, c.duration, c.min_requests, 4);
    ASSERT_EQ(trace.size(), c.n);
    std::vector<SimRequest> cycled;
    for (size_t i = 0; i < c.n; ++i) cycled.push_back(pool[i % pool.size()]);
    EXPECT_EQ(shapes_of(trace), shapes_of(cycled));
    EXPECT_EQ(trace.front().arrival_s, 0.0);
    for (size_t i = 1; i < trace.size(); ++i) EXPECT_LE(trace[i - 1].arrival_s, trace[i].arrival_s);
  }
  EXPECT_TRUE(trace_at_rate({}, 10, 10, 5, 1).empty());
}

// Poisson arrivals: gaps exponential with mean 1 / rate. Over n - 1 = 19,999 gaps the mean's
// standard deviation is (1 / rate) / sqrt(n - 1) (0.7% of the mean) and the sample variance's,
// relative to 1 / rate^2, sqrt(8 / (n - 1)) (2%); 5 sigma of each.
TEST(TraceAtRate, ArrivalsArePoissonAtTheRate) {
  const std::vector<SimRequest> pool = pool_of({{2, 1}, {4, 2}, {6, 3}});
  constexpr double kRate = 50;
  const std::vector<SimRequest> trace = trace_at_rate(pool, kRate, 400, 1, 21);
  ASSERT_EQ(trace.size(), 20000u);
  const double gaps = static_cast<double>(trace.size() - 1);
  double sum = 0, sum_sq = 0;
  for (size_t i = 1; i < trace.size(); ++i) {
    const double gap = trace[i].arrival_s - trace[i - 1].arrival_s;
    ASSERT_GE(gap, 0.0);
    sum += gap;
    sum_sq += gap * gap;
  }
  const double mean = sum / gaps;
  const double variance = sum_sq / gaps - mean * mean;
  EXPECT_NEAR(mean * kRate, 1.0, 5.0 / std::sqrt(gaps));
  EXPECT_NEAR(variance * kRate * kRate, 1.0, 5.0 * std::sqrt(8.0 / gaps));
  // Shuffled: the trace is not the pool cycled in order.
  bool in_pool_order = true;
  for (size_t i = 0; i < trace.size() && in_pool_order; ++i) {
    in_pool_order = trace[i].output_len == pool[i % pool.size()].output_len;
  }
  EXPECT_FALSE(in_pool_order);
}

// Inputs log-normal (median 28, sigma 0.5) clipped to [4, 128]; outputs the input times a
// uniform 0.9-1.4, rounded. 10,000 draws: the sample median's standard deviation is about
// 0.2 tokens, the log's standard deviation's 0.004, the mean ratio's 0.0015.
TEST(TranslationLengths, FollowTheirDistribution) {
  EXPECT_TRUE(translation_lengths(0, 1).empty());
  const std::vector<LengthPair> lengths = translation_lengths(10000, 17);
  ASSERT_EQ(lengths.size(), 10000u);
  std::vector<int64_t> inputs;
  double log_sum = 0, log_sq = 0, ratio_sum = 0;
  for (const LengthPair& p : lengths) {
    ASSERT_GE(p.input, 4);
    ASSERT_LE(p.input, 128);
    const double in = static_cast<double>(p.input);
    ASSERT_GE(p.output, std::llround(0.9 * in)) << p.input;
    ASSERT_LE(p.output, std::llround(1.4 * in)) << p.input;
    inputs.push_back(p.input);
    log_sum += std::log(in);
    log_sq += std::log(in) * std::log(in);
    ratio_sum += static_cast<double>(p.output) / in;
  }
  std::nth_element(inputs.begin(), inputs.begin() + 5000, inputs.end());
  EXPECT_NEAR(static_cast<double>(inputs[5000]), 28.0, 1.0);
  const double log_mean = log_sum / 10000;
  EXPECT_NEAR(std::sqrt(log_sq / 10000 - log_mean * log_mean), 0.5, 0.03);
  EXPECT_NEAR(ratio_sum / 10000, 1.15, 0.01);
}

// Hand-built rounds (inputs 10..59, all below the history limit, so a conversation's first
// turn is the only request whose prompt equals its round's input): each prompt is the
// conversation so far (earlier inputs and capped outputs) plus its input, at most
// history_tokens; a new conversation starts from nothing; rounds are taken in order, cycling.
TEST(ChatbotLengths, PromptsAreTheConversationSoFarCappedAtTheHistory) {
  std::vector<LengthPair> rounds;
  for (int i = 0; i < 50; ++i) rounds.push_back({10 + i, 3 * i + 1});
  constexpr int kHistory = 200, kMaxOutput = 60, kNum = 130;
  const std::vector<LengthPair> got = chatbot_lengths(rounds, kNum, kHistory, kMaxOutput, 9);
  ASSERT_EQ(got.size(), static_cast<size_t>(kNum));
  int64_t history = 0;
  std::vector<int> turns;  // per conversation
  int clipped = 0, continued = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    const LengthPair& round = rounds[i % rounds.size()];
    if (got[i].input == round.input) {
      history = 0;
      turns.push_back(0);
    }
    ASSERT_FALSE(turns.empty()) << "the first request does not start a conversation";
    ++turns.back();
    const int64_t output = std::min<int64_t>(round.output, kMaxOutput);
    EXPECT_EQ(got[i].input, std::min<int64_t>(history + round.input, kHistory));
    EXPECT_EQ(got[i].output, output);
    clipped += history + round.input > kHistory ? 1 : 0;
    continued += history > 0 && history + round.input <= kHistory ? 1 : 0;
    history += round.input + output;
  }
  for (size_t c = 0; c < turns.size(); ++c) {
    EXPECT_GE(turns[c], 1);
    EXPECT_LE(turns[c], 8) << "conversation " << c;
  }
  // The case is not degenerate: several conversations, some with history below and some
  // above the limit.
  EXPECT_GT(turns.size(), 5u);
  EXPECT_GT(*std::max_element(turns.begin(), turns.end()), 2);
  EXPECT_GT(clipped, 0);
  EXPECT_GT(continued, 0);
  EXPECT_THROW(chatbot_lengths({}, 5, kHistory, kMaxOutput, 1), std::invalid_argument);
}

}  // namespace
}  // namespace pagedserve::paper
