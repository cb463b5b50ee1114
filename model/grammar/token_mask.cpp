// Token masks: a depth-first walk of the sorted vocabulary that advances the automaton one byte
// per level and skips every token under a rejected prefix; and the per-grammar cache of masks.
#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <unordered_set>

#include "model/grammar/matcher_impl.h"
#include "model/grammar/utf8.h"

namespace pagedserve::model::grammar {

// ---- MaskCache ----

size_t MaskCache::KeyHash::operator()(const Key& k) const noexcept {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the words
  for (uint32_t w : k) h = (h ^ w) * 0x100000001b3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

bool MaskCache::lookup(const Key& key, std::span<uint32_t> out, uint32_t* max_cost) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  std::copy(it->second.mask.begin(), it->second.mask.end(), out.begin());
  if (max_cost != nullptr) *max_cost = it->second.max_cost;
  return true;
}

void MaskCache::insert(const Key& key, std::span<const uint32_t> mask, uint32_t max_cost) {
  const size_t entry_bytes = mask.size() * sizeof(uint32_t) + key.size() * sizeof(uint32_t) * 2;
  std::lock_guard lock(mutex_);
  if (entries_.count(key)) return;
  lru_.push_front(key);
  entries_.emplace(key, Entry{Mask(mask.begin(), mask.end()), max_cost, lru_.begin()});
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

// A character a JSON string holds unescaped: not '"' or '\\', no control character.
bool is_content_code_point(uint32_t cp) {
  return cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7f;
}

// The UTF-8 encodings of every content character, as byte-range sequences (utf8.h).
// Never destroyed: a grammar cache's prewarm thread reads it and is still running when exit()
// destroys the process's statics (nothing joins it there), and this one, built on first use,
// would go before the served model that owns the cache.
const std::vector<Utf8Sequence>& content_sequences() {
  static const std::vector<Utf8Sequence>& sequences = *new std::vector<Utf8Sequence>(
      utf8_sequences({{0x20, 0x21}, {0x23, 0x5b}, {0x5d, 0x7e}, {0x80, kMaxCodePoint}}));
  return sequences;
}

bool is_string_content(std::string_view bytes) {
  if (bytes.empty()) return false;
  for (size_t i = 0; i < bytes.size();) {
    uint32_t cp = 0;
    const int length = decode_utf8(bytes, i, cp);
    if (length == 0 || !is_content_code_point(cp)) return false;
    i += static_cast<size_t>(length);
  }
  return true;
}

// The automaton as a DFA built lazily by the walks: a state is a set of interned heads (equal
// stacks, equal ids), each (state, byte) step is computed once and then looked up. Inside a JSON
// string almost every character leads back to the same state, so most bytes of the vocabulary
// cost one table load. The DFA depends on the grammar only, not on where a walk starts, so a
// compiled grammar keeps its DFAs between walks (DfaPool): a state's first mask then costs the
// walk, not also the construction of every step it meets (grammar_mask_bench's schema: 152
// instead of 197 us a step at 32k; a prewarm, whose states share most steps, ~30 us a state).
class LazyDfa {
 public:
  static constexpr int32_t kUnknown = -1;
  static constexpr int32_t kDead = -2;

  // A DFA of `grammar` with no state yet (DfaPool keeps it for the grammar's later walks).
  explicit LazyDfa(const Grammar& grammar) : arena_(grammar) {
    arena_.set_interning(true);
    take_byte_classes(grammar);
  }

  // Roughly the bytes it holds (the memo tables, the states' heads and the stack nodes).
  size_t memory_bytes() const {
    return next_.size() * sizeof(next_[0]) + heads_.size() * 24 + arena_.num_nodes() * 40;
  }

  // The state of `stacks`, keeping every state and step known so far.
  int32_t enter(const StackSet& stacks) {
    scratch_.clear();
    arena_.load(stacks, scratch_);
    return intern(0);
  }

  // The canonical stacks of `state`: what a matcher holds after the bytes that reached it.
  StackSet stacks_of(int32_t state) const {
    return arena_.extract(heads_, begin_[state], begin_[state + 1]);
  }
  size_t num_states() const { return begin_.size() - 1; }

  bool can_end(int32_t state) const {
    for (uint32_t i = begin_[state]; i < begin_[state + 1]; ++i)
      if (heads_[i] == kNoNode) return true;
    return false;
  }

  // The shortest completion of `state` in bytes: its cheapest stack's sum of min_rest.
  uint32_t cost(int32_t state, const std::vector<uint32_t>& min_rest) {
    if (costs_.size() <= static_cast<size_t>(state)) costs_.resize(state + 1, kUnknownCost);
    uint32_t& memo = costs_[state];
    if (memo != kUnknownCost) return memo;
    uint32_t best = kNoBudget;
    for (uint32_t i = begin_[state]; i < begin_[state + 1]; ++i) {
      uint64_t sum = 0;
      for (uint32_t n = heads_[i]; n != kNoNode; n = arena_.node(n).parent) {
        sum += min_rest[arena_.node(n).pos & kPosMask];
      }
      best = static_cast<uint32_t>(std::min<uint64_t>(best, sum));
    }
    return memo = best;
  }

  // Whether every string-content character (every byte sequence of content_sequences())
  // leads from `state` back to `state`, never dead: then every is_string_content token is
  // allowed there and ends there (inside a JSON string without a length bound). Memoised.
  bool loops_on_content(int32_t state) {
    if (loops_.size() <= static_cast<size_t>(state)) loops_.resize(state + 1, kLoopUnknown);
    if (loops_[state] != kLoopUnknown) return loops_[state] == kLoopYes;
    bool loops = true;
    std::vector<int32_t> states, next;
    for (const Utf8Sequence& sequence : content_sequences()) {
      states.assign(1, state);
      for (size_t k = 0; k < sequence.size() && loops; ++k) {
        next.clear();
        for (int32_t from : states) {
          for (int b = sequence[k].lo; b <= sequence[k].hi && loops; ++b) {
            const int32_t to = step(from, static_cast<uint8_t>(b));
            if (to == kDead) loops = false;
            if (std::find(next.begin(), next.end(), to) == next.end()) next.push_back(to);
          }
        }
        states.swap(next);
      }
      if (!loops || states.size() != 1 || states[0] != state) {
        loops = false;
        break;
      }
    }
    loops_[state] = loops ? kLoopYes : kLoopNo;
    return loops;
  }

  // The memo tables (valid until the next step()), for the walk's inlined fast path.
  const std::array<int32_t, 256>* tables() const { return next_.data(); }
  size_t num_tables() const { return next_.size(); }

  int32_t step(int32_t state, uint8_t byte) {
    if (static_cast<size_t>(state) < next_.size()) {
      const int32_t known = next_[state][byte];
      if (known != kUnknown) return known;
    }
    scratch_.assign(heads_.begin() + begin_[state], heads_.begin() + begin_[state + 1]);
    const size_t n = scratch_.size();
    arena_.advance(scratch_, 0, n, byte);
    const int32_t target = scratch_.size() == n ? kDead : intern(n);
    if (static_cast<size_t>(state) < kMaxTables) {
      if (next_.size() <= static_cast<size_t>(state)) {
        const size_t old = next_.size();
        next_.resize(state + 1);
        for (size_t s = old; s < next_.size(); ++s) next_[s].fill(kUnknown);
      }
      // Every byte the grammar cannot tell from this one steps to the same state.
      for (uint8_t same : class_members_[byte_class_[byte]]) next_[state][same] = target;
    }
    return target;
  }

 private:
  static constexpr size_t kMaxTables = 1 << 14;  // states with a memo table (1 KiB each)
  static constexpr uint32_t kUnknownCost = kNoBudget - 1;
  static constexpr int8_t kLoopUnknown = -1, kLoopNo = 0, kLoopYes = 1;

  // The state of the heads scratch_[from, end).
  int32_t intern(size_t from) {
    std::vector<uint32_t> key(scratch_.begin() + static_cast<std::ptrdiff_t>(from), scratch_.end());
    std::sort(key.begin(), key.end());
    key.erase(std::unique(key.begin(), key.end()), key.end());
    auto [it, inserted] = state_ids_.try_emplace(key, static_cast<int32_t>(begin_.size() - 1));
    if (inserted) {
      heads_.insert(heads_.end(), key.begin(), key.end());
      begin_.push_back(static_cast<uint32_t>(heads_.size()));
    }
    return it->second;
  }

  // Grammar::byte_class as lists: a step computed for one byte is the step of its whole class
  // (inside a JSON string the 64 continuation bytes fall into 3 classes).
  void take_byte_classes(const Grammar& grammar) {
    for (int b = 0; b < 256; ++b) {
      const uint8_t c = grammar.byte_class[b];
      if (class_members_.size() <= c) class_members_.resize(c + 1);
      class_members_[c].push_back(static_cast<uint8_t>(b));
    }
    byte_class_ = grammar.byte_class;
  }

  PushdownArena arena_;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<std::vector<uint8_t>> class_members_;  // the bytes of each class
  std::unordered_map<std::vector<uint32_t>, int32_t, MaskCache::KeyHash> state_ids_;
  std::vector<uint32_t> heads_;  // heads of state s: [begin_[s], begin_[s + 1])
  std::vector<uint32_t> begin_ = {0};
  std::vector<std::array<int32_t, 256>> next_;
  std::vector<uint32_t> scratch_;
  std::vector<uint32_t> costs_;  // cost() memo by state
  std::vector<int8_t> loops_;    // loops_on_content() memo by state
};

namespace {

// What one walk gathers besides the mask.
struct WalkResult {
  uint32_t largest_cost = 0;
  std::vector<int32_t>* end_states = nullptr;  // may be null
  std::vector<uint8_t>* ended = nullptr;       // ended[state]: already in end_states
};

// Records that an allowed token ends in DFA `state` at completion cost `cost`.
inline void note_end(int32_t state, uint32_t cost, const LazyDfa& dfa, WalkResult& result) {
  result.largest_cost = std::max(result.largest_cost, cost);
  if (result.end_states == nullptr) return;
  std::vector<uint8_t>& ended = *result.ended;
  if (ended.size() <= static_cast<size_t>(state)) ended.resize(dfa.num_states(), 0);
  if (!ended[state]) {
    ended[state] = 1;
    result.end_states->push_back(state);
  }
}

// Marks token `id`, ending in DFA `state` at completion cost `cost`, as allowed.
inline void allow(int32_t id, int32_t state, uint32_t cost, const LazyDfa& dfa,
                  std::span<uint32_t> mask, WalkResult& result) {
  mask[id >> 5] |= uint32_t{1} << (id & 31);
  note_end(state, cost, dfa, result);
}

// The depth-first walk of `trie`'s tokens from DFA state `start`: a token is allowed when its
// bytes all step and the completion cost of its last state is within `budget`.
void walk_trie(LazyDfa& dfa, int32_t start, const TokenVocabulary::Trie& trie,
               std::span<uint32_t> mask, const std::vector<uint32_t>& min_rest, uint32_t budget,
               bool costs_wanted, WalkResult& result) {
  thread_local std::vector<int32_t> levels;  // [d]: the state after d bytes of the token
  if (levels.size() < trie.max_length + 1) levels.resize(trie.max_length + 1);
  int32_t* const level = levels.data();  // a local pointer: no thread-local lookup per byte
  level[0] = start;
  size_t depth = 0;  // levels 0..depth are valid
  const size_t n = trie.ids.size();
  const auto* data = reinterpret_cast<const uint8_t*>(trie.data.data());
  const uint32_t* offsets = trie.offsets.data();
  const uint32_t* lcp = trie.lcp.data();
  const std::array<int32_t, 256>* tables = dfa.tables();
  size_t num_tables = dfa.num_tables();
  for (size_t i = 0; i < n;) {
    const uint8_t* bytes = data + offsets[i];
    const size_t len = offsets[i + 1] - offsets[i];
    size_t d = std::min<size_t>(lcp[i], depth);
    int32_t state = level[d];
    for (; d < len; ++d) {
      int32_t next =
          static_cast<size_t>(state) < num_tables ? tables[state][bytes[d]] : LazyDfa::kUnknown;
      if (next == LazyDfa::kUnknown) {
        next = dfa.step(state, bytes[d]);
        tables = dfa.tables();
        num_tables = dfa.num_tables();
      }
      if (next == LazyDfa::kDead) break;
      level[d + 1] = state = next;
    }
    if (d == len) {
      const uint32_t cost = costs_wanted ? dfa.cost(state, min_rest) : 0;
      if (cost <= budget) allow(trie.ids[i], state, cost, dfa, mask, result);
      depth = len;
      ++i;
      continue;
    }
    // Bytes [0, d] are rejected: so is every following token that starts with them.
    depth = d;
    for (++i; i < n && lcp[i] > d; ++i) {
    }
  }
}

// The walk of the vocabulary from DFA state `start` (see compute_mask). `end_states` (may be
// null) gets each distinct state an allowed token ends in, once. Inside a JSON string (a start
// that every content character leads back to) the content tokens, most of the vocabulary, are
// allowed as one bitmask, all ending at the start, and only the others are walked: a walk
// there visits every byte of every token, since almost nothing is rejected.
void walk_vocabulary(LazyDfa& dfa, int32_t start, const TokenVocabulary& vocab,
                     std::span<uint32_t> mask, const std::vector<uint32_t>& min_rest,
                     uint32_t budget, uint32_t* max_cost, std::vector<int32_t>* end_states) {
  const TokenVocabulary::Trie& trie = vocab.trie();
  thread_local std::vector<uint8_t> ended;
  const bool content_loops = trie.has_content && dfa.loops_on_content(start);
  WalkResult result;
  if (end_states != nullptr) {
    end_states->clear();
    ended.assign(dfa.num_states(), 0);
    result.end_states = end_states;
    result.ended = &ended;
  }
  const bool costs_wanted = budget != kNoBudget || max_cost != nullptr;
  if (content_loops) {
    const uint32_t cost = costs_wanted ? dfa.cost(start, min_rest) : 0;
    if (cost <= budget) {
      for (size_t w = 0; w < trie.content.size(); ++w) mask[w] |= trie.content[w];
      note_end(start, cost, dfa, result);
    }
    walk_trie(dfa, start, *trie.rest, mask, min_rest, budget, costs_wanted, result);
  } else {
    walk_trie(dfa, start, trie, mask, min_rest, budget, costs_wanted, result);
  }
  if (dfa.can_end(start))
    for (int32_t id : trie.end_ids) mask[id >> 5] |= uint32_t{1} << (id & 31);
  if (max_cost != nullptr) *max_cost = result.largest_cost;
}

}  // namespace

void LazyDfaDeleter::operator()(LazyDfa* dfa) const { delete dfa; }

LazyDfaPtr DfaPool::take(const Grammar& grammar) {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      LazyDfaPtr dfa = std::move(idle_.back());
      idle_.pop_back();
      return dfa;
    }
  }
  return LazyDfaPtr(new LazyDfa(grammar));
}

