// GrammarBuilder: rules as the parser defines them, classes as UTF-8 byte sequences, repetitions
// as helper rules, then the checks (left recursion) and the flattening into a Grammar.
#include <algorithm>
#include <optional>
#include <tuple>

#include "model/grammar/grammar_ir.h"

namespace pagedserve::model::grammar::detail {

namespace {

// Elements in one grammar, all rules together (guards against repetition blow-ups).
constexpr size_t kMaxElements = 4'000'000;  // < 2^24 (kSubShift)

}  // namespace

uint32_t GrammarBuilder::new_rule(std::string name) {
  const auto id = static_cast<uint32_t>(rules_.size());
  rule_ids_.emplace(name, id);
  rules_.push_back(Rule{std::move(name), {}, false, 0});
  return id;
}

uint32_t GrammarBuilder::reference(std::string_view name, size_t offset) {
  auto it = rule_ids_.find(std::string(name));
  if (it != rule_ids_.end()) return it->second;
  const uint32_t id = new_rule(std::string(name));
  rules_[id].first_reference = offset;
  return id;
}

bool GrammarBuilder::define(std::string_view name, std::vector<Sequence> alternatives) {
  const uint32_t id = reference(name, 0);
  if (rules_[id].defined) return false;
  for (const Sequence& s : alternatives) count_elements(s.size() + 1);
  rules_[id].alternatives = std::move(alternatives);
  rules_[id].defined = true;
  return true;
}

uint32_t GrammarBuilder::helper(std::string_view base, std::vector<Sequence> alternatives) {
  int& n = helper_counts_[std::string(base)];
  std::string name;
  do {
    name = std::string(base) + "~" + std::to_string(++n);  // never a GBNF name
  } while (rule_ids_.count(name));
  const uint32_t id = new_rule(std::move(name));
  for (const Sequence& s : alternatives) count_elements(s.size() + 1);
  rules_[id].alternatives = std::move(alternatives);
  rules_[id].defined = true;
  return id;
}

void GrammarBuilder::count_elements(size_t n) {
  num_elements_ += n;
  if (num_elements_ > kMaxElements)
    throw GrammarError("grammar too large: more than " + std::to_string(kMaxElements) +
                       " elements after expanding repetitions");
}

uint32_t GrammarBuilder::byte_set(const ByteSet& set) {
  auto [it, inserted] = byte_set_ids_.emplace(set, static_cast<uint32_t>(byte_sets_.size()));
  if (inserted) byte_sets_.push_back(set);
  return it->second;
}

void GrammarBuilder::append_literal(Sequence& out, std::string_view utf8) {
  for (char c : utf8) {
    ByteSet set;
    set.set_range(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
    out.push_back({ElementKind::kBytes, byte_set(set)});
  }
  count_elements(utf8.size());
}

std::optional<Element> GrammarBuilder::utf8_class(const std::vector<Utf8Sequence>& seqs) {
  Utf8Class dfa;
  dfa.next.emplace_back();
  dfa.next[0].fill(Utf8Class::kReject);
  std::map<std::tuple<uint8_t, uint8_t, uint8_t>, uint8_t> children;  // (state, lo, hi) -> state
  for (const Utf8Sequence& seq : seqs) {
    uint8_t state = 0;
    for (size_t i = 0; i < seq.size(); ++i) {
      const ByteRange r = seq[i];
      uint8_t target = Utf8Class::kAccept;
      if (i + 1 < seq.size()) {
        auto [it, inserted] = children.emplace(std::tuple{state, r.lo, r.hi}, 0);
        if (inserted) {
          if (dfa.next.size() >= Utf8Class::kAccept) return std::nullopt;
          it->second = static_cast<uint8_t>(dfa.next.size());
          dfa.next.emplace_back();
          dfa.next.back().fill(Utf8Class::kReject);
        }
        target = it->second;
      }
      for (unsigned b = r.lo; b <= r.hi; ++b) {
        uint8_t& cell = dfa.next[state][b];
        if (cell != Utf8Class::kReject && cell != target) return std::nullopt;
        cell = target;
      }
      state = target;
    }
  }
  classes_.push_back(std::move(dfa));
  return Element{ElementKind::kClass, static_cast<uint32_t>(classes_.size() - 1)};
}

void GrammarBuilder::append_class(Sequence& out, std::vector<CodePointRange> ranges,
                                  std::string_view base) {
  if (auto it = class_elements_.find(ranges); it != class_elements_.end()) {
    out.push_back(it->second);
    count_elements(1);
    return;
  }
  const std::vector<Utf8Sequence> seqs = utf8_sequences(ranges);
  Element element;
  if (seqs.empty()) {  // matches nothing: a rule without alternatives
    element = {ElementKind::kRule, helper(base, {})};
  } else if (std::all_of(seqs.begin(), seqs.end(), [](auto& s) { return s.size() == 1; })) {
    ByteSet ascii;
    for (const Utf8Sequence& seq : seqs) ascii.set_range(seq[0].lo, seq[0].hi);
    element = {ElementKind::kBytes, byte_set(ascii)};
  } else if (auto dfa = utf8_class(seqs)) {
    element = *dfa;
  } else {  // one alternative per byte sequence
    std::vector<Sequence> alternatives;
    for (const Utf8Sequence& seq : seqs) {
      Sequence alt;
      for (const ByteRange& r : seq) {
        ByteSet set;
        set.set_range(r.lo, r.hi);
        alt.push_back({ElementKind::kBytes, byte_set(set)});
      }
      alternatives.push_back(std::move(alt));
    }
    element = {ElementKind::kRule, helper(base, std::move(alternatives))};
  }
  class_elements_.emplace(std::move(ranges), element);
  out.push_back(element);
  count_elements(1);
}

void GrammarBuilder::append_repetition(Sequence& out, Sequence item, int min_times, int max_times,
                                       std::string_view base) {
  if (item.empty()) return;  // the empty string repeated is the empty string
  if (item.size() > 1) item = {{ElementKind::kRule, helper(base, {std::move(item)})}};
  const Element x = item[0];
  count_elements(static_cast<size_t>(min_times) + 1);
  for (int i = 0; i < min_times; ++i) out.push_back(x);
  if (max_times < 0) {  // R ::= x R | ""
    const uint32_t id = helper(base, {});
    rules_[id].alternatives = {{x, {ElementKind::kRule, id}}, {}};
    count_elements(4);
    out.push_back({ElementKind::kRule, id});
    return;
  }
  // x{0,k} as a chain of optionals: R1 ::= x | "", Rk ::= x R(k-1) | "".
  std::optional<uint32_t> inner;
  for (int i = min_times; i < max_times; ++i) {
    Sequence alt{x};
    if (inner) alt.push_back({ElementKind::kRule, *inner});
    inner = helper(base, {std::move(alt), {}});
  }
  if (inner) out.push_back({ElementKind::kRule, *inner});
}

void GrammarBuilder::check_left_recursion() const {
  // nullable[r]: rule r can match the empty string (fixpoint).
  std::vector<char> nullable(rules_.size(), 0);
  const auto seq_nullable = [&](const Sequence& s, size_t end) {
    for (size_t i = 0; i < end; ++i)
      if (s[i].kind != ElementKind::kRule || !nullable[s[i].index]) return false;
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (nullable[r]) continue;
      for (const Sequence& s : rules_[r].alternatives) {
        if (seq_nullable(s, s.size())) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Edges r -> q where q is referenced after a nullable prefix; a cycle is left recursion.
  std::vector<std::vector<uint32_t>> edges(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const Sequence& s : rules_[r].alternatives) {
      for (size_t i = 0; i < s.size() && s[i].kind == ElementKind::kRule; ++i) {
        edges[r].push_back(s[i].index);
        if (!nullable[s[i].index]) break;
      }
    }
  }
  // Iterative depth-first search (repetition chains can be 100,000 rules deep).
  std::vector<char> color(rules_.size(), 0);      // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;  // (rule, next edge)
  for (size_t root = 0; root < rules_.size(); ++root) {
    if (color[root] != 0) continue;
    path.push_back({static_cast<uint32_t>(root), 0});
    color[root] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == edges[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t q = edges[r][next++];
      if (color[q] == 1)
        throw GrammarError("left recursion in rule '" + rules_[q].name +
                           "': it can reach itself without matching a byte (the matcher "
                           "cannot run it; rewrite it right-recursive, or check for a "
                           "repetition of something that can be empty)");
      if (color[q] == 0) {
        color[q] = 1;
        path.push_back({q, 0});
      }
    }
  }
}

namespace {

// Grammar::byte_class: bytes split by each byte set and each UTF-8 class state in turn (a
// partition refinement), so the cost is 256 per row, however many classes there are.
std::array<uint8_t, 256> find_byte_classes(const Grammar& g) {
  std::array<uint8_t, 256> cls{};             // all bytes in class 0
  std::vector<int16_t> id_of(256 * 256, -1);  // (old class, row value) -> new class
  std::vector<int32_t> used;
  auto refine = [&](auto value_of) {  // value_of(b): what this row says about byte b (< 256)
    int16_t next_id = 0;
    for (int b = 0; b < 256; ++b) {
      const int32_t key = cls[b] * 256 + static_cast<int32_t>(value_of(b));
      if (id_of[key] < 0) {
        id_of[key] = next_id++;
        used.push_back(key);
      }
      cls[b] = static_cast<uint8_t>(id_of[key]);
    }
    for (int32_t key : used) id_of[key] = -1;
    used.clear();
  };
  for (const ByteSet& set : g.byte_sets) refine([&](int b) { return set.test(b) ? 1 : 0; });
  for (const Utf8Class& c : g.classes)
    for (const auto& next : c.next) refine([&](int b) { return next[b]; });
  return cls;
}

}  // namespace

std::shared_ptr<const Grammar> GrammarBuilder::finish_checked(std::string_view root) {
  if (rules_.empty()) throw GrammarError("grammar is empty: it defines no rule");
  auto root_it = rule_ids_.find(std::string(root));
  if (root_it == rule_ids_.end() || !rules_[root_it->second].defined)
    throw GrammarError("grammar has no rule '" + std::string(root) + "' (the root)");
  check_left_recursion();
  auto g = std::make_shared<Grammar>();
  g->byte_sets = byte_sets_;
  g->classes = classes_;
  g->root = root_it->second;
  for (const Rule& rule : rules_) {
    g->rule_names.push_back(rule.name);
    std::vector<uint32_t> starts;
    for (const Sequence& s : rule.alternatives) {
      starts.push_back(static_cast<uint32_t>(g->elements.size()));
      g->elements.insert(g->elements.end(), s.begin(), s.end());
      g->elements.push_back({ElementKind::kEnd, 0});
    }
    g->rule_alternatives.push_back(std::move(starts));
  }
  g->byte_class = find_byte_classes(*g);
  return g;
}

}  // namespace pagedserve::model::grammar::detail
