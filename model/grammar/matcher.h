// Token-level matching of a grammar: which tokens of the vocabulary may come next (a bitmask),
// and advancing on the token drawn. The design follows xgrammar: a byte-level pushdown
// automaton, the vocabulary sorted into a trie walked once per mask, and masks cached per
// automaton state and shared by every sequence of the same compiled grammar.
// Pure: no I/O; CompiledGrammar is thread-safe, a GrammarMatcher belongs to one sequence.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/grammar/grammar.h"

namespace pagedserve::model::grammar {

// The model's vocabulary as the matcher sees it: each id's bytes. Built once per model.
class TokenVocabulary {
 public:
  // token_bytes[id]: what the token decodes to on its own (Tokenizer::token_bytes). Empty:
  // never allowed by a grammar (special and control tokens). end_token_ids: allowed exactly
  // where the grammar may end (EOS and the model's other end-of-turn ids).
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> end_token_ids);
  ~TokenVocabulary();
  size_t size() const;  // number of ids
  const std::string& bytes(int32_t id) const;
  bool is_end_token(int32_t id) const;

  struct Trie;  // ids sorted by bytes, with shared-prefix lengths (matcher.cpp)
  const Trie& trie() const { return *trie_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_ids_;
  std::unique_ptr<Trie> trie_;
};

// How far CompiledGrammar::prewarm searches.
struct PrewarmLimits {
  size_t max_states = 1024;  // masks computed at most (and never past half the mask cache)
  double max_seconds = 2.0;
  const std::atomic<bool>* stop = nullptr;  // checked between states; may be null
};
struct PrewarmStats {
  size_t states = 0;      // masks computed and cached
  bool complete = false;  // every state reachable from the start was cached
  double seconds = 0.0;
};

// A grammar bound to a vocabulary, with the cache of masks shared by all its matchers.
class CompiledGrammar {
 public:
  static std::shared_ptr<const CompiledGrammar> compile(
      std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab);
  ~CompiledGrammar();
  const Grammar& grammar() const;
  const TokenVocabulary& vocabulary() const;

  // Caches the mask of every state reachable from the start by allowed tokens, breadth first,
  // within `limits`: what xgrammar precomputes when it compiles a grammar, so that decoding
  // finds its masks cached instead of walking the vocabulary on a state's first visit. Each
  // state's walk also yields the states its allowed tokens end in (the next to search). A
  // recursive grammar (nested JSON) has no end of states: the limits stop it. Runs once per
  // compiled grammar; later calls wait for the first and return its result. Thread-safe, and
  // matchers may run meanwhile (they compute what is not cached yet themselves).
  PrewarmStats prewarm(const PrewarmLimits& limits = {}) const;
  size_t cached_masks() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit CompiledGrammar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Words in a bitmask over `vocab_size` ids (bit id % 32 of word id / 32).
inline size_t bitmask_words(size_t vocab_size) { return (vocab_size + 31) / 32; }

// One sequence's position in the grammar. Copyable: a sequence forking (n > 1, beam search)
// copies its matcher.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> compiled);
  GrammarMatcher(const GrammarMatcher&);
  GrammarMatcher& operator=(const GrammarMatcher&);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
  ~GrammarMatcher();

  // Sets bit id of `bitmask` (bitmask_words(vocab) words; every word written) exactly when
  // token id may come next: its bytes continue a valid prefix of the grammar, or it is an end
  // token and the grammar can end here. After termination only nothing is allowed.
  void fill_next_token_bitmask(std::span<uint32_t> bitmask) const;
  // The same, keeping only tokens after which the sentence can still be completed in at most
  // `max_bytes_after` bytes (end tokens where can_end()): what finishes a structured output
  // within max_tokens, one byte per remaining token at worst (every byte has a token in
  // byte-level and byte-fallback vocabularies). Near the end of the budget only; when no token
  // fits, the plain mask (the output will be cut, but stays a prefix of the grammar).
  void fill_next_token_bitmask(std::span<uint32_t> bitmask, size_t max_bytes_after) const;
  // Fewest bytes that complete the sentence from here (0 once it can end).
  size_t min_completion_bytes() const;
  // Advances on the token drawn. False (state unchanged) when the token is not allowed.
  // An end token is accepted where can_end(), and terminates the matcher.
  bool accept_token(int32_t id);
  // Advances on raw bytes (tests, and text forced into the output). False: state unchanged.
  bool accept_bytes(std::string_view bytes);
  bool can_end() const;        // what was accepted is a complete sentence of the grammar
  bool is_terminated() const;  // an end token was accepted
  // can_end() and no byte may follow: the only way on is an end token.
  bool must_end() const;
  size_t num_tokens_accepted() const;

  struct State;

 private:
  std::shared_ptr<const CompiledGrammar> compiled_;
  std::unique_ptr<State> state_;
};

}  // namespace pagedserve::model::grammar
