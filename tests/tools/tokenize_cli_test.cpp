// `pagedserve tokenize` as a user runs it: ids of a text from a vocabulary-only GGUF file (a
// file, or a folder holding one) and from a Hugging Face folder, text from ids, --no-special,
// and exit codes for bad flags and paths. Expected ids come from Hugging Face's own output (the
// GGUF test vectors, golden.jsonl) plus the BOS id the tokenizer adds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "tests/test_paths.h"
#include "tests/tools/run_pagedserve.h"

namespace {

using pagedserve::testing::CommandResult;
using pagedserve::testing::run_pagedserve;
using pagedserve::testing::shared_dir;

std::filesystem::path llama_spm_gguf() {
  return shared_dir() / "tokenizers" / "gguf" / "ggml-vocab-llama-spm.gguf";
}

// The Hugging Face ids (no BOS) of `text` in a GGUF file's .inp/.out test vectors, as the
// JSON array text the command prints ("[1, 2]"), with `prefix` ids first.
std::string expected_ids(const std::filesystem::path& gguf, const std::string& text,
                         const std::string& prefix) {
  const auto read = [](const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string inputs = read(gguf.string() + ".inp");
  const std::string outputs = read(gguf.string() + ".out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  size_t line_start = 0;
  for (size_t pos = 0; pos < inputs.size();) {
    const size_t end = inputs.find(separator, pos);
    if (end == std::string::npos) break;
    const size_t line_end = outputs.find('\n', line_start);
    if (inputs.substr(pos, end - pos) == text) {
      std::string ids = prefix;
      std::istringstream numbers(outputs.substr(line_start, line_end - line_start));
      for (std::string id; numbers >> id;) ids += (ids.empty() ? "" : ", ") + id;
      return "[" + ids + "]\n";
    }
    pos = end + separator.size();
    line_start = line_end + 1;
  }
  ADD_FAILURE() << "no test vector \"" << text << "\" in " << gguf;
  return "";
}

TEST(TokenizeCli, TextToIdsFromVocabularyOnlyGguf) {
  const std::string model = " --model " + llama_spm_gguf().string();
  const std::string expected = expected_ids(llama_spm_gguf(), " Hello, world!", "1");
  ASSERT_NE(expected, "");
  const CommandResult with_bos = run_pagedserve("tokenize" + model + " --text ' Hello, world!'");
  ASSERT_EQ(with_bos.exit_code, 0) << with_bos.output;
  EXPECT_EQ(with_bos.output, expected);
  const CommandResult plain =
      run_pagedserve("tokenize" + model + " --text ' Hello, world!' --no-special");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output, expected_ids(llama_spm_gguf(), " Hello, world!", ""));
}

TEST(TokenizeCli, FolderHoldingOneGgufFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ps_tokenize_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(llama_spm_gguf(), dir / "model.gguf");
  const CommandResult r =
      run_pagedserve("tokenize --model " + dir.string() + " --text 'Hello world'");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, expected_ids(llama_spm_gguf(), "Hello world", "1"));
}

// golden.jsonl (Hugging Face): "Hello world" is [1, 15043, 3186], decoded "<s> Hello world".
TEST(TokenizeCli, IdsToText) {
  const std::string model = " --model " + llama_spm_gguf().string();
  const CommandResult all = run_pagedserve("tokenize" + model + " --ids 1,15043,3186");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_EQ(all.output, "<s> Hello world\n");
  const CommandResult plain =
      run_pagedserve("tokenize" + model + " --ids 1,15043,3186 --no-special");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output, "Hello world\n");
}

TEST(TokenizeCli, HuggingFaceFolder) {
  const std::string model = " --model " + pagedserve::testing::stories260k_dir().string();
  const CommandResult r = run_pagedserve("tokenize" + model + " --text 'Once upon a time'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "[1, 403, 407, 261, 378]\n");
  const CommandResult back = run_pagedserve("tokenize" + model + " --ids 403,407,261,378");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_EQ(back.output, "Once upon a time\n");
}

TEST(TokenizeCli, BadFlagsAndPaths) {
  const std::string model = " --model " + llama_spm_gguf().string();
  const CommandResult both = run_pagedserve("tokenize" + model + " --text a --ids 1");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("--text"), std::string::npos) << both.output;
  const CommandResult bad_id = run_pagedserve("tokenize" + model + " --ids 1,x");
  EXPECT_EQ(bad_id.exit_code, 2) << bad_id.output;
  EXPECT_NE(bad_id.output.find("'x'"), std::string::npos) << bad_id.output;
  const CommandResult out_of_range = run_pagedserve("tokenize" + model + " --ids 32000");
  EXPECT_EQ(out_of_range.exit_code, 2) << out_of_range.output;
  EXPECT_NE(out_of_range.output.find("32000"), std::string::npos) << out_of_range.output;
  const CommandResult missing = run_pagedserve("tokenize --model /nonexistent/x.gguf --text a");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/x.gguf"), std::string::npos) << missing.output;
  const CommandResult not_gguf =
      run_pagedserve("tokenize --model " + llama_spm_gguf().string() + ".inp --text a");
  EXPECT_EQ(not_gguf.exit_code, 1) << not_gguf.output;
  EXPECT_NE(not_gguf.output.find(".gguf.inp"), std::string::npos) << not_gguf.output;
}

}  // namespace
