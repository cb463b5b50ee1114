// Tokenizer::from_gguf: builds the same Tokenizer::Impl that tokenizer.json gives, from a GGUF
// file's tokenizer.ggml.* metadata, following what llama.cpp (src/llama-vocab.cpp) makes of
// those keys:
//  - model "llama": SentencePiece BPE. GGUF keeps the pieces' scores instead of merges; the
//    merges are rebuilt as transformers' LlamaConverter does (every split of a piece into two
//    pieces, ranked by the merged piece's score, best first), so the highest-scoring pair
//    merges first, as llama.cpp's SPM tokenizer does. Byte fallback through <0xXX>, the "▁"
//    normalizer and decoder of Hugging Face's Llama 2 tokenizer.json.
//  - model "gpt2": byte-level BPE with "left right" merges and the pre-tokenizer that
//    tokenizer.ggml.pre names.
// Token types: control (3), user-defined (4) and unknown (2) tokens become added tokens, matched
// whole in the input; control and unknown ones are special.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/loader/gguf.h"
#include "model/loader/model_error.h"
#include "model/tokenizer/split_patterns.h"
#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model {
namespace {

using nlohmann::json;
using tokenizer::SplitPattern;

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTokenTypeKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";

// llama.cpp's llama_token_type numbering.
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

[[noreturn]] void fail(const GgufFile& file, std::string_view key, const std::string& problem) {
  throw ModelError(file.path().string() + ": metadata key " + std::string(key) + ": " + problem);
}

// The byte-level pre-tokenizers by tokenizer.ggml.pre name, as llama.cpp defines them: Split
// (Isolated) steps, then Digits, then ByteLevel (whose own GPT-2 regex is on or off).
enum class DigitsStep { kNone, kIndividual, kRuns };
struct PreTokenizerSpec {
  std::vector<std::string_view> names;
  std::vector<SplitPattern> splits;
  DigitsStep digits = DigitsStep::kNone;
  bool byte_level_regex = false;
  bool ignore_merges = false;   // a word that is a whole token is that token (Llama 3)
  bool add_bos = false;         // when tokenizer.ggml.add_bos_token is absent
  bool clean_up_spaces = true;  // llama.cpp's clean_spaces
};

const std::vector<PreTokenizerSpec>& pre_tokenizer_specs() {
  using enum SplitPattern;
  static const std::vector<PreTokenizerSpec> specs = {
      {{"default"},
       {kPunctuationAndSymbols, kGpt2, kNumbers, kThreeAsciiDigits},
       DigitsStep::kNone,
       false,
       false,
       false,
       true},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, {}, DigitsStep::kNone, true, false, false, true},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral"},
       {kLlama3},
       DigitsStep::kNone,
       false,
       true,
       true,
       true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}, DigitsStep::kNone, false, false, false, true},
      {{"qwen2", "deepseek-r1-qwen"}, {kQwen2}, DigitsStep::kNone, false, false, false, false},
      {{"stablelm2"}, {kQwen2}, DigitsStep::kNone, false, false, false, true},
      {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b"},
       {},
       DigitsStep::kIndividual,
       true,
       false,
       false,
       true},
      {{"smollm", "command-r"}, {}, DigitsStep::kIndividual, true, false, false, false},
      {{"deepseek-llm"},
       {kLineBreak, kDeepseekLlmLetters, kDeepseekLlmPunctuation, kTrailingWhitespace, kCjk},
       DigitsStep::kRuns,
       false,
       false,
       false,
       false},
      {{"deepseek-coder"},
       {kLineBreak, kDeepseekCoderLetters, kDeepseekCoderPunctuation, kCjk},
       DigitsStep::kIndividual,
       false,
       false,
       false,
       false},
  };
  return specs;
}

const PreTokenizerSpec& find_pre_tokenizer(const GgufFile& file, const std::string& name) {
  std::string supported;
  for (const PreTokenizerSpec& spec : pre_tokenizer_specs()) {
    for (const std::string_view known : spec.names) {
      if (known == name) return spec;
      supported += (supported.empty() ? "" : ", ") + std::string(known);
    }
  }
  fail(file, kPreKey, "unsupported pre-tokenizer \"" + name + "\" (supported: " + supported + ")");
}