void DfaPool::give_back(LazyDfaPtr dfa) {
  if (dfa->memory_bytes() > kMaxKeptBytes) return;  // a huge grammar: rebuilt on its next walk
  std::lock_guard lock(mutex_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(dfa));
}

void DfaPool::clear() {
  std::lock_guard lock(mutex_);
  idle_.clear();
}

void compute_mask(const CompiledGrammar::Impl& impl, const StackSet& stacks,
                  std::span<uint32_t> mask, uint32_t budget, uint32_t* max_cost) {
  LazyDfaPtr dfa = impl.dfas.take(*impl.grammar);
  walk_vocabulary(*dfa, dfa->enter(stacks), *impl.vocab, mask, impl.min_rest, budget, max_cost,
                  nullptr);
  impl.dfas.give_back(std::move(dfa));
}

bool takes_content_as_bitmask(const CompiledGrammar::Impl& impl, const StackSet& stacks) {
  LazyDfaPtr dfa = impl.dfas.take(*impl.grammar);
  const bool loops = impl.vocab->trie().has_content && dfa->loops_on_content(dfa->enter(stacks));
  impl.dfas.give_back(std::move(dfa));
  return loops;
}

PrewarmStats prewarm_masks(const CompiledGrammar::Impl& impl, const PrewarmLimits& limits) {
  const auto begin = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  };
  const size_t words = bitmask_words(impl.vocab->size());
  // Half the cache at most: prewarmed masks must not push out each other or the served ones.
  const size_t max_states =
      std::min(limits.max_states, impl.cache.budget_bytes() / 2 / (words * sizeof(uint32_t)));
  PrewarmStats stats;
  // One DFA for the whole search (later states reuse the steps of earlier ones), kept for the
  // walks of states past the limits.
  LazyDfaPtr kept = impl.dfas.take(*impl.grammar);
  LazyDfa& dfa = *kept;
  std::unordered_set<MaskCache::Key, MaskCache::KeyHash> seen{state_key(impl.start)};
  std::deque<StackSet> queue{impl.start};
  std::vector<uint32_t> mask(words);
  std::vector<int32_t> end_states;
  // Breadth first: the states a decode meets first (shallow nesting) are cached first.
  while (!queue.empty() && stats.states < max_states && elapsed() < limits.max_seconds &&
         !(limits.stop != nullptr && limits.stop->load(std::memory_order_relaxed))) {
    const StackSet stacks = std::move(queue.front());
    queue.pop_front();
    std::fill(mask.begin(), mask.end(), 0u);
    uint32_t max_cost = 0;
    walk_vocabulary(dfa, dfa.enter(stacks), *impl.vocab, mask, impl.min_rest, kNoBudget, &max_cost,
                    &end_states);
    impl.cache.insert(state_key(stacks), mask, max_cost);
    ++stats.states;
    for (int32_t state : end_states) {
      StackSet next = dfa.stacks_of(state);
      if (seen.insert(state_key(next)).second) queue.push_back(std::move(next));
    }
  }
  impl.dfas.give_back(std::move(kept));
  stats.complete = queue.empty();
  stats.seconds = elapsed();
  return stats;
}

}  // namespace detail
}  // namespace pagedserve::model::grammar
