// Bounds on non-integer numbers (minimum, maximum and their exclusive forms, type number):
// an exact grammar over plain decimals, compared digit by digit.
//
// A bounded number is written without an exponent ("1500", not "1.5e3"): every value in range
// has such a spelling, and the grammar accepts exactly the plain decimals in range (so it
// accepts a subset of the valid texts, as with patterns). "-0" and "-0.0" are not emitted.
// Bounds are read as the decimal their JSON text spells (0.1 is one tenth); integer parts
// beyond 1e18 are refused.
#include <algorithm>
#include <cmath>

#include "model/grammar/json_schema_converter.h"

namespace pagedserve::model::grammar::json_schema_detail {
namespace {

// A non-negative decimal: integer digits without leading zeros ("0" for zero), fraction
// digits without trailing zeros.
struct Decimal {
  std::string integer = "0";
  std::string fraction;
};

int compare(const Decimal& a, const Decimal& b) {
  if (a.integer.size() != b.integer.size()) return a.integer.size() < b.integer.size() ? -1 : 1;
  if (int c = a.integer.compare(b.integer)) return c < 0 ? -1 : 1;
  size_t n = std::max(a.fraction.size(), b.fraction.size());
  std::string fa = a.fraction + std::string(n - a.fraction.size(), '0');
  std::string fb = b.fraction + std::string(n - b.fraction.size(), '0');
  int c = fa.compare(fb);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

// "-1.25e+2" -> negative, {125, ""}.
Decimal parse_decimal(std::string text, bool& negative) {
  negative = !text.empty() && text[0] == '-';
  if (negative) text.erase(0, 1);
  int exponent = 0;
  if (size_t e = text.find_first_of("eE"); e != std::string::npos) {
    exponent = std::stoi(text.substr(e + 1));
    text.erase(e);
  }
  size_t dot = text.find('.');
  std::string digits = dot == std::string::npos ? text : text.substr(0, dot) + text.substr(dot + 1);
  int point = static_cast<int>(dot == std::string::npos ? text.size() : dot) + exponent;
  if (point < 0) digits.insert(0, static_cast<size_t>(-point), '0'), point = 0;
  if (point > static_cast<int>(digits.size())) digits.append(point - digits.size(), '0');
  Decimal out;
  out.integer = digits.substr(0, point);
  out.fraction = digits.substr(point);
  out.integer.erase(0, std::min(out.integer.find_first_not_of('0'), out.integer.size()));
  if (out.integer.empty()) out.integer = "0";
  out.fraction.erase(std::min(out.fraction.find_last_not_of('0') + 1, out.fraction.size()));
  if (out.integer == "0" && out.fraction.empty()) negative = false;
  return out;
}

// A bound on fraction digits s, read as 0.s.
struct FractionBound {
  std::string digits;  // no trailing zeros
  bool strict = false;
};
using OptBound = std::optional<FractionBound>;

std::string group(const std::string& inner) { return "( " + inner + " )"; }

// The bounds left after the digit `d`; false when no continuation can satisfy them.
bool step(const OptBound& lo, const OptBound& hi, char d, OptBound& next_lo, OptBound& next_hi) {
  next_lo.reset(), next_hi.reset();
  if (lo && !lo->digits.empty()) {
    if (d < lo->digits[0]) return false;
    if (d == lo->digits[0]) next_lo = FractionBound{lo->digits.substr(1), lo->strict};
  } else if (lo && lo->strict && d == '0') {
    next_lo = lo;  // still "the rest > 0"
  }
  if (hi && !hi->digits.empty()) {
    if (d > hi->digits[0]) return false;
    if (d == hi->digits[0]) next_hi = FractionBound{hi->digits.substr(1), hi->strict};
  } else if (hi) {  // "the rest <= 0" (a strict one never reaches here): zeros only
    if (d != '0' || hi->strict) return false;
    next_hi = hi;
  }
  return true;
}

std::optional<std::string> fraction_digits(OptBound lo, OptBound hi);

// The non-empty digit strings s with lo <(=) 0.s <(=) hi.
std::optional<std::string> nonempty_fraction_digits(const OptBound& lo, const OptBound& hi) {
  std::vector<std::string> alternatives;
  char free_from = 0;  // a run of digits after which anything may follow
  auto flush = [&](char last) {
    if (free_from == 0) return;
    std::string cls = free_from == last ? std::string("\"") + last + "\""
                                        : std::string("[") + free_from + "-" + last + "]";
    alternatives.push_back(cls + " [0-9]*");
    free_from = 0;
  };
  for (char d = '0'; d <= '9'; ++d) {
    OptBound next_lo, next_hi;
    bool possible = step(lo, hi, d, next_lo, next_hi);
    if (possible && !next_lo && !next_hi) {
      if (free_from == 0) free_from = d;
      continue;
    }
    flush(static_cast<char>(d - 1));
    if (!possible) continue;
    if (auto rest = fraction_digits(next_lo, next_hi)) {
      alternatives.push_back(std::string("\"") + d + "\"" + (rest->empty() ? "" : " " + *rest));
    }
  }
  flush('9');
  if (alternatives.empty()) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return alternatives.size() == 1 ? out : group(out);
}

// Normalizes the bounds; false when no s satisfies them. `empty_ok`: s = "" (zero) does.
bool normalize(OptBound& lo, OptBound& hi, bool& empty_ok) {
  if (lo && lo->digits.empty() && !lo->strict) lo.reset();   // 0.s >= 0
  if (hi && hi->digits.empty() && hi->strict) return false;  // 0.s < 0
  if (lo && lo->digits.empty() && hi && hi->digits.empty()) return false;
  empty_ok = !lo;
  return true;
}

// The digit strings s (empty included) with lo <(=) 0.s <(=) hi; nullopt: none.
std::optional<std::string> fraction_digits(OptBound lo, OptBound hi) {
  bool empty_ok = false;
  if (!normalize(lo, hi, empty_ok)) return std::nullopt;
  if (!lo && !hi) return std::string("[0-9]*");
  if (lo && lo->digits.empty() && !hi) return std::string("[0-9]* [1-9] [0-9]*");
  if (hi && hi->digits.empty() && !lo) return std::string("\"0\"*");
  auto nonempty = nonempty_fraction_digits(lo, hi);
  if (!nonempty) return empty_ok ? std::optional<std::string>("") : std::nullopt;
  return empty_ok ? group(*nonempty) + "?" : *nonempty;
}

// A number's optional fraction (with its "."), for lo <(=) 0.s <(=) hi; nullopt: none.
std::optional<std::string> fraction_part(OptBound lo, OptBound hi) {
  bool zero_ok = false;
  if (!normalize(lo, hi, zero_ok)) return std::nullopt;
  auto digits = nonempty_fraction_digits(lo, hi);
  if (!digits) return zero_ok ? std::optional<std::string>("") : std::nullopt;
  std::string dotted = "\".\" " + *digits;
  return zero_ok ? group(dotted) + "?" : dotted;
}

struct MagnitudeBound {
  Decimal value;
  bool strict = false;
};

// Plain decimals (no sign) in [a, b] (either end open when absent); nullopt: none.
std::optional<std::string> magnitude_range(const std::optional<MagnitudeBound>& a,
                                           const std::optional<MagnitudeBound>& b) {
  if (a && b) {
    int c = compare(a->value, b->value);
    if (c > 0 || (c == 0 && (a->strict || b->strict))) return std::nullopt;
  }
  std::vector<std::string> alternatives;
  auto add = [&](const std::string& integer, std::optional<std::string> fraction) {
    if (fraction) alternatives.push_back(integer + (fraction->empty() ? "" : " " + *fraction));
  };
  const std::string a_int = a ? a->value.integer : "0";
  if (a && b && a_int == b->value.integer) {
    add("\"" + a_int + "\"", fraction_part(FractionBound{a->value.fraction, a->strict},
                                           FractionBound{b->value.fraction, b->strict}));
  } else {
    if (a) add("\"" + a_int + "\"", fraction_part(FractionBound{a->value.fraction, a->strict}, {}));
    int64_t low = std::stoll(a_int) + (a ? 1 : 0);
    std::optional<int64_t> high;
    if (b) high = std::stoll(b->value.integer) - 1;
    if (!high || low <= *high) add(group(integer_range_gbnf(low, high)), "( \".\" [0-9]+ )?");
    if (b)
      add("\"" + b->value.integer + "\"",
          fraction_part({}, FractionBound{b->value.fraction, b->strict}));
  }
  if (alternatives.empty()) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out;
}

}  // namespace

std::optional<std::string> number_range_gbnf(const std::optional<NumberBound>& lo,
                                             const std::optional<NumberBound>& hi) {
  std::vector<std::string> alternatives;
  auto magnitude = [](const NumberBound& bound) {
    bool negative = false;
    return MagnitudeBound{parse_decimal(bound.text, negative), bound.strict};
  };
  auto is_negative = [](const NumberBound& bound) {
    bool negative = false;
    parse_decimal(bound.text, negative);
    return negative;
  };
  // x >= 0: from max(lo, 0) to hi.
  if (!hi || !is_negative(*hi)) {
    std::optional<MagnitudeBound> a, b;
    if (lo && !is_negative(*lo)) a = magnitude(*lo);
    if (hi) b = magnitude(*hi);
    if (auto range = magnitude_range(a, b)) alternatives.push_back(*range);
  }
  // x < 0: "-" and a magnitude above max(-hi, 0) (exclusive at 0), up to -lo.
  if (!lo || is_negative(*lo)) {
    std::optional<MagnitudeBound> a = MagnitudeBound{Decimal{}, true}, b;
    if (hi && is_negative(*hi)) a = magnitude(*hi);
    if (lo) b = magnitude(*lo);
    if (auto range = magnitude_range(a, b)) alternatives.push_back("\"-\" " + group(*range));
  }
  if (alternatives.empty()) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out;
}

}  // namespace pagedserve::model::grammar::json_schema_detail
