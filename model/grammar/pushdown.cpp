// PushdownArena: closure, one-byte steps and canonical forms of the grammar's automaton.
#include "model/grammar/pushdown.h"

#include <algorithm>

namespace pagedserve::model::grammar::detail {

// Follows `pos` (with return stack `parent`) to the terminals it can match next: a kEnd pops to
// the return point, a rule reference pushes a return point and expands every alternative. A
// reference last in its alternative pushes nothing (tail call), so right recursion (x*) keeps
// the stacks flat. Terminates because the builder refused left recursion.
void PushdownArena::closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& heads) {
  const std::vector<Element>& el = g_->elements;
  for (;;) {
    if (interning_ && !closures_seen_.insert((uint64_t{pos} << 32) | parent).second) return;
    const Element e = el[pos];
    if (is_terminal(e.kind)) {
      heads.push_back(push(pos, parent));
      return;
    }
    if (e.kind == ElementKind::kEnd) {
      if (parent == kNoNode) {
        heads.push_back(kNoNode);
        return;
      }
      const StackNode up = nodes_[parent];
      pos = up.pos;
      parent = up.parent;
      continue;
    }
    const uint32_t ret = el[pos + 1].kind == ElementKind::kEnd ? parent : push(pos + 1, parent);
    for (uint32_t alt : g_->rule_alternatives[e.index]) closure(alt, ret, heads);
    return;
  }
}

void PushdownArena::start(std::vector<uint32_t>& heads) {
  const size_t begin = heads.size();
  clear_hash(closures_seen_);
  for (uint32_t alt : g_->rule_alternatives[g_->root]) closure(alt, kNoNode, heads);
  dedupe(heads, begin);
}

void PushdownArena::load(const StackSet& state, std::vector<uint32_t>& heads) {
  for (const std::vector<uint32_t>& stack : state) {
    uint32_t node = kNoNode;
    for (uint32_t pos : stack) node = push(pos, node);
    heads.push_back(node);
  }
}

void PushdownArena::advance(std::vector<uint32_t>& heads, size_t begin, size_t end, uint8_t byte) {
  const std::vector<Element>& el = g_->elements;
  const size_t out = heads.size();
  clear_hash(closures_seen_);
  for (size_t i = begin; i < end; ++i) {
    const uint32_t h = heads[i];
    if (h == kNoNode) continue;
    const StackNode n = nodes_[h];
    const uint32_t pos = n.pos & kPosMask;
    const Element e = el[pos];
    if (e.kind == ElementKind::kBytes) {
      if (!g_->byte_sets[e.index].test(byte)) continue;
    } else {  // kClass: one step of its DFA
      const uint8_t next = g_->classes[e.index].next[n.pos >> kSubShift][byte];
      if (next == Utf8Class::kReject) continue;
      if (next != Utf8Class::kAccept) {
        heads.push_back(push(pos | (uint32_t{next} << kSubShift), n.parent));
        continue;
      }
    }
    if (is_terminal(el[pos + 1].kind)) {
      heads.push_back(push(pos + 1, n.parent));
    } else {
      closure(pos + 1, n.parent, heads);
    }
  }
  if (heads.size() - out > 1) dedupe(heads, out);
}

// Removes heads equal in (position, parent node); equal stacks with different parent nodes
// stay (extract merges them), which only costs time. Few heads: pairwise; many: stamps by top
// position first, pairwise only among heads with the same top position.
void PushdownArena::dedupe(std::vector<uint32_t>& heads, size_t begin) {
  size_t kept = begin;
  const size_t n = heads.size() - begin;
  if (n <= 8) {
    for (size_t r = begin; r < heads.size(); ++r) {
      bool dup = false;
      for (size_t k = begin; k < kept && !dup; ++k) dup = same(heads[k], heads[r]);
      if (!dup) heads[kept++] = heads[r];
    }
    heads.resize(kept);
    return;
  }
  if (stamps_.size() != g_->elements.size() + 1) {
    stamps_.assign(g_->elements.size() + 1, 0);
    stamp_ = 0;
  }
  if (++stamp_ == 0) {
    std::fill(stamps_.begin(), stamps_.end(), 0);
    stamp_ = 1;
  }
  for (size_t r = begin; r < heads.size(); ++r) {
    const uint32_t h = heads[r];
    const size_t slot = h == kNoNode ? g_->elements.size() : (nodes_[h].pos & kPosMask);
    bool dup = false;
    if (stamps_[slot] == stamp_) {
      for (size_t k = begin; k < kept && !dup; ++k) dup = same(heads[k], h);
    }
    stamps_[slot] = stamp_;
    if (!dup) heads[kept++] = h;
  }
  heads.resize(kept);
}

StackSet PushdownArena::extract(const std::vector<uint32_t>& heads, size_t begin,
                                size_t end) const {
  StackSet out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    std::vector<uint32_t> stack;
    for (uint32_t n = heads[i]; n != kNoNode; n = nodes_[n].parent) stack.push_back(nodes_[n].pos);
    std::reverse(stack.begin(), stack.end());
    out.push_back(std::move(stack));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace pagedserve::model::grammar::detail
