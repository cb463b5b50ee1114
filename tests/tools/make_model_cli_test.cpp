// `pagedserve make-model` as a user runs it: the model it writes runs under `generate`, the same
// flags give the same files, every family's GGUF generates what its Hugging Face folder does,
// and bad flags exit 2 naming the problem.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/tools/run_pagedserve.h"

namespace {

using pagedserve::testing::CommandResult;

CommandResult run(const std::string& args, bool keep_stderr_apart = false) {
  return pagedserve::testing::run_pagedserve(args, keep_stderr_apart);
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::filesystem::path temp_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("ps_make_model_cli_" + std::to_string(::getpid()) + "_" + name);
}

const std::string kSmallShape =
    " --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 1000 --context 512";

TEST(MakeModelCli, WrittenModelGeneratesAndSameFlagsGiveSameFiles) {
  const auto a = temp_dir("a");
  const auto b = temp_dir("b");
  for (const auto& dir : {a, b}) {
    const CommandResult r =
        run("make-model --out " + dir.string() + kSmallShape + " --dtype bf16 --seed 9");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
    EXPECT_EQ(read_bytes(a / file), read_bytes(b / file)) << file;
  }
  const CommandResult g = run("generate --model " + a.string() +
                              " --prompt 'hello there' --temperature 0 --max-tokens 5 --json");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const nlohmann::json out = nlohmann::json::parse(g.output);
  EXPECT_EQ(out["token_ids"].size(), 5u);
  for (const auto& id : out["token_ids"]) EXPECT_LT(id.get<int>(), 1000);
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

TEST(MakeModelCli, BadFlagsExitTwoNamingTheProblem) {
  const auto dir = temp_dir("bad");
  CommandResult r = run("make-model --out " + dir.string() + " --dtype f8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--dtype"), std::string::npos) << r.output;
  r = run("make-model --out " + dir.string() + " --heads 5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("multiple of heads"), std::string::npos) << r.output;
  r = run("make-model" + kSmallShape);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// Every family, both formats: `generate` on the GGUF file gives the greedy tokens it gives on
// the Hugging Face folder of the same flags (the GGUF's tokenizer and weights included).
TEST(MakeModelCli, EveryFamilyGeneratesTheSameTokensFromBothFormats) {
  const auto dir = temp_dir("families");
  for (const char* arch :
       {"llama", "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "smollm3"}) {
    SCOPED_TRACE(arch);
    const std::string flags = std::string(" --arch ") + arch + kSmallShape +
                              " --layers 6 --sliding-window 3 --norm-jitter 0.2 --seed 4";
    const std::string hf = (dir / arch).string(), gguf = (dir / arch).string() + ".gguf";
    ASSERT_EQ(run("make-model --out " + hf + flags).exit_code, 0);
    const CommandResult made = run("make-model --format gguf --out " + gguf + flags);
    ASSERT_EQ(made.exit_code, 0) << made.output;
    std::vector<nlohmann::json> token_ids;
    for (const std::string& model : {hf, gguf}) {
      const CommandResult g = run("generate --model " + model +
                                  " --prompt 'Once upon a time, 12 cats' --temperature 0 "
                                  "--max-tokens 8 --ignore-eos --json");
      ASSERT_EQ(g.exit_code, 0) << model << ": " << g.output;
      const nlohmann::json out = nlohmann::json::parse(g.output);
      token_ids.push_back({out["prompt_token_ids"], out["token_ids"]});
    }
    EXPECT_EQ(token_ids[0][1].size(), 8u);
    EXPECT_EQ(token_ids[0], token_ids[1]);
  }
  std::filesystem::remove_all(dir);
}

TEST(MakeModelCli, UnknownArchAndFormatExitTwoNamingTheChoices) {
  const auto dir = temp_dir("bad_arch");
  CommandResult r = run("make-model --out " + dir.string() + " --arch mamba");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("mamba"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("llama, llama3, mistral, qwen2, qwen3, phi3, gemma2, gemma3, smollm3"),
            std::string::npos)
      << r.output;
  r = run("make-model --out " + dir.string() + " --format onnx");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--format must be hf or gguf"), std::string::npos) << r.output;
  r = run("make-model --out " + dir.string() + " --arch qwen2 --hidden 64 --heads 4 --head-dim 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("head-dim"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace

namespace {

// `bench throughput --batch`: the per-phase report on a model make-model just wrote. Only the
// presence and consistency of the fields is checked; speed is for the benchmark itself.
TEST(BenchPhasesCli, ReportsPrefillDecodeAndRooflineFields) {
  const auto dir = temp_dir("bench");
  ASSERT_EQ(run("make-model --out " + dir.string() + kSmallShape + " --dtype f16").exit_code, 0);
  const CommandResult r =
      run("bench throughput --model " + dir.string() +
          " --batch 3 --prompt-tokens 20 --output-tokens 4 --threads 2 --bandwidth 50 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json out = nlohmann::json::parse(r.output);
  for (const char* key :
       {"prefill_tokens_per_s", "decode_tokens_per_s", "decode_step_ms", "bandwidth_gbps",
        "roofline_fraction", "peak_gflops", "prefill_peak_fraction", "bytes_per_decode_step"}) {
    ASSERT_TRUE(out.contains(key)) << key;
    EXPECT_GT(out[key].get<double>(), 0.0) << key;
  }
  EXPECT_EQ(out["bandwidth_gbps"].get<double>(), 50.0);
  EXPECT_EQ(out["batch"].get<int>(), 3);
  EXPECT_EQ(out["threads"].get<int>(), 2);
  // Bytes per step: the 16-bit matrices once, plus K/V of 3 sequences at ~22 tokens.
  const double weights = out["weight_bytes_per_step"].get<double>();
  EXPECT_GT(out["bytes_per_decode_step"].get<double>(), weights);
  // --kv-cache-dtype auto on a float16 model: a float16 KV cache, K/V counted at 2 bytes. With
  // a float32 cache the step reads, at the median step (position 20 + 4 / 2, so 23 tokens of
  // context), 3 sequences x K and V x 2 layers x 2 KV heads x 16 dims x 23 tokens x 2 more
  // bytes per element.
  EXPECT_EQ(out["kv_cache_dtype"].get<std::string>(), "float16");
  const CommandResult f32 =
      run("bench throughput --model " + dir.string() +
          " --batch 3 --prompt-tokens 20 --output-tokens 4 --threads 2 --bandwidth 50 --json"
          " --kv-cache-dtype float32");
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  const nlohmann::json out32 = nlohmann::json::parse(f32.output);
  EXPECT_EQ(out32["kv_cache_dtype"].get<std::string>(), "float32");
  EXPECT_EQ(
      out32["bytes_per_decode_step"].get<double>() - out["bytes_per_decode_step"].get<double>(),
      3.0 * 2 * 2 * 2 * 16 * 23 * 2);
  // int8: a byte per element plus a 4-byte scale per (token, head) row, so 16 x 2 - (16 + 4)
  // = 12 bytes less per row than float16.
  const CommandResult int8 =
      run("bench throughput --model " + dir.string() +
          " --batch 3 --prompt-tokens 20 --output-tokens 4 --threads 2 --bandwidth 50 --json"
          " --kv-cache-dtype int8");
  ASSERT_EQ(int8.exit_code, 0) << int8.output;
  const nlohmann::json out8 = nlohmann::json::parse(int8.output);
  EXPECT_EQ(out8["kv_cache_dtype"].get<std::string>(), "int8");
  EXPECT_EQ(
      out["bytes_per_decode_step"].get<double>() - out8["bytes_per_decode_step"].get<double>(),
      3.0 * 2 * 2 * 2 * 23 * 12);
  const CommandResult fp8 =
      run("bench throughput --model " + dir.string() +
          " --batch 1 --prompt-tokens 4 --output-tokens 2 --kv-cache-dtype fp8");
  EXPECT_EQ(fp8.exit_code, 1);
  EXPECT_NE(fp8.output.find("fp8 needs --device cuda"), std::string::npos) << fp8.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
