// Tokenizer::Impl: the loaded pipeline (normalizer -> added-token split -> pre-tokenizer ->
// BPE -> post-processor, and the decoder) plus what tokenizer_config.json adds. Built once by
// tokenizer_loader.cpp, then only read, so one instance serves many threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/decoder.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::model {

struct Tokenizer::Impl {
  tokenizer::BpeModel model;
  tokenizer::Normalizer normalizer;
  tokenizer::AddedVocabulary added;
  tokenizer::PreTokenizer pre_tokenizer;
  tokenizer::Decoder decoder;

  // What add_special_tokens=true wraps around the ids (TemplateProcessing's single template,
  // or add_bos_token / add_eos_token when there is no post-processor).
  std::vector<int32_t> special_prefix_ids;
  std::vector<int32_t> special_suffix_ids;

  // Model vocab overlaid with added tokens, indexed by id ("" for holes).
  std::vector<std::string> id_to_token;
  std::vector<bool> is_special;           // indexed by id
  tokenizer::TokenIdMap added_token_ids;  // added token content -> id
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;
  bool clean_up_tokenization_spaces = false;
};

namespace tokenizer {
// transformers' clean_up_tokenization: drops the space before punctuation and contractions.
std::string clean_up_tokenization(std::string text);
}  // namespace tokenizer

}  // namespace pagedserve::model
