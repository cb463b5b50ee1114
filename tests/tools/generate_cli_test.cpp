// `pagedserve generate` as a user runs it: the built binary, its JSON output, its exit codes
// and error messages for bad flags and bad model directories.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/test_paths.h"
#include "tests/tools/run_pagedserve.h"

namespace {

using pagedserve::testing::CommandResult;

CommandResult run(const std::string& args, bool keep_stderr_apart = false) {
  return pagedserve::testing::run_pagedserve(args, keep_stderr_apart);
}

std::string model_flag() { return "--model " + pagedserve::testing::stories260k_dir().string(); }

TEST(GenerateCli, JsonGreedyOutputForABatchOfPrompts) {
  const CommandResult r = run("generate " + model_flag() +
                              " --prompt 'Once upon a time' --prompt 'Lily and Tom' "
                              "--temperature 0 --max-tokens 20 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  std::vector<nlohmann::json> objects;
  while (std::getline(lines, line)) objects.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(objects.size(), 2u);
  EXPECT_EQ(objects[0]["prompt_token_ids"], nlohmann::json({1, 403, 407, 261, 378}));
  EXPECT_EQ(objects[0]["text"].get<std::string>().rfind(", there was a little girl named Lily.", 0),
            0u);
  EXPECT_EQ(objects[0]["token_ids"].size(), 20u);
  EXPECT_EQ(objects[0]["finish_reason"], "length");
  EXPECT_EQ(objects[1]["finish_reason"], "length");
}

TEST(GenerateCli, PrefixCacheHitInOneBatchReportsCachedTokensAndSameOutput) {
  const std::string prompt =
      "'Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball.'";
  const std::string common = "generate " + model_flag() + " --temperature 0 --max-tokens 24 --json";
  const CommandResult cached = run(common + " --prompt " + prompt + " --prompt " + prompt);
  const CommandResult uncached =
      run(common + " --no-prefix-caching --prompt " + prompt + " --prompt " + prompt);
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  ASSERT_EQ(uncached.exit_code, 0) << uncached.output;
  std::istringstream cached_lines(cached.output), uncached_lines(uncached.output);
  std::string line;
  std::vector<nlohmann::json> with, without;
  while (std::getline(cached_lines, line)) with.push_back(nlohmann::json::parse(line));
  while (std::getline(uncached_lines, line)) without.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(with.size(), 2u);
  ASSERT_EQ(without.size(), 2u);
  const size_t prompt_len = with[0]["prompt_token_ids"].size();
  ASSERT_GT(prompt_len, 32u);
  EXPECT_EQ(with[0]["num_cached_tokens"], 0);
  EXPECT_EQ(with[1]["num_cached_tokens"], (prompt_len - 1) / 16 * 16);
  EXPECT_EQ(without[1]["num_cached_tokens"], 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(with[i]["token_ids"], without[0]["token_ids"]) << "prompt " << i;
  }
}

TEST(GenerateCli, TextModeStreamsTheContinuation) {
  const CommandResult r = run("generate " + model_flag() +
                              " --prompt 'Once upon a time' --temperature 0 --max-tokens 12");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind(", there was a little girl named Lily.", 0), 0u) << r.output;
}

// With an int8 KV cache the greedy story is still the one stories260K tells.
TEST(GenerateCli, Int8KvCacheTellsTheSameStory) {
  const CommandResult r = run("generate " + model_flag() +
                              " --prompt 'Once upon a time' --temperature 0 --max-tokens 12"
                              " --kv-cache-dtype int8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind(", there was a little girl named Lily.", 0), 0u) << r.output;
}

TEST(GenerateCli, BadFlagsExitTwoNamingTheFlag) {
  CommandResult r = run("generate " + model_flag() + " --prompt hi --max-tokens nope");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--max-tokens"), std::string::npos) << r.output;
  r = run("generate " + model_flag() + " --prompt hi --top-p 7");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("top_p"), std::string::npos) << r.output;
  r = run("generate " + model_flag() + " --bogus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
  r = run("generate --prompt hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--model"), std::string::npos) << r.output;
}

TEST(GenerateCli, BadModelDirectoryExitsOneNamingTheFile) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pagedserve_cli_bad_model_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  CommandResult r = run("generate --model " + dir.string() + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;

  std::ofstream(dir / "config.json") << "{ not json";
  r = run("generate --model " + dir.string() + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST(BenchThroughputCli, ReportsEveryRequestsTokensAndPreemptionsUnderPressure) {
  const CommandResult r = run("bench throughput " + model_flag() +
                              " --num-requests 12 --prompt-tokens 40 --output-tokens 24"
                              " --num-kv-blocks 32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json out = nlohmann::json::parse(r.output);
  EXPECT_EQ(out["failed"], 0);
  EXPECT_EQ(out["generated_tokens"], 12 * 24);
  EXPECT_GT(out["output_tokens_per_s"].get<double>(), 0.0);
  EXPECT_LE(out["peak_kv_blocks_used"].get<int>(), 32);
  // 12 x 64 tokens need 48 blocks of 16: the pool of 32 forces preemption.
  EXPECT_GT(out["num_preemptions_recompute"].get<int>(), 0);
}

TEST(GenerateCli, PromptsFileRunsEachLineAndEndsWithASummary) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("pagedserve_prompts_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(path);
    out << R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})"
        << "\n"
        << R"({"prompt": ["Lily and Tom", "The cat"], "max_tokens": 8, "temperature": 0.8,)"
        << R"( "seed": 3, "n": 2})"
        << "\n"
        << R"({"prompt": "x", "max_tokens": -1})"
        << "\n"
        << R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0,)"
        << R"( "stop": ["little"]})"
        << "\n";
  }
  // 9 blocks of 4 tokens cannot hold everything at once: preemption must happen.
  const CommandResult r = run("generate " + model_flag() + " --prompts-file " + path.string() +
                                  " --json --block-size 4 --num-kv-blocks 9 --max-model-len 32",
                              /*keep_stderr_apart=*/true);
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 1) << "a refused line makes the exit code 1";
  std::istringstream lines(r.output);
  std::string line;
  std::vector<nlohmann::json> objects;
  while (std::getline(lines, line)) objects.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(objects.size(), 6u) << r.output;
  EXPECT_EQ(objects[0]["text"].get<std::string>().rfind(", there was a little girl", 0), 0u);
  EXPECT_EQ(objects[1]["outputs"].size(), 2u);
  EXPECT_EQ(objects[2]["outputs"][1]["token_ids"].size(), 8u);
  EXPECT_NE(objects[3]["error"].get<std::string>().find("max_tokens"), std::string::npos);
  EXPECT_EQ(objects[4]["text"], ", there was a ");
  EXPECT_EQ(objects[4]["finish_reason"], "stop");
  const nlohmann::json& summary = objects[5];
  EXPECT_EQ(summary["summary"], true);
  EXPECT_EQ(summary["num_requests"], 4);
  EXPECT_EQ(summary["num_refused"], 1);
  EXPECT_LE(summary["peak_kv_blocks_used"].get<int>(), 9);
  EXPECT_GT(summary["num_preemptions_recompute"].get<int>(), 0);
}
