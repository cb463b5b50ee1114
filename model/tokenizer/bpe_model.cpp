// BPE: loading vocab/merges and the O(n log n) merge loop (a min-heap of adjacent pairs over a
// doubly linked list of symbols), which keeps SentencePiece-style input, where the whole text
// is one word, fast.
#include "model/tokenizer/bpe_model.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "model/loader/model_error.h"
#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {

int32_t checked_token_id(const nlohmann::json& id, const std::string& what) {
  // Ids index dense tables (id -> token), so one absurd id would be an absurd allocation.
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenIds) {
    throw ModelError(what + " has id " + id.dump() + ", outside [0, " +
                     std::to_string(kMaxTokenIds) + ")");
  }
  return id.get<int32_t>();
}

BpeModel BpeModel::from_json(const nlohmann::json& config) {
  const std::string type = config.value("type", "BPE");
  if (type != "BPE") throw ModelError("unsupported tokenizer model type \"" + type + "\"");
  BpeModel model;
  const auto& vocab = config.at("vocab");
  model.vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    const int32_t id = checked_token_id(id_json, "vocab token \"" + token + "\"");
    model.vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  model.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : model.vocab_) model.id_to_token_[id] = token;

  const auto string_or_empty = [&](const char* key) {
    const auto it = config.find(key);
    return it == config.end() || it->is_null() ? std::string() : it->get<std::string>();
  };
  model.continuing_subword_prefix_ = string_or_empty("continuing_subword_prefix");
  model.end_of_word_suffix_ = string_or_empty("end_of_word_suffix");
  BpeOptions options;
  const std::string unk = string_or_empty("unk_token");
  if (!unk.empty()) options.unk_token = unk;
  options.byte_fallback = config.value("byte_fallback", false);
  options.fuse_unk = config.value("fuse_unk", false);
  options.ignore_merges = config.value("ignore_merges", false);
  model.set_options(options);
  model.load_merges(config);
  return model;
}

BpeModel BpeModel::from_vocab(std::vector<std::string> id_to_token,
                              const std::vector<std::pair<std::string, std::string>>& merges,
                              const BpeOptions& options) {
  BpeModel model;
  model.vocab_.reserve(id_to_token.size());
  for (size_t id = 0; id < id_to_token.size(); ++id) {
    model.vocab_.emplace(id_to_token[id], static_cast<int32_t>(id));  // the first id wins
  }
  model.id_to_token_ = std::move(id_to_token);
  model.set_options(options);
  model.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    model.add_merge(merges[rank].first, merges[rank].second, static_cast<int32_t>(rank));
  }
  return model;
}

void BpeModel::set_options(const BpeOptions& options) {
  if (options.unk_token) unk_id_ = token_to_id(*options.unk_token);
  byte_fallback_ = options.byte_fallback;
  fuse_unk_ = options.fuse_unk;
  ignore_merges_ = options.ignore_merges;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_fallback_ids_[b] = token_to_id(name).value_or(-1);
  }
}

void BpeModel::load_merges(const nlohmann::json& config) {
  const auto merges_it = config.find("merges");
  if (merges_it != config.end() && !merges_it->is_null()) {
    merges_.reserve(merges_it->size());
    int32_t rank = 0;
    for (const auto& merge : *merges_it) {
      if (merge.is_string()) {
        // The older "left right" form. A line with several spaces (Llama 2 has "   ", from
        // tokens that contain spaces) cannot be split unambiguously; HF's JS tokenizer turns
        // such lines into merges that never apply, so they are skipped, keeping their rank.
        const std::string& line = merge.get_ref<const std::string&>();
        const size_t space = line.find(' ');
        if (space == std::string::npos) throw ModelError("merge \"" + line + "\" has no space");
        if (line.find(' ', space + 1) != std::string::npos) {
          ++rank;
          continue;
        }
        add_merge(std::string_view(line).substr(0, space), std::string_view(line).substr(space + 1),
                  rank++);
      } else {
        if (!merge.is_array() || merge.size() != 2) {
          throw ModelError("merge " + merge.dump() + " is not a pair");
        }
        add_merge(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>(),
                  rank++);
      }
    }
  }
}

void BpeModel::add_merge(std::string_view left, std::string_view right, int32_t rank) {
  const auto left_id = token_to_id(left);
  const auto right_id = token_to_id(right);
  std::string merged(left);
  merged += right.starts_with(continuing_subword_prefix_)
                ? right.substr(continuing_subword_prefix_.size())
                : right;
  const auto merged_id = token_to_id(merged);
  if (!left_id || !right_id || !merged_id) {
    throw ModelError("merge \"" + std::string(left) + " " + std::string(right) +
                     "\" uses a token missing from the vocab");
  }
  // An earlier (better-ranked) duplicate wins.
  merges_.emplace(pair_key(*left_id, *right_id), Merge{rank, *merged_id});
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  std::optional<int32_t> pending_unk;  // an unknown run waiting to be emitted (fuse_unk)
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = unicode::decode_utf8(word, pos).num_bytes;
    piece.assign(word.substr(pos, len));
    if (pos > 0) piece.insert(0, continuing_subword_prefix_);
    if (pos + len == word.size()) piece += end_of_word_suffix_;
    const std::string_view bytes = word.substr(pos, len);
    pos += len;
    if (const auto id = token_to_id(piece)) {
      if (pending_unk) ids.push_back(*std::exchange(pending_unk, std::nullopt));
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes_known = true;
      for (const char b : bytes)
        all_bytes_known &= byte_fallback_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all_bytes_known) {
        if (pending_unk) ids.push_back(*std::exchange(pending_unk, std::nullopt));
        for (const char b : bytes) ids.push_back(byte_fallback_ids_[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    // Without an unk token HF fails the encode; dropping the character is the gentler choice.
    if (!unk_id_) continue;
    if (pending_unk && !fuse_unk_) ids.push_back(*pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk) ids.push_back(*pending_unk);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  // Symbols form a linked list; merging folds the right symbol into the left one.
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;  // the left symbol
    int32_t merged_id;
    // Lowest rank first, then leftmost, as HF breaks ties.
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push_pair = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    if (const Merge* m = find_merge(ids[left], ids[next[left]])) {
      queue.push({m->rank, left, m->merged_id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    // Stale entries: the left symbol was merged away, or its right neighbour changed.
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    const Merge* m = find_merge(ids[top.pos], ids[right]);
    if (m == nullptr || m->merged_id != top.merged_id || m->rank != top.rank) continue;
    ids[top.pos] = top.merged_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

}  // namespace pagedserve::model::tokenizer
