// Internals shared by matcher.cpp and token_mask.cpp: the vocabulary's sorted order, the
// compiled grammar with its mask cache, and a matcher's state.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "model/grammar/matcher.h"
#include "model/grammar/pushdown.h"

namespace pagedserve::model::grammar {

// The ids a grammar can allow by their bytes (not empty, not end tokens), sorted by bytes, so a
// depth-first walk shares the work of common prefixes.
struct TokenVocabulary::Trie {
  std::vector<int32_t> ids;       // sorted by bytes
  std::vector<uint32_t> offsets;  // bytes of ids[i]: data[offsets[i], offsets[i + 1])
  std::string data;               // all bytes, in sorted order
  std::vector<uint32_t> lcp;      // common prefix length of i with i - 1 (0 for i = 0)
  size_t max_length = 0;          // of the longest token
  std::vector<int32_t> end_ids;
  // String content (only in the whole vocabulary's trie): bit id set when token id is
  // detail::is_string_content, and the trie of every other token. A walk from a state that
  // returns to itself after any content character (inside a JSON string) takes the content
  // tokens as one bitmask and walks only `rest`.
  std::vector<uint32_t> content;  // bitmask_words(vocabulary size) words
  bool has_content = false;
  std::unique_ptr<Trie> rest;
};

// Masks cached by canonical state (StackSet flattened), least recently used dropped first once
// their bytes pass the budget. Thread-safe.
class MaskCache {
 public:
  using Key = std::vector<uint32_t>;
  using Mask = std::vector<uint32_t>;
  explicit MaskCache(size_t budget_bytes) : budget_bytes_(budget_bytes) {}

  // Copies the mask into `out` (and its max_cost, see compute_mask) and returns true on a hit.
  bool lookup(const Key& key, std::span<uint32_t> out, uint32_t* max_cost);
  void insert(const Key& key, const std::span<const uint32_t> mask, uint32_t max_cost);
  void clear();
  size_t size() const;
  size_t budget_bytes() const { return budget_bytes_; }

  struct KeyHash {
    size_t operator()(const Key& k) const noexcept;
  };

 private:
  struct Entry {
    Mask mask;
    uint32_t max_cost = 0;
    std::list<Key>::iterator lru;
  };
  mutable std::mutex mutex_;
  std::unordered_map<Key, Entry, KeyHash> entries_;
  std::list<Key> lru_;  // front: most recent
  size_t bytes_ = 0;
  size_t budget_bytes_;
};

namespace detail {

// Whether `bytes` is one or more whole UTF-8 characters (well-formed, no surrogates) each of
// which a JSON string holds unescaped: not '"', not '\\', no control character (< 0x20, 0x7f).
bool is_string_content(std::string_view bytes);

class LazyDfa;  // token_mask.cpp
struct LazyDfaDeleter {
  void operator()(LazyDfa* dfa) const;
};
using LazyDfaPtr = std::unique_ptr<LazyDfa, LazyDfaDeleter>;

// A compiled grammar's DFAs between mask walks (token_mask.cpp): a walk takes one (an idle one,
// or a new one) and gives it back, so walks on several threads never share one. Bounded: a
// DFA past kMaxKeptBytes is dropped, at most kMaxIdle are kept. Thread-safe.
class DfaPool {
 public:
  static constexpr size_t kMaxKeptBytes = 4u << 20;
  static constexpr size_t kMaxIdle = 4;
  LazyDfaPtr take(const Grammar& grammar);
  void give_back(LazyDfaPtr dfa);
  void clear();  // benchmarks: the next walk starts from no DFA at all

 private:
  std::mutex mutex_;
  std::vector<LazyDfaPtr> idle_;
};

}  // namespace detail

struct CompiledGrammar::Impl {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenVocabulary> vocab;
  mutable MaskCache cache{64u << 20};  // shared by every matcher of this grammar
  mutable detail::DfaPool dfas;        // likewise, the DFAs of the walks that fill it
  detail::StackSet start;              // the start state
  // Fewest bytes from each element position to the end of its alternative
  // (completion_cost.cpp): a state's shortest completion is its cheapest stack's sum.
  std::vector<uint32_t> min_rest;
  // prewarm() runs once: the first call holds the lock while it searches.
  mutable std::mutex prewarm_mutex;
  mutable std::optional<PrewarmStats> prewarmed;
};

struct GrammarMatcher::State {
  detail::StackSet stacks;
  bool terminated = false;
  size_t num_tokens = 0;
};

namespace detail {

// Canonical flat key of a state: for each stack its size then its positions.
MaskCache::Key state_key(const StackSet& stacks);
// The mask of `stacks` (not terminated) computed by walking the vocabulary: bits of tokens
// whose bytes the automaton accepts, plus the end tokens when a stack is complete. With a
// `budget`, only tokens after which the sentence can be completed in at most that many bytes
// (min_rest: CompiledGrammar::Impl). `max_cost` (may be null): the largest shortest-completion
// over the tokens allowed, so a cached mask tells whether a budget would change it. The walk
// uses one of the compiled grammar's DFAs (DfaPool), with the steps earlier walks built.
inline constexpr uint32_t kNoBudget = UINT32_MAX;
void compute_mask(const CompiledGrammar::Impl& impl, const StackSet& stacks,
                  std::span<uint32_t> mask, uint32_t budget = kNoBudget,
                  uint32_t* max_cost = nullptr);

// CompiledGrammar::prewarm's search (token_mask.cpp).
PrewarmStats prewarm_masks(const CompiledGrammar::Impl& impl, const PrewarmLimits& limits);

// Whether a walk from `stacks` takes the content tokens as one bitmask (LazyDfa::
// loops_on_content; for tests).
bool takes_content_as_bitmask(const CompiledGrammar::Impl& impl, const StackSet& stacks);

// completion_cost.cpp
std::vector<uint32_t> min_completion_table(const Grammar& grammar);
uint32_t stack_cost(const std::vector<uint32_t>& stack, const std::vector<uint32_t>& min_rest);

}  // namespace detail
}  // namespace pagedserve::model::grammar
