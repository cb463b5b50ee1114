// The BPE model: vocabulary, ranked merges, and the merge loop that turns one pre-tokenized
// word into ids (with byte fallback and unknown-token fusing as Hugging Face's BPE does).
// Immutable after construction; encode_word keeps all scratch state on the caller's stack.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pagedserve::model::tokenizer {

// Heterogeneous lookup so that string_view keys need no std::string copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Token ids a tokenizer.json may use: [0, kMaxTokenIds), as make-model's largest vocabulary.
// Tables are indexed by id, so an id beyond any real vocabulary is refused, not allocated.
inline constexpr int64_t kMaxTokenIds = int64_t{1} << 22;
// `id` as a token id; ModelError "<what> has id <id>, outside [0, 4194304)" when it is not an
// integer in range.
int32_t checked_token_id(const nlohmann::json& id, const std::string& what);

// What tokenizer.json's "model" object says beyond vocab and merges.
struct BpeOptions {
  std::optional<std::string> unk_token;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // `config` is tokenizer.json's "model" object. Throws ModelError (without a file name; the
  // caller adds it) for a non-BPE type or merges that name tokens missing from the vocab.
  static BpeModel from_json(const nlohmann::json& config);
  // From a vocabulary given by id (GGUF's token list; of duplicate strings the lowest id is the
  // one encoding produces) and merges in rank order, best first. Same errors as from_json.
  static BpeModel from_vocab(std::vector<std::string> id_to_token,
                             const std::vector<std::pair<std::string, std::string>>& merges,
                             const BpeOptions& options);

  // Appends the ids of `word` to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  // The word's characters as initial symbol ids (before any merge).
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void load_merges(const nlohmann::json& config);
  void set_options(const BpeOptions& options);
  void add_merge(std::string_view left, std::string_view right, int32_t rank);

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_fallback_ids_{};  // id of "<0xNN>", -1 when absent
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
};

}  // namespace pagedserve::model::tokenizer