json pre_tokenizer_config(const PreTokenizerSpec& spec) {
  json steps = json::array();
  for (const SplitPattern pattern : spec.splits) {
    steps.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", std::string(tokenizer::split_regex(pattern))}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
  }
  if (spec.digits != DigitsStep::kNone) {
    steps.push_back(
        {{"type", "Digits"}, {"individual_digits", spec.digits == DigitsStep::kIndividual}});
  }
  steps.push_back(
      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", spec.byte_level_regex}});
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

// transformers' SentencePieceExtractor: every split of a piece into two pieces is a merge, and
// merges are ordered by the merged piece's score (best first), then by piece id, then by the
// halves' ids.
std::vector<std::pair<std::string, std::string>> merges_from_scores(
    const std::vector<std::string>& tokens, const std::vector<float>& scores) {
  tokenizer::TokenIdMap ids;
  ids.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) ids.emplace(tokens[id], static_cast<int32_t>(id));
  struct Candidate {
    float score;
    int32_t merged;
    int32_t left;
    int32_t right;
    size_t split;  // byte offset of the split in the merged piece
  };
  std::vector<Candidate> candidates;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view piece = tokens[id];
    for (size_t split = 0; split < piece.size();) {
      split += tokenizer::unicode::decode_utf8(piece, split).num_bytes;
      if (split >= piece.size()) break;
      const auto left = ids.find(piece.substr(0, split));
      const auto right = ids.find(piece.substr(split));
      if (left == ids.end() || right == ids.end()) continue;
      candidates.push_back(
          {scores[id], static_cast<int32_t>(id), left->second, right->second, split});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.merged != b.merged) return a.merged < b.merged;
    return a.left != b.left ? a.left < b.left : a.right < b.right;
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    const std::string& piece = tokens[c.merged];
    merges.emplace_back(piece.substr(0, c.split), piece.substr(c.split));
  }
  return merges;
}

struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;  // one per token; all kNormal when the key is absent
};

GgufVocab read_vocab(const GgufFile& file) {
  GgufVocab vocab;
  auto tokens = file.get_string_array(kTokensKey);
  if (!tokens) fail(file, kTokensKey, "missing (the file has no tokenizer vocabulary)");
  if (tokens->empty()) fail(file, kTokensKey, "is empty");
  if (tokens->size() > static_cast<size_t>(INT32_MAX)) fail(file, kTokensKey, "too many tokens");
  vocab.tokens = std::move(*tokens);
  auto types = file.get_int_array(kTokenTypeKey);
  if (types && types->size() != vocab.tokens.size()) {
    fail(file, kTokenTypeKey,
         "has " + std::to_string(types->size()) + " entries for " +
             std::to_string(vocab.tokens.size()) + " tokens");
  }
  vocab.types = types ? std::move(*types) : std::vector<int64_t>(vocab.tokens.size(), kNormal);
  return vocab;
}

// A special-token id key: nullopt when absent or outside the vocabulary. Converters write
// 4294967295 (-1 as uint32) for "none", and llama.cpp ignores any out-of-range id (keeping its
// default), so such a value is not an error.
std::optional<int32_t> special_id(const GgufFile& file, const GgufVocab& vocab,
                                  std::string_view key) {
  const std::optional<int64_t> id = file.get_int(key);
  if (!id || *id < 0 || static_cast<uint64_t>(*id) >= vocab.tokens.size()) return std::nullopt;
  return static_cast<int32_t>(*id);
}

