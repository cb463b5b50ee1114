// The byte-level pushdown automaton over a Grammar (llama.cpp's design): a state is a set of
// stacks of positions; the top of each stack is a terminal (a byte set) or the stack is empty
// (the root is complete). Stacks live in an arena as linked nodes (position, parent), so that a
// step shares the unchanged rest of every stack; the arena only grows within one walk and is
// truncated as a depth-first walk backtracks. Not thread-safe: one per thread or matcher.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/grammar/grammar_ir.h"

namespace pagedserve::model::grammar::detail {

// Empties a hash container that is cleared once per byte or per call. clear() costs its bucket
// count, which keeps the peak of any earlier use: after one huge step (an ambiguous grammar), a
// thread's every later clear() would walk that many empty buckets (a 20x slower matcher was
// measured). So a container whose buckets far outnumber what it held is let go instead.
template <class HashContainer>
void clear_hash(HashContainer& c) {
  if (c.bucket_count() > 1024 && c.size() * 8 < c.bucket_count()) {
    c = HashContainer();
  } else {
    c.clear();
  }
}

inline constexpr uint32_t kNoNode = UINT32_MAX;  // as a head: a completed (empty) stack

struct StackNode {
  uint32_t pos = 0;     // position in Grammar::elements (a top's terminal, or a return point);
                        // a kClass top keeps its DFA state above kSubShift
  uint32_t parent = 0;  // the node below, kNoNode at the bottom
};

// A state in canonical form: each stack bottom to top, sorted, no duplicates. Equal states
// have equal StackSets (the key of the mask cache).
using StackSet = std::vector<std::vector<uint32_t>>;

class PushdownArena {
 public:
  PushdownArena() = default;  // rebind() before use
  explicit PushdownArena(const Grammar& grammar) : g_(&grammar) {}
  // Serves another grammar (or the same again), forgetting every node.
  void rebind(const Grammar& grammar) {
    if (g_ != &grammar) stamps_.clear();
    g_ = &grammar;
    nodes_.clear();
    clear_hash(interned_);
  }
  // Interning: one node per (position, parent) pair, so equal stacks get equal head ids (a
  // walk that memoizes states by their heads needs that), and a closure already followed in
  // this step is not followed again: ambiguous grammars (("a"?){0,300}) stay polynomial instead
  // of multiplying equal stacks. Not with truncate().
  void set_interning(bool on) {
    interning_ = on;
    clear_hash(interned_);
  }

  // Appends the heads of the start state (the closure of the root's alternatives).
  void start(std::vector<uint32_t>& heads);
  // Appends the heads of `state`.
  void load(const StackSet& state, std::vector<uint32_t>& heads);
  // Appends to `heads` the heads reached from heads[begin, end) on `byte`, deduplicated.
  void advance(std::vector<uint32_t>& heads, size_t begin, size_t end, uint8_t byte);
  // The canonical form of the state heads[begin, end).
  StackSet extract(const std::vector<uint32_t>& heads, size_t begin, size_t end) const;

  size_t num_nodes() const { return nodes_.size(); }
  const StackNode& node(uint32_t id) const { return nodes_[id]; }
  void truncate(size_t num_nodes) { nodes_.resize(num_nodes); }
  void clear() { nodes_.clear(); }

 private:
  uint32_t push(uint32_t pos, uint32_t parent) {
    if (interning_) {
      auto [it, inserted] = interned_.try_emplace((uint64_t{pos} << 32) | parent,
                                                  static_cast<uint32_t>(nodes_.size()));
      if (!inserted) return it->second;
    }
    nodes_.push_back({pos, parent});
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  void closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& heads);
  void dedupe(std::vector<uint32_t>& heads, size_t begin);

  bool same(uint32_t a, uint32_t b) const {
    return a == b || (a != kNoNode && b != kNoNode && nodes_[a].pos == nodes_[b].pos &&
                      nodes_[a].parent == nodes_[b].parent);
  }

  const Grammar* g_ = nullptr;
  std::vector<StackNode> nodes_;
  // dedupe of many heads: stamps_[top position] == stamp_ once a head with that top was kept.
  std::vector<uint32_t> stamps_;
  uint32_t stamp_ = 0;
  bool interning_ = false;
  std::unordered_map<uint64_t, uint32_t> interned_;
  std::unordered_set<uint64_t> closures_seen_;  // (pos, parent) followed in this step
};

}  // namespace pagedserve::model::grammar::detail
