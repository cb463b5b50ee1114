// Added tokens (tokenizer.json "added_tokens"): matched and split out of the text before the
// model runs, honouring lstrip / rstrip / single_word, in two passes as Hugging Face does:
// tokens with normalized=false against the raw text, then tokens with normalized=true (their
// content normalized too) against each normalized section.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagedserve::model::tokenizer {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// A piece of text: either an added token's id or plain text for the next stage.
struct TextSection {
  std::optional<int32_t> token_id;
  std::string_view text;  // the matched span (incl. stripped spaces) or the plain text
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer);

  // Splits `text` on the raw (normalized=false) tokens.
  std::vector<TextSection> split_raw(std::string_view text) const { return split(text, raw_); }
  // Splits already-normalized text on the normalized=true tokens.
  std::vector<TextSection> split_normalized(std::string_view text) const {
    return split(text, normalized_);
  }

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over the patterns of one pass; node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t token_index = -1;  // into tokens_, where a pattern ends here
    };
    std::vector<Node> nodes{Node{}};
    bool empty() const { return nodes.size() == 1; }
    void insert(std::string_view pattern, int32_t token_index);
    // The longest pattern starting at `pos`: (token index, length), or index -1.
    std::pair<int32_t, size_t> longest_match(std::string_view text, size_t pos) const;
  };
  std::vector<TextSection> split(std::string_view text, const Trie& trie) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
};

}  // namespace pagedserve::model::tokenizer
