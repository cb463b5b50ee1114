// regex_to_gbnf against std::regex (ECMAScript) as the independent reference: for each pattern,
// random strings over an alphabet, strings grown along the grammar, and their mutations must be
// accepted exactly when std::regex_match (or regex_search, unanchored) accepts them. ASCII only.
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "tests/model/grammar/grammar_test_util.h"

namespace pagedserve::model::grammar {
namespace {

constexpr int kStringsPerPattern = 600;

using testing::matcher_for;
using testing::matches;

const std::string kAlphabet = "abcdgmorxyzABZ019_-.@/* \t\n{}()";

// A random string; `m` guides some characters toward the grammar (prefixes it accepts).
std::string random_string(std::mt19937& rng, const GrammarMatcher& m, bool guided) {
  std::uniform_int_distribution<size_t> len_dist(0, 20), pick(0, kAlphabet.size() - 1);
  const size_t len = len_dist(rng);
  std::string s;
  GrammarMatcher cur = m;
  for (size_t i = 0; i < len; ++i) {
    if (guided && cur.can_end() && rng() % 3 == 0) break;  // often stop at a match
    char c = kAlphabet[pick(rng)];
    if (guided) {
      for (int tries = 0; tries < 40 && !GrammarMatcher(cur).accept_bytes(std::string(1, c));
           ++tries)
        c = kAlphabet[pick(rng)];
      cur.accept_bytes(std::string(1, c));
    }
    s += c;
  }
  return s;
}

std::string mutate(std::mt19937& rng, std::string s) {
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
  switch (rng() % 3) {
    case 0:
      s.insert(s.begin() + at, kAlphabet[pick(rng)]);
      break;
    case 1:
      if (at < s.size()) s.erase(at, 1);
      break;
    default:
      if (at < s.size()) s[at] = kAlphabet[pick(rng)];
      break;
  }
  return s;
}

// pattern: ours; reference: the same in std::regex's ECMAScript dialect (no named groups).
struct Pattern {
  std::string pattern;
  std::string reference;
  std::vector<std::string> examples;  // known matches (hand-written), checked too
};

std::vector<Pattern> patterns() {
  return {
      {"abc", "abc", {"abc"}},
      {"a|b|cd", "a|b|cd", {"cd"}},
      {"(ab)*c", "(ab)*c", {"ababc"}},
      {"a+b?c*", "a+b?c*", {"aabcc"}},
      {"[a-c]{2,3}x", "[a-c]{2,3}x", {"abcx"}},
      {"\\d{3}-\\d{4}", "\\d{3}-\\d{4}", {"019-1100"}},
      {"[^abc]+", "[^abc]+", {"xyz\n"}},
      {"\\w+@\\w+\\.(com|org)", "\\w+@\\w+\\.(com|org)", {"a_1@b.com"}},
      {"(?:ab|cd){1,3}", "(?:ab|cd){1,3}", {"abcdab"}},
      {"a.c", "a.c", {"a c"}},
      {"^[A-Z][a-z]*$", "^[A-Z][a-z]*$", {"Abc"}},
      {"\\s*\\S+", "\\s*\\S+", {" \tab"}},
      {"(a|ab)(c|bcd)(d*)", "(a|ab)(c|bcd)(d*)", {"abcd"}},
      {"[\\d\\-]+", "[\\d\\-]+", {"0-1"}},
      {"x{2,}", "x{2,}", {"xxx"}},
      {"(?P<year>\\d{4})-(?<m>\\d\\d)", "(\\d{4})-(\\d\\d)", {"1999-01"}},
      {"a+?b*?c??", "a+?b*?c??", {"aab"}},
      {"[.]\\.\\/\\*", "[.]\\.\\/\\*", {"../*"}},
      {"[^\\n]*", "[^\\n]*", {"ab c"}},
      {"\\x41\\u0042", "\\x41\\u0042", {"AB"}},
      {"(|a)b", "(|a)b", {"b", "ab"}},
      {"a{0}b", "a{0}b", {"b"}},
      {"[a\\-z]+", "[a\\-z]+", {"a-z"}},
      {"[-a]{2}", "[-a]{2}", {"-a"}},
      {"\\D\\W", "\\D\\W", {"a "}},
      {"(x(y|z)*){2}", "(x(y|z)*){2}", {"xyzx"}},
      {"[\\s\\d]+|[^\\s\\d]", "[\\s\\d]+|[^\\s\\d]", {" 1"}},
      {"a{1,3}{2}", "(?:a{1,3}){2}", {"aaaa"}},
  };
}

TEST(Regex, AgreesWithStdRegexOnRandomStrings) {
  std::mt19937 rng(17);
  for (const Pattern& p : patterns()) {
    SCOPED_TRACE("pattern " + p.pattern);
    if (p.pattern == "a{1,3}{2}") {  // doubled quantifier: refused (std::regex differs too)
      EXPECT_THROW(regex_to_gbnf(p.pattern), GrammarError);
      continue;
    }
    const GrammarMatcher m = matcher_for(regex_to_gbnf(p.pattern));
    const std::regex reference(p.reference, std::regex::ECMAScript);
    for (const std::string& e : p.examples) {
      ASSERT_TRUE(std::regex_match(e, reference)) << e;
      EXPECT_TRUE(matches(m, e)) << e;
    }
    int positives = 0;
    for (int i = 0; i < kStringsPerPattern; ++i) {
      std::string s = random_string(rng, m, i % 2 == 0);
      if (i % 3 == 0) s = mutate(rng, s);
      const bool expected = std::regex_match(s, reference);
      positives += expected;
      ASSERT_EQ(matches(m, s), expected) << "string '" << s << "'";
    }
    EXPECT_GE(positives, 3);  // the guided strings do reach matches
  }
}

// Every string over `alphabet` of at most `max_len` characters.
std::vector<std::string> all_strings(std::string_view alphabet, size_t max_len) {
  std::vector<std::string> out{""};
  for (size_t from = 0; from < out.size() && out[from].size() < max_len; ++from) {
    for (char c : alphabet) out.push_back(out[from] + c);
  }
  return out;
}

// Repetitions of something that can match empty (the grammar fuzzer's "c(|b)*[x-z]{2}"): they
// compile (no left-recursive GBNF) and match exactly what std::regex_match matches, checked on
// every short string; `python_count` is how many of them Python's re.fullmatch accepts.
TEST(Regex, RepeatedEmptyMatchesAgreeOnEveryShortString) {
  struct Case {
    std::string pattern;
    std::string alphabet;
    size_t max_len;
    int python_count;
  };
  const std::vector<Case> cases = {
      {"c(|b)*[x-z]{2}", "bcxy", 6, 16},
      {"(a|)*", "ab", 6, 7},
      {"(a?)*", "ab", 6, 7},
      {"(a*)+", "ab", 6, 7},
      {"(|)+", "a", 3, 1},
      {"(a|b?){2,}", "abc", 6, 127},
      {"(a?b?)*c", "abc", 6, 63},
      {"((a|)*b?)+", "abc", 5, 63},
      {"(ab?|c*){2,}d?", "abcd", 6, 407},
      {"((ab)*|c)+d", "abcd", 6, 20},
      {"(a?){3,}b", "ab", 6, 6},
      {"(x*)*?y", "xy", 6, 6},
      {"(a{0}|b)*c", "abc", 6, 6},
      {"(a?b?){2}", "abc", 6, 12},
      {"(a?b?){1,3}c?", "abc", 6, 65},
      {"(a?){0,3}", "ab", 6, 4},
      {"(|a)?b*", "ab", 6, 13},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("pattern " + c.pattern);
    const GrammarMatcher m = matcher_for(regex_to_gbnf(c.pattern));
    const std::regex reference(c.pattern, std::regex::ECMAScript);
    int count = 0;
    for (const std::string& s : all_strings(c.alphabet, c.max_len)) {
      const bool expected = std::regex_match(s, reference);
      count += expected;
      ASSERT_EQ(matches(m, s), expected) << "string '" << s << "'";
    }
    EXPECT_EQ(count, c.python_count);
  }
}

TEST(Regex, RepeatedEmptyMatchRepeatsOnlyItsNonEmptyPart) {
  EXPECT_EQ(regex_to_gbnf("(|b)*"), "root ::= (\"b\")*\n");
  EXPECT_EQ(regex_to_gbnf("(a?)+"), "root ::= (\"a\")*\n");
  EXPECT_EQ(regex_to_gbnf("(|)+"), "root ::= \"\"\n");
  EXPECT_NO_THROW(matcher_for(regex_to_gbnf("(a|)*b", "root", false)));
}

TEST(Regex, UnanchoredIsSearch) {
  std::mt19937 rng(5);
  for (std::string pattern : {"ab", "^ab", "ab$", "^a|b$", "a\\d+", "^x*$", "(|b)*c", "^(a?)+$"}) {
    SCOPED_TRACE(pattern);
    const GrammarMatcher m = matcher_for(regex_to_gbnf(pattern, "root", false));
    const std::regex reference(pattern, std::regex::ECMAScript);
    for (int i = 0; i < 500; ++i) {
      const std::string s = random_string(rng, m, i % 2 == 0);
      ASSERT_EQ(matches(m, s), std::regex_search(s, reference)) << "string '" << s << "'";
    }
  }
}

TEST(Regex, NonAsciiClassesAndDot) {
  const GrammarMatcher m = matcher_for(regex_to_gbnf("[^a]\\u00e9."));
  EXPECT_TRUE(matches(m, "\xE2\x82\xAC\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(m, "a\xC3\xA9x"));
  EXPECT_FALSE(matches(m, "b\xC3\xA9\n"));
  EXPECT_TRUE(matches(matcher_for(regex_to_gbnf("caf\xC3\xA9+")), "caf\xC3\xA9\xC3\xA9"));
}

TEST(Regex, RulePrefixNamesTheRule) {
  const std::string gbnf = "root ::= \"<\" num \">\"\n" + regex_to_gbnf("\\d+", "num");
  EXPECT_TRUE(matches(matcher_for(gbnf), "<42>"));
  EXPECT_THROW(regex_to_gbnf("a", "bad name"), GrammarError);
}

void expect_error(std::string_view pattern, std::string_view fragment) {
  try {
    regex_to_gbnf(pattern);
    ADD_FAILURE() << "no error for: " << pattern;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << fragment;
  }
}

TEST(Regex, RefusedWithColumn) {
  expect_error("(ab", "regex column 1: unbalanced '('");
  expect_error("ab)", "regex column 3: unbalanced ')'");
  expect_error("(a)\\1", "regex column 4: backreferences");
  expect_error("a(?=b)", "regex column 2: lookaround");
  expect_error("a(?!b)", "regex column 2: lookaround");
  expect_error("(?<=a)b", "regex column 1: lookaround");
  expect_error("(?P=x)", "regex column 1: backreferences");
  expect_error("a^b", "regex column 2: anchor '^'");
  expect_error("a$b", "regex column 2: anchor '$'");
  expect_error("(^a)", "regex column 2: anchor '^'");
  expect_error("\\bfoo", "regex column 1: word boundary");
  expect_error("a{3,2}", "regex column 2: repetition {3,2}");
  expect_error("*a", "regex column 1: nothing to repeat");
  expect_error("a**", "regex column 3: nothing to repeat");
  expect_error("[b-a]", "regex column 2: character range is out of order");
  expect_error("[]", "regex column 2:");
  expect_error("[ab", "regex column 1: unterminated character class");
  expect_error("(?i)a", "regex column 1: unsupported group");
  expect_error("\\p{L}", "regex column 1: unsupported escape '\\p'");
  expect_error("a\\", "regex column 2:");
  expect_error("a{,3}", "regex column 2:");
}

}  // namespace
}  // namespace pagedserve::model::grammar
