// The internal form of a grammar (not part of the API): rules of alternatives of elements over
// bytes, flattened into one array the matcher walks by position, and the builder the GBNF parser
// fills. Character classes arrive here as code point ranges and leave as UTF-8 byte sequences;
// repetitions leave as helper rules (right recursion, chains of optionals).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/grammar/grammar.h"
#include "model/grammar/utf8.h"

namespace pagedserve::model::grammar {

namespace detail {

// 256 bits: which bytes a terminal element accepts.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool test(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void set_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) words[b >> 6] |= uint64_t{1} << (b & 63);
  }
  auto operator<=>(const ByteSet&) const = default;
};

enum class ElementKind : uint8_t {
  kEnd,    // end of an alternative: return to the caller
  kBytes,  // one byte of the set `index`
  kClass,  // one code point of the UTF-8 class `index` (a small DFA over its bytes)
  kRule,   // a reference to rule `index`
};

inline bool is_terminal(ElementKind k) {
  return k == ElementKind::kBytes || k == ElementKind::kClass;
}

// A class of code points with multi-byte members as a DFA over bytes: next[state][byte] is the
// next state, kReject or kAccept (a whole code point read). State 0 is the start. A stack whose
// top is inside a code point keeps the state in the top bits of its position (kSubShift).
struct Utf8Class {
  static constexpr uint8_t kReject = 0;
  static constexpr uint8_t kAccept = 255;
  std::vector<std::array<uint8_t, 256>> next;
};

inline constexpr uint32_t kSubShift = 24;  // positions < 2^24; the DFA state above
inline constexpr uint32_t kPosMask = (uint32_t{1} << kSubShift) - 1;

struct Element {
  ElementKind kind = ElementKind::kEnd;
  uint32_t index = 0;
  bool operator==(const Element&) const = default;
};

using Sequence = std::vector<Element>;  // one alternative, without its kEnd

}  // namespace detail

namespace detail {
// Every byte in a class of its own: the byte classes of a grammar nothing has analysed.
constexpr std::array<uint8_t, 256> identity_byte_classes() {
  std::array<uint8_t, 256> classes{};
  for (int b = 0; b < 256; ++b) classes[b] = static_cast<uint8_t>(b);
  return classes;
}
}  // namespace detail

// Immutable once built. Positions index `elements`; every alternative ends with a kEnd.
class Grammar {
 public:
  std::vector<detail::Element> elements;
  std::vector<detail::ByteSet> byte_sets;
  std::vector<detail::Utf8Class> classes;
  std::vector<std::vector<uint32_t>> rule_alternatives;  // rule -> start positions
  std::vector<std::string> rule_names;
  uint32_t root = 0;
  // Bytes no terminal tells apart (every byte set holds both or neither, every UTF-8 class's
  // DFA steps them alike from each of its states) share a class id: they advance any stacks
  // alike. Set by GrammarBuilder::finish_checked.
  std::array<uint8_t, 256> byte_class = detail::identity_byte_classes();
};

namespace detail {

// Collects rules while the parser reads, then checks and flattens them (finish).
class GrammarBuilder {
 public:
  // The id of rule `name`, created undefined on first use. `offset`: where it was referenced
  // (for "undefined rule" errors).
  uint32_t reference(std::string_view name, size_t offset);
  // Defines rule `name`; a second definition is an error (reported by the caller via the bool).
  bool define(std::string_view name, std::vector<Sequence> alternatives);
  // A new rule named after `base` (e.g. "root~3", which no GBNF rule can be named).
  uint32_t helper(std::string_view base, std::vector<Sequence> alternatives);

  void append_literal(Sequence& out, std::string_view utf8);
  // A class of code points (normalized, possibly empty) as elements: inline when it is one byte
  // sequence, else a reference to a shared helper rule of its sequences.
  void append_class(Sequence& out, std::vector<CodePointRange> ranges, std::string_view base);
  // `item` repeated between min_times and max_times (-1: unbounded) times, appended to out.
  void append_repetition(Sequence& out, Sequence item, int min_times, int max_times,
                         std::string_view base);

  // Checks (undefined rules, missing root, left recursion) and flattens. `fail(offset, msg)`
  // reports errors that have a place in the text; others throw GrammarError directly.
  template <class Fail>
  std::shared_ptr<const Grammar> finish(std::string_view root, Fail&& fail) {
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!rules_[r].defined)
        fail(rules_[r].first_reference, "undefined rule '" + rules_[r].name + "'");
    return finish_checked(root);
  }

  size_t num_rules() const { return rules_.size(); }

 private:
  struct Rule {
    std::string name;
    std::vector<Sequence> alternatives;
    bool defined = false;
    size_t first_reference = 0;
  };
  uint32_t byte_set(const ByteSet& set);
  // The DFA of `seqs` as a kClass element; nullopt when it does not fit (over 254 states, or
  // sequences whose byte ranges overlap without being equal).
  std::optional<Element> utf8_class(const std::vector<Utf8Sequence>& seqs);
  uint32_t new_rule(std::string name);
  std::shared_ptr<const Grammar> finish_checked(std::string_view root);
  void check_left_recursion() const;
  void count_elements(size_t n);

  std::vector<Rule> rules_;
  std::unordered_map<std::string, uint32_t> rule_ids_;
  std::map<ByteSet, uint32_t> byte_set_ids_;
  std::vector<ByteSet> byte_sets_;
  std::map<std::vector<CodePointRange>, Element> class_elements_;
  std::vector<Utf8Class> classes_;
  std::map<std::string, int> helper_counts_;
  size_t num_elements_ = 0;
};

}  // namespace detail
}  // namespace pagedserve::model::grammar
