// GrammarCache: compiled grammars of the served model, by GBNF text, shared by every request on
// every thread. A grammar compiled once keeps its cache of token masks (model/grammar/
// matcher.h), so the second request with the same schema starts warm. The vocabulary view is
// built on first use. Thread-safe; bounded (least recently used grammars are dropped, while the
// requests that hold them keep them alive).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "model/grammar/matcher.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::net {

class GrammarCache {
 public:
  static constexpr size_t kMaxGrammars = 64;

  // `tokenizer` outlives the cache; end_token_ids: the ids that end a sequence. Each grammar
  // compiled is prewarmed (CompiledGrammar::prewarm: the masks of the states its decoding can
  // reach, cached ahead of use) within `prewarm` on a background thread of lower priority
  // (nice 10), one grammar at a time, so the request that brought it waits for none of it;
  // max_states 0 turns that off.
  GrammarCache(const model::Tokenizer& tokenizer, std::vector<int32_t> end_token_ids,
               model::grammar::PrewarmLimits prewarm = {});
  ~GrammarCache();  // stops a prewarm under way and joins its thread
  GrammarCache(const GrammarCache&) = delete;
  GrammarCache& operator=(const GrammarCache&) = delete;

  // The grammar for GBNF `text` starting at rule `root`, compiled against the vocabulary.
  // Throws model::grammar::GrammarError for a grammar that does not parse.
  std::shared_ptr<const model::grammar::CompiledGrammar> get(const std::string& text,
                                                             const std::string& root = "root");

  std::shared_ptr<const model::grammar::TokenVocabulary> vocabulary();

  // Blocks until every grammar compiled so far is prewarmed (or dropped): benchmarks and tests.
  void wait_for_prewarm();

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const model::grammar::CompiledGrammar>>;

  void enqueue_prewarm(std::weak_ptr<const model::grammar::CompiledGrammar> compiled);
  void prewarm_loop();

  const model::Tokenizer& tokenizer_;
  const std::vector<int32_t> end_token_ids_;
  std::mutex mu_;
  std::shared_ptr<const model::grammar::TokenVocabulary> vocabulary_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_text_;

  // The prewarm thread and its queue (weak: a grammar dropped meanwhile is skipped).
  const model::grammar::PrewarmLimits prewarm_limits_;
  std::atomic<bool> stopping_{false};
  std::mutex prewarm_mu_;
  std::condition_variable prewarm_cv_;
  std::deque<std::weak_ptr<const model::grammar::CompiledGrammar>> prewarm_queue_;
  bool prewarm_busy_ = false;
  std::thread prewarm_thread_;  // started with the first grammar
};

// The matcher's view of a tokenizer: each id's bytes as it continues a text
// (Tokenizer::token_bytes_after_text), empty for special tokens, which a grammar never produces.
std::shared_ptr<const model::grammar::TokenVocabulary> vocabulary_of(
    const model::Tokenizer& tokenizer, std::vector<int32_t> end_token_ids);

}  // namespace pagedserve::net
