// The load generator's pure parts: trace readers (Azure CSV, JSONL), bad-line handling,
// slicing, length limits, arrival schedules and request bodies.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_paths.h"
#include "tools/loadgen/request_body.h"
#include "tools/loadgen/schedule.h"
#include "tools/loadgen/trace.h"

namespace pagedserve::loadgen {
namespace {

TEST(AzureTimestamp, ParsesFractionAndDate) {
  const auto a = parse_azure_timestamp("2023-11-16 18:15:46.6805900");
  const auto b = parse_azure_timestamp("2023-11-16 18:15:50.9951690");
  ASSERT_TRUE(a && b);
  EXPECT_NEAR(*b - *a, 4.314579, 1e-6);
  EXPECT_DOUBLE_EQ(*parse_azure_timestamp("1970-01-02 00:00:01"), 86401.0);
  EXPECT_NEAR(*parse_azure_timestamp("2023-11-17 00:00:00.5") -
                  *parse_azure_timestamp("2023-11-16 23:59:59.5"),
              1.0, 1e-9);
  EXPECT_FALSE(parse_azure_timestamp("2023-11-16T18:15:46"));
  EXPECT_FALSE(parse_azure_timestamp("2023-11-16 18:15:46.x"));
  EXPECT_FALSE(parse_azure_timestamp("yesterday"));
}

const char* const kCsv =
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.5000000,374,44\n"
    "2023-11-16 18:15:47.0000000,abc,10\n"
    "2023-11-16 18:15:48.0000000,396,109\r\n"
    "garbage\n"
    "\n"
    "2023-11-16 18:15:49.2500000,10,0\n"
    "2023-11-16 18:15:50.0000000,20,3\n";

TEST(AzureCsv, ReadsRowsAndSkipsBadLinesWithTheirNumbers) {
  std::istringstream in(kCsv);
  const TraceReadResult r = read_azure_csv(in, BadLinePolicy::kSkip);
  ASSERT_EQ(r.requests.size(), 3u);
  EXPECT_EQ(r.requests[0].line_number, 2);
  EXPECT_DOUBLE_EQ(*r.requests[0].timestamp_s, 0.0);
  EXPECT_EQ(r.requests[0].prompt_tokens, 374);
  EXPECT_EQ(*r.requests[0].max_tokens, 44);
  EXPECT_NEAR(*r.requests[1].timestamp_s, 1.5, 1e-9);
  EXPECT_EQ(r.requests[2].line_number, 8);
  EXPECT_NEAR(*r.requests[2].timestamp_s, 3.5, 1e-9);
  ASSERT_EQ(r.bad_lines.size(), 3u);
  EXPECT_EQ(r.bad_lines[0].line_number, 3);
  EXPECT_NE(r.bad_lines[0].reason.find("ContextTokens 'abc'"), std::string::npos);
  EXPECT_EQ(r.bad_lines[1].line_number, 5);
  EXPECT_NE(r.bad_lines[1].reason.find("expected 3 fields"), std::string::npos);
  EXPECT_EQ(r.bad_lines[2].line_number, 7);
}

TEST(AzureCsv, FailPolicyThrowsNamingTheFirstBadLine) {
  std::istringstream in(kCsv);
  try {
    read_azure_csv(in, BadLinePolicy::kFail);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("line 3: ", 0), 0u) << e.what();
  }
}

TEST(AzureCsv, ReadsTheSharedConversationTrace) {
  const auto path = testing::shared_dir() / "traces/azure-2023/AzureLLMInferenceTrace_conv.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  const TraceReadResult r = read_trace_file(path.string(), BadLinePolicy::kFail);
  EXPECT_EQ(r.requests.size(), 19366u);
  EXPECT_EQ(r.requests[1].prompt_tokens, 396);
  EXPECT_NEAR(*r.requests[1].timestamp_s, 4.314579, 1e-6);
}

// Lines: 1 header, 2 good, 3 three fields, 4 input not a number, 5 input 0, 6 output not a
// number, 7 blank, 8 good with spaces, CR and output 0, 9 negative output, 10 one field,
// 11 input with trailing junk, 12 fractional input, 13 good.
const char* const kLengthsCsv =
    "input_len,output_len\n"
    "21,518\n"
    "8,66,3\n"
    "abc,10\n"
    "0,5\n"
    "12,x\n"
    "\n"
    " 30 , 0 \r\n"
    "7,-1\n"
    "5\n"
    "12abc,3\n"
    "1.5,3\n"
    "40,2\n";

TEST(LengthsCsv, ReadsRowsAndSkipsBadLinesWithTheirNumbers) {
  std::istringstream in(kLengthsCsv);
  const TraceReadResult r = read_lengths_csv(in, BadLinePolicy::kSkip);
  ASSERT_EQ(r.requests.size(), 3u);
  const int64_t want_line[] = {2, 8, 13};
  const int64_t want_input[] = {21, 30, 40};
  const int64_t want_output[] = {518, 1, 2};  // output 0 (an empty answer) becomes 1
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(r.requests[i].line_number, want_line[i]);
    EXPECT_EQ(r.requests[i].prompt_tokens, want_input[i]);
    ASSERT_TRUE(r.requests[i].max_tokens.has_value());
    EXPECT_EQ(*r.requests[i].max_tokens, want_output[i]);
    EXPECT_FALSE(r.requests[i].timestamp_s.has_value());  // no arrival times in these files
    EXPECT_TRUE(r.requests[i].prompt_token_ids.empty());
    EXPECT_FALSE(r.requests[i].prompt_text.has_value());
  }
  const std::vector<std::pair<int64_t, std::string>> want_bad = {
      {3, "2 fields"},   {4, "input_len"}, {5, "input_len"},  {6, "output_len"},
      {9, "output_len"}, {10, "2 fields"}, {11, "input_len"}, {12, "input_len"}};
  ASSERT_EQ(r.bad_lines.size(), want_bad.size());
  for (size_t i = 0; i < want_bad.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(r.bad_lines[i].line_number, want_bad[i].first);
    EXPECT_NE(r.bad_lines[i].reason.find(want_bad[i].second), std::string::npos)
        << r.bad_lines[i].reason;
  }
}

