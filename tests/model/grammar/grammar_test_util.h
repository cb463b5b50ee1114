// Helpers of the grammar tests: whole-string matching through a fresh matcher over a tiny
// vocabulary (the matcher needs one; byte-level tests do not use it).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "model/grammar/grammar.h"
#include "model/grammar/matcher.h"

namespace pagedserve::model::grammar::testing {

inline std::shared_ptr<const TokenVocabulary> tiny_vocabulary() {
  static const auto vocab = std::make_shared<const TokenVocabulary>(
      std::vector<std::string>{"a", "b", ""}, std::vector<int32_t>{2});
  return vocab;
}

inline GrammarMatcher matcher_for(std::string_view gbnf) {
  return GrammarMatcher(CompiledGrammar::compile(parse_gbnf(gbnf), tiny_vocabulary()));
}

// True when `text` is a complete sentence of the grammar (accepted bytes, can end).
inline bool matches(const GrammarMatcher& start, std::string_view text) {
  GrammarMatcher m = start;
  return m.accept_bytes(text) && m.can_end();
}

// True when `text` is a prefix of some sentence.
inline bool is_prefix(const GrammarMatcher& start, std::string_view text) {
  GrammarMatcher m = start;
  return m.accept_bytes(text);
}

}  // namespace pagedserve::model::grammar::testing
