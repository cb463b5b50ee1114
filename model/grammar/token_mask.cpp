// Token masks: a depth-first walk of the sorted vocabulary that advances the automaton one byte
// per level and skips every token under a rejected prefix; and the per-grammar cache of masks.
#include <algorithm>

#include "model/grammar/matcher_impl.h"

namespace pagedserve::model::grammar {

// ---- MaskCache ----

size_t MaskCache::KeyHash::operator()(const Key& k) const noexcept {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the words
  for (uint32_t w : k) h = (h ^ w) * 0x100000001b3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

bool MaskCache::lookup(const Key& key, std::span<uint32_t> out) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  std::copy(it->second.mask.begin(), it->second.mask.end(), out.begin());
  return true;
}

void MaskCache::insert(const Key& key, std::span<const uint32_t> mask) {
  const size_t entry_bytes = mask.size() * sizeof(uint32_t) + key.size() * sizeof(uint32_t) * 2;
  std::lock_guard lock(mutex_);
  if (entries_.count(key)) return;
  lru_.push_front(key);
  entries_.emplace(key, Entry{Mask(mask.begin(), mask.end()), lru_.begin()});
  bytes_ += entry_bytes;
  while (bytes_ > budget_bytes_ && lru_.size() > 1) {
    auto victim = entries_.find(lru_.back());
    bytes_ -= victim->second.mask.size() * sizeof(uint32_t) + victim->first.size() * 8;
    entries_.erase(victim);
    lru_.pop_back();
  }
}

void MaskCache::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
  lru_.clear();
  bytes_ = 0;
}

size_t MaskCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

namespace detail {

MaskCache::Key state_key(const StackSet& stacks) {
  MaskCache::Key key;
  for (const std::vector<uint32_t>& s : stacks) {
    key.push_back(static_cast<uint32_t>(s.size()));
    key.insert(key.end(), s.begin(), s.end());
  }
  return key;
}

namespace {

// Scratch of one walk, kept per thread so that steady-state walks do not allocate.
struct Walk {
  std::vector<uint32_t> heads;      // the heads of every level, level after level
  std::vector<size_t> level_begin;  // heads of level d: [level_begin[d], level_begin[d + 1])
  std::vector<size_t> level_nodes;  // arena size once level d was computed
};

}  // namespace

void compute_mask(const Grammar& grammar, const TokenVocabulary& vocab, const StackSet& stacks,
                  std::span<uint32_t> mask) {
  const TokenVocabulary::Trie& trie = vocab.trie();
  thread_local Walk walk;
  PushdownArena arena(grammar);
  walk.heads.clear();
  walk.level_begin.assign(1, 0);
  arena.load(stacks, walk.heads);
  walk.level_begin.push_back(walk.heads.size());
  walk.level_nodes.assign(1, arena.num_nodes());
  bool can_end = false;
  for (uint32_t h : walk.heads) can_end |= h == kNoNode;

  size_t depth = 0;  // levels 0..depth are valid
  const size_t n = trie.ids.size();
  for (size_t i = 0; i < n;) {
    const char* bytes = trie.data.data() + trie.offsets[i];
    const size_t len = trie.offsets[i + 1] - trie.offsets[i];
    size_t d = std::min<size_t>(trie.lcp[i], depth);
    walk.level_begin.resize(d + 2);
    walk.heads.resize(walk.level_begin[d + 1]);
    walk.level_nodes.resize(d + 1);
    arena.truncate(walk.level_nodes[d]);
    bool alive = true;
    for (; d < len; ++d) {
      const size_t begin = walk.level_begin[d], end = walk.level_begin[d + 1];
      arena.advance(walk.heads, begin, end, static_cast<uint8_t>(bytes[d]));
      if (walk.heads.size() == end) {
        alive = false;
        break;
      }
      walk.level_begin.push_back(walk.heads.size());
      walk.level_nodes.push_back(arena.num_nodes());
    }
    if (alive) {
      const int32_t id = trie.ids[i];
      mask[id >> 5] |= uint32_t{1} << (id & 31);
      depth = len;
      ++i;
      continue;
    }
    // Bytes [0, d] are rejected: so is every following token that starts with them.
    depth = d;
    for (++i; i < n && trie.lcp[i] > d; ++i) {
    }
  }
  if (can_end)
    for (int32_t id : trie.end_ids) mask[id >> 5] |= uint32_t{1} << (id & 31);
}

}  // namespace detail
}  // namespace pagedserve::model::grammar