TEST(LengthsCsv, FailPolicyThrowsNamingTheFirstBadLine) {
  std::istringstream in(kLengthsCsv);
  try {
    read_lengths_csv(in, BadLinePolicy::kFail);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("line 3: ", 0), 0u) << e.what();
  }
  // The first bad line after good ones is named, not the first line of the file.
  std::istringstream zero_input("input_len,output_len\n5,5\n6,6\n0,4\n");
  try {
    read_lengths_csv(zero_input, BadLinePolicy::kFail);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("line 4: ", 0), 0u) << e.what();
  }
  // A clean file reads under kFail; the header is optional.
  std::istringstream clean("3,4\n5,0\n");
  const TraceReadResult r = read_lengths_csv(clean, BadLinePolicy::kFail);
  ASSERT_EQ(r.requests.size(), 2u);
  EXPECT_EQ(r.requests[0].line_number, 1);
  EXPECT_EQ(*r.requests[1].max_tokens, 1);
}

// A scratch file under the temp directory, removed at the end of the test.
class ScratchFile {
 public:
  ScratchFile(const std::string& name, const std::string& text)
      : path_(std::filesystem::temp_directory_path() /
              ("trace_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path_) << text;
  }
  ~ScratchFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(TraceFile, ChoosesTheReaderByExtensionAndHeader) {
  const ScratchFile lengths_file("lengths.csv", "input_len,output_len\n10,20\n30,0\n");
  TraceReadResult r = read_trace_file(lengths_file.path(), BadLinePolicy::kFail);
  ASSERT_EQ(r.requests.size(), 2u);
  EXPECT_EQ(r.requests[0].prompt_tokens, 10);
  EXPECT_EQ(*r.requests[0].max_tokens, 20);
  EXPECT_EQ(*r.requests[1].max_tokens, 1);
  EXPECT_FALSE(r.requests[0].timestamp_s.has_value());

  const ScratchFile azure_file("azure.csv",
                               "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:15:46.5000000,374,44\n"
                               "2023-11-16 18:15:48.0000000,396,109\n");
  r = read_trace_file(azure_file.path(), BadLinePolicy::kFail);
  ASSERT_EQ(r.requests.size(), 2u);
  EXPECT_EQ(r.requests[1].prompt_tokens, 396);
  ASSERT_TRUE(r.requests[1].timestamp_s.has_value());
  EXPECT_NEAR(*r.requests[1].timestamp_s, 1.5, 1e-9);

  // A .csv whose first line is not "input_len..." goes to the Azure reader, even when it
  // starts with an 'i': its complaint is the Azure one (3 fields, a TIMESTAMP).
  const ScratchFile other_file("other.csv", "index,ContextTokens,GeneratedTokens\n");
  r = read_trace_file(other_file.path(), BadLinePolicy::kSkip);
  EXPECT_TRUE(r.requests.empty());
  ASSERT_EQ(r.bad_lines.size(), 1u);
  EXPECT_EQ(r.bad_lines[0].line_number, 1);
  EXPECT_NE(r.bad_lines[0].reason.find("TIMESTAMP"), std::string::npos) << r.bad_lines[0].reason;

  // Not .csv: JSONL, where a lengths row is not a JSON object.
  const ScratchFile jsonl_file("lengths.txt", "input_len,output_len\n10,20\n");
  r = read_trace_file(jsonl_file.path(), BadLinePolicy::kSkip);
  EXPECT_TRUE(r.requests.empty());
  EXPECT_EQ(r.bad_lines.size(), 2u);

  EXPECT_THROW(read_trace_file("/nonexistent/lengths.csv", BadLinePolicy::kSkip), TraceError);
}

// The ShareGPT lengths of the PagedAttention paper against the numbers its README publishes:
// 84,226 rows; with the paper's filter (input + output <= 2048) 79,731 rows whose means are
// the paper's Table 1 figures, 161.31 input and 337.99 output tokens.
TEST(LengthsCsv, ReadsTheSharedShareGptLengthsWithThePapersMeans) {
  const auto path = testing::shared_dir() / "traces/sharegpt-lengths/sharegpt_opt_lengths.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  const TraceReadResult r = read_trace_file(path.string(), BadLinePolicy::kFail);
  ASSERT_EQ(r.requests.size(), 84226u);
  EXPECT_TRUE(r.bad_lines.empty());
  EXPECT_EQ(r.requests.front().line_number, 2);  // after the header
  EXPECT_EQ(r.requests.front().prompt_tokens, 21);
  EXPECT_EQ(*r.requests.front().max_tokens, 518);
  int64_t kept = 0, max_input = 0, max_output = 0;
  double input_sum = 0, output_sum = 0, all_input_sum = 0, all_output_sum = 0;
  for (const TraceRequest& t : r.requests) {
    ASSERT_TRUE(t.max_tokens.has_value());
    all_input_sum += static_cast<double>(t.prompt_tokens);
    all_output_sum += static_cast<double>(*t.max_tokens);
    max_input = std::max(max_input, t.prompt_tokens);
    max_output = std::max(max_output, *t.max_tokens);
    if (t.prompt_tokens + *t.max_tokens > 2048) continue;
    ++kept;
    input_sum += static_cast<double>(t.prompt_tokens);
    output_sum += static_cast<double>(*t.max_tokens);
  }
  EXPECT_EQ(kept, 79731);
  EXPECT_NEAR(input_sum / static_cast<double>(kept), 161.31, 0.005);
  EXPECT_NEAR(output_sum / static_cast<double>(kept), 337.99, 0.005);
  // The README's unfiltered row: means 295.6 / 358.0, max 162,307 / 33,344.
  EXPECT_NEAR(all_input_sum / 84226.0, 295.6, 0.05);
  EXPECT_NEAR(all_output_sum / 84226.0, 358.0, 0.05);
  EXPECT_EQ(max_input, 162307);
  EXPECT_EQ(max_output, 33344);
}

TEST(Jsonl, ReadsEveryPromptFormAndPassesSamplingFieldsThrough) {
  std::istringstream in(
      R"({"timestamp": 0.5, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})"
      "\n"
      R"({"prompt_token_ids": [5, 6, 7], "n": 2})"
      "\n\n"
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})"
      "\n"
      R"({"prompt": [9, 10]})"
      "\n");
  const TraceReadResult r = read_jsonl(in, BadLinePolicy::kFail);
  ASSERT_EQ(r.requests.size(), 4u);
  EXPECT_EQ(*r.requests[0].prompt_text, "Once upon a time");
  EXPECT_DOUBLE_EQ(*r.requests[0].timestamp_s, 0.5);
  EXPECT_EQ(r.requests[0].extra["temperature"], 0);
  EXPECT_EQ(r.requests[1].prompt_token_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(r.requests[1].prompt_tokens, 3);
  EXPECT_EQ(r.requests[1].extra["n"], 2);
  EXPECT_FALSE(r.requests[1].timestamp_s);
  EXPECT_TRUE(r.requests[2].messages);
  EXPECT_EQ(r.requests[2].line_number, 4);
  EXPECT_EQ(r.requests[3].prompt_tokens, 2);
}

TEST(Jsonl, BadLinesAreReportedWithLineNumbers) {
  std::istringstream in(
      "{\"prompt\": \"a\"}\n"
      "{not json\n"
      "{\"max_tokens\": 3}\n"
      "{\"prompt\": \"a\", \"max_tokens\": 0}\n"
      "[1, 2]\n");
  const TraceReadResult r = read_jsonl(in, BadLinePolicy::kSkip);
  EXPECT_EQ(r.requests.size(), 1u);
  ASSERT_EQ(r.bad_lines.size(), 4u);
  EXPECT_EQ(r.bad_lines[0].line_number, 2);
  EXPECT_NE(r.bad_lines[0].reason.find("invalid JSON"), std::string::npos);
  EXPECT_NE(r.bad_lines[1].reason.find("exactly one of"), std::string::npos);
  EXPECT_NE(r.bad_lines[2].reason.find("max_tokens"), std::string::npos);
  EXPECT_EQ(r.bad_lines[3].line_number, 5);
}

std::vector<TraceRequest> lengths(std::vector<std::pair<int64_t, int64_t>> pairs) {
  std::vector<TraceRequest> out;
  for (auto [prompt, output] : pairs) {
    TraceRequest r;
    r.prompt_tokens = prompt;
    r.max_tokens = output;
    out.push_back(r);
  }
  return out;
}

TEST(Lengths, SliceClipAndScale) {
  auto trace = lengths({{100, 10}, {400, 40}, {1000, 100}, {50, 1}});
  EXPECT_EQ(slice(trace, 1, 2).size(), 2u);
  EXPECT_EQ(slice(trace, 1, 2)[0].prompt_tokens, 400);
  EXPECT_EQ(slice(trace, 3, -1).size(), 1u);
  EXPECT_TRUE(slice(trace, 9, 5).empty());

  auto clipped = trace;
  EXPECT_EQ(apply_length_limits(clipped, {200, 20, LengthMode::kClip}), 2);
  EXPECT_EQ(clipped[0].prompt_tokens, 100);
  EXPECT_EQ(clipped[1].prompt_tokens, 200);
  EXPECT_EQ(*clipped[2].max_tokens, 20);

  auto scaled = trace;
  EXPECT_EQ(apply_length_limits(scaled, {200, 20, LengthMode::kScale}), 4);
  EXPECT_EQ(scaled[0].prompt_tokens, 20);
  EXPECT_EQ(scaled[2].prompt_tokens, 200);
  EXPECT_EQ(*scaled[1].max_tokens, 8);
  EXPECT_EQ(*scaled[3].max_tokens, 1);  // never below 1
  EXPECT_EQ(scaled[3].prompt_tokens, 10);
}

TEST(Lengths, FitToContextClipsOutputThenPrompt) {
  auto trace = lengths({{100, 10}, {500, 20}, {30, 2000}});
  EXPECT_EQ(fit_to_context(trace, 12, 512), 2);
  EXPECT_EQ(trace[0].prompt_tokens, 100);
  EXPECT_EQ(trace[1].prompt_tokens, 480);
  EXPECT_EQ(*trace[1].max_tokens, 20);
  EXPECT_EQ(*trace[2].max_tokens, 250);
  EXPECT_EQ(trace[2].prompt_tokens, 30);
}

// A lengths file may name any length up to INT64_MAX; fitting it must not overflow (prompt +
// output was signed overflow, UBSan, found by tests/fuzz/trace_fuzz.cpp) and still clips.
TEST(Lengths, FitToContextTakesLengthsUpToInt64Max) {
  std::istringstream in("input_len,output_len\n9223372036854775807,5\n7,9223372036854775807\n");
  TraceReadResult read = read_lengths_csv(in, BadLinePolicy::kFail);
  ASSERT_EQ(read.requests.size(), 2u);
  EXPECT_EQ(fit_to_context(read.requests, 0, 512), 2);
  EXPECT_EQ(read.requests[0].prompt_tokens, 507);  // room 512 - output 5
  EXPECT_EQ(*read.requests[0].max_tokens, 5);
  EXPECT_EQ(*read.requests[1].max_tokens, 256);  // output first: half the room
  EXPECT_EQ(read.requests[1].prompt_tokens, 7);
}

TEST(Schedule, ReplayDividesByTheTimeScale) {
  const auto a = replay_arrivals({10.0, 11.0, 15.0, 14.0}, 10.0);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_DOUBLE_EQ(a[0], 0.0);
  EXPECT_DOUBLE_EQ(a[1], 0.1);
  EXPECT_DOUBLE_EQ(a[2], 0.5);
  EXPECT_DOUBLE_EQ(a[3], 0.5);  // out-of-order rows never go back in time
}

TEST(Schedule, PoissonAndGammaGapsHaveTheRateAsMean) {
  for (const double burstiness : {1.0, 0.5, 4.0}) {
    const auto a = rate_arrivals(20001, 50.0, burstiness, 7);
    EXPECT_NEAR(a.back() / 20000, 1.0 / 50.0, 0.05 / 50.0) << burstiness;
    std::vector<double> gaps;
    double sq = 0;
    for (size_t i = 1; i < a.size(); ++i) sq += std::pow(a[i] - a[i - 1], 2);
    const double mean = a.back() / 20000;
    const double cv2 = (sq / 20000 - mean * mean) / (mean * mean);
    EXPECT_NEAR(cv2, 1.0 / burstiness, 0.1 / burstiness) << burstiness;  // gamma: CV^2 = 1/k
  }
  EXPECT_EQ(rate_arrivals(5, 2.0, 1.0, 3), rate_arrivals(5, 2.0, 1.0, 3));
  EXPECT_EQ(rate_arrivals(3, parse_rate("inf"), 1.0, 0), (std::vector<double>{0, 0, 0}));
  EXPECT_THROW(parse_rate("0"), std::invalid_argument);
  EXPECT_THROW(parse_rate("fast"), std::invalid_argument);
}

TEST(RequestBody, SynthesisedPromptsShareThePrefixAndForceTheOutput) {
  auto trace = lengths({{5, 3}, {7, 4}});
  PromptOptions options;
  options.model = "m";
  options.shared_prefix_tokens = 4;
  options.vocab_size = 10;
  const auto requests = build_requests(trace, options);
  ASSERT_EQ(requests.size(), 2u);
  const auto p0 = requests[0].payload["prompt"].get<std::vector<int32_t>>();
  const auto p1 = requests[1].payload["prompt"].get<std::vector<int32_t>>();
  ASSERT_EQ(p0.size(), 9u);
  ASSERT_EQ(p1.size(), 11u);
  EXPECT_TRUE(std::equal(p0.begin(), p0.begin() + 4, p1.begin()));
  for (const int32_t id : p1) EXPECT_TRUE(id >= kFirstOrdinaryId && id < 10) << id;
  EXPECT_EQ(requests[1].prompt_tokens, 11);
  EXPECT_EQ(requests[1].payload["max_tokens"], 4);
  EXPECT_EQ(requests[1].payload["ignore_eos"], true);
  EXPECT_EQ(requests[0].payload["model"], "m");
  const auto body = nlohmann::json::parse(http_body(requests[0]));
  EXPECT_EQ(body["stream"], true);

  options.vocab_size = 0;
  options.token_pool = {42, 43};
  const auto pooled = build_requests(trace, options);  // kept alive for the loop
  for (const int32_t id : pooled[0].payload["prompt"]) {
    EXPECT_TRUE(id == 42 || id == 43);
  }
  options.token_pool.clear();
  EXPECT_THROW(build_requests(trace, options), std::invalid_argument);
}

TEST(Sse, SplitsEventsAcrossArbitraryChunkBoundaries) {
  const std::string stream =
      "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n: comment\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n";
  for (size_t step : {1u, 3u, 1000u}) {
    SseSplitter splitter;
    std::vector<std::string> events;
    for (size_t i = 0; i < stream.size(); i += step) {
      for (auto& e : splitter.feed(stream.data() + i, std::min(step, stream.size() - i))) {
        events.push_back(e);
      }
    }
    ASSERT_EQ(events.size(), 3u) << step;
    EXPECT_TRUE(read_sse_chunk(events[0]).has_output);
    EXPECT_TRUE(read_sse_chunk(events[1]).has_output);
    EXPECT_TRUE(read_sse_chunk(events[2]).done);
  }
  const ChunkInfo usage =
      read_sse_chunk(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}})");
  EXPECT_FALSE(usage.has_output);
  EXPECT_EQ(*usage.usage_completion_tokens, 9);
  EXPECT_FALSE(read_sse_chunk(R"({"choices":[{"delta":{"role":"assistant"}}]})").has_output);
  EXPECT_EQ(*read_sse_chunk(R"({"error":{"message":"boom"}})").error, "boom");
}

TEST(WsFrame, ReadsTokenDoneAndError) {
  const ChunkInfo token =
      read_ws_frame(R"({"type":"token","id":"7","index":0,"token_ids":[1,2],"text":"x"})");
  EXPECT_EQ(token.ws_id, "7");
  EXPECT_EQ(token.output_tokens, 2);
  EXPECT_TRUE(token.has_output);
  const ChunkInfo done =
      read_ws_frame(R"({"type":"done","id":"7","index":0,"usage":{"completion_tokens":4}})");
  EXPECT_TRUE(done.done);
  EXPECT_EQ(*done.usage_completion_tokens, 4);
  EXPECT_EQ(*read_ws_frame(R"({"type":"error","id":"7","error":{"message":"no"}})").error, "no");
}

}  // namespace
}  // namespace pagedserve::loadgen