// SentencePiece BPE, as Hugging Face's converted Llama tokenizer.json.
void build_sentencepiece(const GgufFile& file, const GgufVocab& vocab,
                         std::optional<int32_t> unk_id, Tokenizer::Impl& impl) {
  auto scores = file.get_float_array(kScoresKey);
  if (!scores) fail(file, kScoresKey, "missing (a llama tokenizer needs the piece scores)");
  if (scores->size() != vocab.tokens.size()) {
    fail(file, kScoresKey,
         "has " + std::to_string(scores->size()) + " entries for " +
             std::to_string(vocab.tokens.size()) + " tokens");
  }
  tokenizer::BpeOptions options;
  if (unk_id) options.unk_token = vocab.tokens[*unk_id];
  options.byte_fallback = true;
  options.fuse_unk = true;
  impl.model = tokenizer::BpeModel::from_vocab(vocab.tokens,
                                               merges_from_scores(vocab.tokens, *scores), options);

  const bool add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  json normalizers = json::array();
  if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
  normalizers.push_back(
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
  impl.normalizer =
      tokenizer::Normalizer::from_json({{"type", "Sequence"}, {"normalizers", normalizers}});
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (add_space_prefix) {
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  impl.decoder = tokenizer::Decoder::from_json({{"type", "Sequence"}, {"decoders", decoders}});
  impl.clean_up_tokenization_spaces = false;
}

// Byte-level BPE (GPT-2 style). Returns the pre-tokenizer spec for its defaults.
const PreTokenizerSpec& build_byte_level(const GgufFile& file, const GgufVocab& vocab,
                                         Tokenizer::Impl& impl) {
  const PreTokenizerSpec& spec =
      find_pre_tokenizer(file, file.get_string(kPreKey).value_or("default"));
  const auto lines = file.get_string_array(kMergesKey);
  if (!lines) fail(file, kMergesKey, "missing (a gpt2 tokenizer needs its merges)");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(lines->size());
  for (const std::string& line : *lines) {
    // Split at the first space after the first byte, as llama.cpp does.
    const size_t space = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) fail(file, kMergesKey, "merge \"" + line + "\" has no space");
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  tokenizer::BpeOptions options;
  options.ignore_merges = spec.ignore_merges;
  impl.model = tokenizer::BpeModel::from_vocab(vocab.tokens, merges, options);
  impl.pre_tokenizer = tokenizer::PreTokenizer::from_json(pre_tokenizer_config(spec));
  impl.decoder = tokenizer::Decoder::from_json({{"type", "ByteLevel"}});
  impl.clean_up_tokenization_spaces = spec.clean_up_spaces;
  return spec;
}

void add_added_tokens(const GgufVocab& vocab, Tokenizer::Impl& impl) {
  std::vector<tokenizer::AddedToken> added;
  impl.is_special.assign(impl.id_to_token.size(), false);
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const int64_t type = vocab.types[id];
    if (type != kControl && type != kUserDefined && type != kUnknown) continue;
    if (vocab.tokens[id].empty()) continue;
    tokenizer::AddedToken token;
    token.content = vocab.tokens[id];
    token.id = static_cast<int32_t>(id);
    token.special = type != kUserDefined;
    token.normalized = false;  // matched in the raw text, as llama.cpp's special-token split
    impl.is_special[id] = token.special;
    impl.added_token_ids.emplace(token.content, token.id);
    added.push_back(std::move(token));
  }
  impl.added = tokenizer::AddedVocabulary(std::move(added), impl.normalizer);
}

void build(const GgufFile& file, Tokenizer::Impl& impl) {
  const std::optional<std::string> model = file.get_string(kModelKey);
  if (!model) fail(file, kModelKey, "missing (the file has no tokenizer)");
  const GgufVocab vocab = read_vocab(file);
  const bool sentencepiece = *model == "llama";
  if (!sentencepiece && *model != "gpt2") {
    fail(file, kModelKey,
         "unsupported tokenizer model \"" + *model + "\" (supported: llama, gpt2)");
  }
  // llama.cpp's defaults for SentencePiece vocabularies: <unk> 0, <s> 1, </s> 2.
  const auto default_id = [&](int32_t id) {
    return sentencepiece && static_cast<size_t>(id) < vocab.tokens.size() ? std::optional(id)
                                                                          : std::nullopt;
  };
  const auto unk_id = special_id(file, vocab, "tokenizer.ggml.unknown_token_id");
  impl.bos_token_id = special_id(file, vocab, "tokenizer.ggml.bos_token_id");
  impl.eos_token_id = special_id(file, vocab, "tokenizer.ggml.eos_token_id");
  if (!impl.bos_token_id) impl.bos_token_id = default_id(1);
  if (!impl.eos_token_id) impl.eos_token_id = default_id(2);

  bool add_bos_default = true;
  if (sentencepiece) {
    build_sentencepiece(file, vocab, unk_id ? unk_id : default_id(0), impl);
  } else {
    add_bos_default = build_byte_level(file, vocab, impl).add_bos;
  }
  impl.id_to_token = vocab.tokens;
  add_added_tokens(vocab, impl);

  const bool add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(add_bos_default);
  const bool add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (add_bos && impl.bos_token_id) impl.special_prefix_ids.assign(1, *impl.bos_token_id);
  if (add_eos && impl.eos_token_id) impl.special_suffix_ids.assign(1, *impl.eos_token_id);
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  auto impl = std::make_unique<Impl>();
  try {
    build(file, *impl);
  } catch (const ModelError& e) {
    const std::string what = e.what();
    if (what.starts_with(file.path().string())) throw;
    throw ModelError(file.path().string() + ": tokenizer: " + what);
  }
  return Tokenizer(std::move(impl));
}

}  // namespace pagedserve::model
