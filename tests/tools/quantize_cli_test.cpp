// `pagedserve quantize` and `make-model --quant` as a user runs them: a Q4_K_M model written by
// make-model generates, its bench line reports the quantized bytes and types, quantize reports
// what it wrote, and bad types exit 2 naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_paths.h"
#include "tests/tools/run_pagedserve.h"

namespace {

using pagedserve::testing::CommandResult;

CommandResult run(const std::string& args) { return pagedserve::testing::run_pagedserve(args); }

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("ps_quantize_cli_" + std::to_string(::getpid()) + "_" + name);
}

// Widths of 256 so every matrix takes its K type; of 4 layers, 2 and 3 get Q6_K v and down.
const std::string kShape =
    " --hidden 256 --layers 4 --heads 4 --kv-heads 2 --ffn 512 --vocab 1000 --context 256";

TEST(QuantizeCli, MakeModelQ4KMGeneratesAndBenchCountsQuantizedBytes) {
  const auto out = temp_file("q4km.gguf");
  const CommandResult made =
      run("make-model --format gguf --quant Q4_K_M --out " + out.string() + kShape);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_NE(made.output.find("Q4_K_M"), std::string::npos) << made.output;
  EXPECT_FALSE(std::filesystem::exists(out.string() + ".unquantized.tmp"));

  const CommandResult g = run("generate --model " + out.string() +
                              " --prompt 'hello there' --temperature 0 --max-tokens 5 --json");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(nlohmann::json::parse(g.output)["token_ids"].size(), 5u);

  const CommandResult b = run("bench throughput --model " + out.string() +
                              " --batch 1 --prompt-tokens 8 --output-tokens 2 --repeat 1"
                              " --bandwidth 10 --json");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const nlohmann::json bench = nlohmann::json::parse(b.output.substr(b.output.find('{')));
  EXPECT_EQ(bench["weights"], "layers Q4_K+Q6_K, LM head Q6_K");
  // Per layer: q, k, v, o 256-wide rows (q, o 256 rows; k, v 128), gate/up 2 x 512 rows,
  // down 256 rows of 512; plus the LM head 1000 x 256 in Q6_K. Q4_K: 144 bytes / 256 values,
  // Q6_K: 210. v and down are Q6_K in layers 2 and 3 (llama.cpp's "more bits" layers:
  // the last eighth, and every third from the first eighth on).
  const double q4 = 144.0 / 256, q6 = 210.0 / 256;
  double expected = 1000 * 256 * q6;
  for (int layer = 0; layer < 4; ++layer) {
    const double vdown = layer >= 2 ? q6 : q4;
    expected += (256 + 128 + 256) * 256 * q4 + 128 * 256 * vdown;  // q, k, o; v
    expected += 2 * 512 * 256 * q4 + 256 * 512 * vdown;            // gate, up; down
    expected += 2 * 256 * 4;                                       // two norms, float32
  }
  expected += 256 * 4;  // the final norm
  EXPECT_EQ(bench["weight_bytes_per_step"].get<double>(), expected);
  std::filesystem::remove(out);
}

TEST(QuantizeCli, QuantizeWritesTheTypeAndRefusesUnknownOnes) {
  const auto out = temp_file("stories-q8.gguf");
  const std::string in = (pagedserve::testing::shared_dir() / "models" / "stories260K.gguf");
  const CommandResult ok = run("quantize " + in + " " + out.string() + " --type q8_0");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("Q8_0"), std::string::npos) << ok.output;
  EXPECT_TRUE(std::filesystem::exists(out));

  const CommandResult bad = run("quantize " + in + " " + out.string() + " --type Q3_K_XS");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("Q3_K_XS"), std::string::npos) << bad.output;
  const CommandResult missing = run("quantize " + in + " --type Q8_0");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  const CommandResult again =
      run("quantize " + out.string() + " " + out.string() + ".2 --type Q4_0");
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("already Q8_0"), std::string::npos) << again.output;
  const CommandResult flag = run("generate --model " + in + " --quantization q2_xx --prompt hi");
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_NE(flag.output.find("q2_xx"), std::string::npos) << flag.output;
  std::filesystem::remove(out);
}

}  // namespace
