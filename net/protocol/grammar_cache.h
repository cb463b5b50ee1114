// GrammarCache: compiled grammars of the served model, by GBNF text, shared by every request on
// every thread. A grammar compiled once keeps its cache of token masks (model/grammar/
// matcher.h), so the second request with the same schema starts warm. The vocabulary view is
// built on first use. Thread-safe; bounded (least recently used grammars are dropped, while the
// requests that hold them keep them alive).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/grammar/matcher.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::net {

class GrammarCache {
 public:
  static constexpr size_t kMaxGrammars = 64;

  // `tokenizer` outlives the cache; end_token_ids: the ids that end a sequence.
  GrammarCache(const model::Tokenizer& tokenizer, std::vector<int32_t> end_token_ids);

  // The grammar for GBNF `text` starting at rule `root`, compiled against the vocabulary.
  // Throws model::grammar::GrammarError for a grammar that does not parse.
  std::shared_ptr<const model::grammar::CompiledGrammar> get(const std::string& text,
                                                             const std::string& root = "root");

  std::shared_ptr<const model::grammar::TokenVocabulary> vocabulary();

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const model::grammar::CompiledGrammar>>;

  const model::Tokenizer& tokenizer_;
  const std::vector<int32_t> end_token_ids_;
  std::mutex mu_;
  std::shared_ptr<const model::grammar::TokenVocabulary> vocabulary_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_text_;
};

// The matcher's view of a tokenizer: each id's bytes as it continues a text
// (Tokenizer::token_bytes_after_text), empty for special tokens, which a grammar never produces.
std::shared_ptr<const model::grammar::TokenVocabulary> vocabulary_of(
    const model::Tokenizer& tokenizer, std::vector<int32_t> end_token_ids);

}  // namespace pagedserve::net
