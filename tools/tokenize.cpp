// `pagedserve tokenize`: encodes text to ids or decodes ids to text with a model's tokenizer,
// from a Hugging Face folder (tokenizer.json) or a GGUF file's metadata (vocabulary-only files
// included), to check what the server will see.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <memory>

#include "model/loader/model_error.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/cli_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kTokenizeHelp =
    "usage: pagedserve tokenize --model DIR|FILE.gguf (--text TEXT | --ids 1,2,3) [--no-special]\n"
    "  --model M     a Hugging Face folder (tokenizer.json), a GGUF file, or a folder holding\n"
    "                exactly one .gguf file and no tokenizer.json\n"
    "  --text T      print T's token ids as a JSON array on one line, with the special tokens\n"
    "                the tokenizer adds (e.g. BOS)\n"
    "  --ids LIST    comma-separated ids: print the text they decode to, then a newline;\n"
    "                special tokens are kept\n"
    "  --no-special  with --text: add no special tokens; with --ids: drop special tokens\n";

model::Tokenizer load_tokenizer(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw model::ModelError(path.string() + ": not found");
  return model::Tokenizer::from_model(path);
}

std::vector<int32_t> parse_ids(const std::string& text, const model::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    int32_t id = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || error != std::errc() || end != item.data() + item.size()) {
      throw UsageError("--ids: '" + item + "' is not an id (expected e.g. --ids 1,2,3)");
    }
    if (id < 0 || id >= tokenizer.vocab_size()) {
      throw UsageError("--ids: id " + item + " is outside the vocabulary of " +
                       std::to_string(tokenizer.vocab_size()) + " ids");
    }
    ids.push_back(id);
    pos = comma + 1;
  }
  return ids;
}

}  // namespace

int run_tokenize(const std::vector<std::string>& args) {
  const CliFlags flags(args, {"model", "text", "ids"}, {"no-special", "help"});
  if (flags.has("help")) {
    std::cout << kTokenizeHelp;
    return 0;
  }
  if (flags.has("text") == flags.has("ids")) throw UsageError("give one of --text and --ids");
  const std::string model_path = flags.require("model");
  const bool special = !flags.has("no-special");
  const model::Tokenizer tokenizer = load_tokenizer(model_path);
  if (flags.has("text")) {
    const std::vector<int32_t> ids = tokenizer.encode(flags.require("text"), special);
    std::cout << "[";
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? ", " : "") << ids[i];
    std::cout << "]\n";
  } else {
    const std::vector<int32_t> ids = parse_ids(flags.require("ids"), tokenizer);
    std::cout << tokenizer.decode(ids, /*skip_special_tokens=*/!special) << "\n";
  }
  return 0;
}

}  // namespace pagedserve::tools
