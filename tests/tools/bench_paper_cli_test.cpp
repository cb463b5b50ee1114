// `pagedserve bench paper --quick`: the whole simulated report on tiny workloads (a smoke test
// that every experiment runs and the report says it is simulated), and its flag errors; and
// `pagedserve bench admission` (both admission rules on the simulator).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdint>
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

std::filesystem::path write_profile(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "profile.json";
  std::ofstream(path) << R"({"name": "test profile", "step_overhead_s": 0.017,
    "per_batched_token_s": 0.00017, "per_kv_token_read_s": 5.3e-7, "swap_bytes_per_s": 25e9,
    "swap_per_block_s": 1.2e-4, "kv_bytes_per_token": 819200, "kv_cache_bytes": 12884901888,
    "max_model_len": 2048})";
  return path;
}

TEST(BenchPaperCli, QuickRunWritesTheSimulatedReport) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bench_paper_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path traces = pagedserve::testing::shared_dir() / "traces";
  const CommandResult r =
      run("bench paper --quick --profile " + write_profile(dir).string() + " --traces " +
          traces.string() + " --out " + (dir / "RESULTS.md").string() + " --result-json " +
          (dir / "results.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir / "RESULTS.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string md = text.str();
  EXPECT_NE(md.find("SIMULATED"), std::string::npos);
  for (const char* section :
       {"## Table 1", "#### sharegpt/profile", "#### alpaca/profile", "#### azure-conv/profile",
        "#### azure-code/profile", "| Orca (Max) |", "| FasterTransformer |"}) {
    EXPECT_NE(md.find(section), std::string::npos) << section;
  }
  for (const char* svg : {"fig_sharegpt_profile.svg", "fig_alpaca_profile.svg"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / "paper-figures" / svg)) << svg;
  }
  std::ifstream json_in(dir / "results.json");
  const nlohmann::json results = nlohmann::json::parse(json_in);
  EXPECT_TRUE(results["throughput"].contains("sharegpt/profile")) << results.dump();
  std::filesystem::remove_all(dir);
}

TEST(BenchPaperCli, MissingInputsAreNamed) {
  const std::filesystem::path traces = pagedserve::testing::shared_dir() / "traces";
  const CommandResult r =
      run("bench paper --quick --profile /nonexistent/profile.json --traces " + traces.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/nonexistent/profile.json"), std::string::npos) << r.output;
}

// `pagedserve bench admission`: one row per rule; the preemption column is the 5th cell.
int64_t preemptions_per_1000(const std::string& output, const std::string& rule) {
  const std::string row = "| all at once | " + rule + " | ";
  const size_t at = output.find(row);
  if (at == std::string::npos) return -1;
  std::stringstream cells(output.substr(at, output.find('\n', at) - at));
  std::string cell;
  for (int i = 0; i < 6; ++i) std::getline(cells, cell, '|');  // "", rate, rule, done, failed
  return std::stoll(cell);
}

TEST(BenchAdmissionCli, ComparesBothRulesOnTheSimulator) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bench_admission_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path traces = pagedserve::testing::shared_dir() / "traces";
  const CommandResult r =
      run("bench admission --trace conv --num-requests 100 --rate 0 --profile " +
          write_profile(dir).string() + " --traces " + traces.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Simulated"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| all at once | whole prompt | 100 | 0 |"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("| all at once | partial prompt | 100 | 0 |"), std::string::npos)
      << r.output;
  const int64_t whole = preemptions_per_1000(r.output, "whole prompt");
  const int64_t partial = preemptions_per_1000(r.output, "partial prompt");
  ASSERT_GE(whole, 0) << r.output;
  EXPECT_LT(whole, partial) << r.output;
  std::filesystem::remove_all(dir);
}

TEST(BenchAdmissionCli, BadFlagsAreNamed) {
  for (const char* args : {"--trace foo", "--rate -1", "--rate abc"}) {
    const CommandResult r = run(std::string("bench admission ") + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.output.find(std::string(args).substr(2, 5)), std::string::npos) << r.output;
  }
}

}  // namespace
