// Added-token matching: leftmost-longest matches (as HF's Aho-Corasick), then the per-token
// whitespace rules widen or veto each match.
#include "model/tokenizer/added_vocabulary.h"

#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {
namespace {

// The code point that ends at `end` (text[..end]); `end` must be > 0.
char32_t char_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return unicode::decode_utf8(text, start).cp;
}

bool is_word_char(char32_t cp) { return cp == '_' || unicode::category(cp) != unicode::kOther; }

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (const char c : pattern) {
    const auto byte = static_cast<unsigned char>(c);
    int32_t child = -1;
    for (const auto& [b, n] : nodes[node].children) {
      if (b == byte) child = n;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(byte, child);
      nodes.emplace_back();
    }
    node = child;
  }
  // Two tokens with the same pattern: the first declared keeps it.
  if (nodes[node].token_index < 0) nodes[node].token_index = token_index;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_match(std::string_view text,
                                                                size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (const auto& [b, n] : nodes[node].children) {
      if (b == byte) child = n;
    }
    if (child < 0) break;
    node = child;
    if (nodes[node].token_index >= 0) best = {nodes[node].token_index, i + 1 - pos};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    if (token.normalized) {
      normalized_.insert(normalizer.normalize(token.content), static_cast<int32_t>(i));
    } else {
      raw_.insert(token.content, static_cast<int32_t>(i));
    }
  }
}

std::vector<TextSection> AddedVocabulary::split(std::string_view text, const Trie& trie) const {
  std::vector<TextSection> sections;
  if (trie.empty()) {
    if (!text.empty()) sections.push_back({std::nullopt, text});
    return sections;
  }
  size_t plain_start = 0;  // start of text not yet emitted
  for (size_t pos = 0; pos < text.size();) {
    const auto [index, length] = trie.longest_match(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos;
    size_t stop = pos + length;
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(char_before(text, start));
      const bool word_after =
          stop < text.size() && is_word_char(unicode::decode_utf8(text, stop).cp);
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (token.lstrip) {
      // Take the whitespace before the token, but never text an earlier match already took.
      while (start > plain_start && unicode::is_whitespace(char_before(text, start))) {
        size_t prev = start - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        const unicode::DecodedChar c = unicode::decode_utf8(text, stop);
        if (!unicode::is_whitespace(c.cp)) break;
        stop += c.num_bytes;
      }
    }
    if (start > plain_start) {
      sections.push_back({std::nullopt, text.substr(plain_start, start - plain_start)});
    }
    sections.push_back({token.id, text.substr(start, stop - start)});
    plain_start = pos = stop;
  }
  if (plain_start < text.size()) sections.push_back({std::nullopt, text.substr(plain_start)});
  return sections;
}

}  // namespace pagedserve::model::tokenizer
