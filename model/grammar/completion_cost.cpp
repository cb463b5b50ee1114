// The least number of bytes that completes a sentence from each position of a grammar: what
// lets a matcher finish a structured output within the tokens a request has left.
#include <algorithm>
#include <deque>
#include <limits>

#include "model/grammar/matcher_impl.h"

namespace pagedserve::model::grammar::detail {
namespace {

constexpr uint32_t kInfinite = std::numeric_limits<uint32_t>::max();

uint32_t saturating_add(uint32_t a, uint32_t b) { return a > kInfinite - b ? kInfinite : a + b; }

// Fewest bytes of one code point of the class: a breadth-first walk of its DFA.
uint32_t class_min_bytes(const Utf8Class& c) {
  std::vector<uint32_t> dist(c.next.size(), kInfinite);
  std::deque<size_t> queue{0};
  dist[0] = 0;
  while (!queue.empty()) {
    const size_t s = queue.front();
    queue.pop_front();
    for (unsigned b = 0; b < 256; ++b) {
      const uint8_t t = c.next[s][b];
      if (t == Utf8Class::kReject) continue;
      if (t == Utf8Class::kAccept) return dist[s] + 1;
      if (dist[t] == kInfinite) {
        dist[t] = dist[s] + 1;
        queue.push_back(t);
      }
    }
  }
  return kInfinite;
}

}  // namespace

// min_rest[p]: fewest bytes from position p to the end of its alternative. A fixpoint: rules
// start unknown (infinite) and only decrease; each pass walks every alternative backwards and
// lowers a rule when it reaches one of its starts.
std::vector<uint32_t> min_completion_table(const Grammar& g) {
  const size_t n = g.elements.size();
  std::vector<uint32_t> min_rest(n + 1, kInfinite);
  std::vector<uint32_t> min_rule(g.rule_alternatives.size(), kInfinite);
  std::vector<uint32_t> class_min(g.classes.size());
  for (size_t c = 0; c < g.classes.size(); ++c) class_min[c] = class_min_bytes(g.classes[c]);
  // An alternative's first position -> its rule, so a pass lowers a rule as soon as it reaches
  // the rule's start: a chain of rules laid out in order then settles in one pass, not one per
  // link.
  std::vector<uint32_t> rule_starting_at(n, kInfinite);
  for (size_t r = 0; r < g.rule_alternatives.size(); ++r) {
    for (uint32_t alt : g.rule_alternatives[r]) rule_starting_at[alt] = static_cast<uint32_t>(r);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = n; p-- > 0;) {
      const Element e = g.elements[p];
      uint32_t cost = 0;
      switch (e.kind) {
        case ElementKind::kEnd:
          cost = 0;
          break;
        case ElementKind::kBytes:
          cost = 1;
          break;
        case ElementKind::kClass:
          cost = class_min[e.index];
          break;
        case ElementKind::kRule:
          cost = min_rule[e.index];
          break;
      }
      const uint32_t value =
          e.kind == ElementKind::kEnd ? 0 : saturating_add(cost, min_rest[p + 1]);
      if (value < min_rest[p]) min_rest[p] = value;
      const uint32_t rule = rule_starting_at[p];
      if (rule != kInfinite && min_rest[p] < min_rule[rule]) {
        min_rule[rule] = min_rest[p];
        changed = true;
      }
    }
  }
  min_rest.pop_back();
  return min_rest;
}

uint32_t stack_cost(const std::vector<uint32_t>& stack, const std::vector<uint32_t>& min_rest) {
  uint32_t cost = 0;
  for (uint32_t pos : stack) cost = saturating_add(cost, min_rest[pos & kPosMask]);
  return cost;
}

}  // namespace pagedserve::model::grammar::detail
