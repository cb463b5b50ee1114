// parse_gbnf and the byte-level matcher: accept/reject tables for each construct, UTF-8 classes,
// repetition bounds, recursion, and every kind of error with its place.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tests/model/grammar/grammar_test_util.h"

namespace pagedserve::model::grammar {
namespace {

using testing::is_prefix;
using testing::matcher_for;
using testing::matches;

struct Case {
  std::string text;
  bool accepted;
};

void expect_table(std::string_view gbnf, const std::vector<Case>& cases) {
  const GrammarMatcher m = matcher_for(gbnf);
  for (const Case& c : cases)
    EXPECT_EQ(matches(m, c.text), c.accepted)
        << "grammar: " << gbnf << "\ntext: '" << c.text << "'";
}

TEST(Gbnf, Literals) {
  expect_table(R"(root ::= "ab" "c")",
               {{"abc", true}, {"ab", false}, {"abcd", false}, {"", false}});
  expect_table(
      R"(root ::= "\n\t\"\\\x41\u00e9\U0001F600")",
      {{"\n\t\"\\A\xC3\xA9\xF0\x9F\x98\x80", true}, {"\n\t\"\\A\xE9\xF0\x9F\x98\x80", false}});
  expect_table("root ::= \"h\xC3\xA9\" # raw UTF-8 in a literal",
               {{"h\xC3\xA9", true}, {"he", false}});
  expect_table(R"(root ::= "")", {{"", true}, {"a", false}});
}

TEST(Gbnf, Classes) {
  expect_table("root ::= [a-c0-9_]", {{"a", true},
                                      {"c", true},
                                      {"5", true},
                                      {"_", true},
                                      {"d", false},
                                      {"A", false},
                                      {"ab", false}});
  expect_table(R"(root ::= [^"\\])", {{"a", true},
                                      {"\"", false},
                                      {"\\", false},
                                      {"\n", true},
                                      {"\xC3\xA9", true},
                                      {"\xE2\x82\xAC", true},
                                      {"\xF0\x9F\x98\x80", true},
                                      {"\xC3", false},
                                      {"\xED\xA0\x80", false},        // a surrogate: invalid UTF-8
                                      {"\xC0\xAF", false},            // overlong
                                      {"\xF4\x90\x80\x80", false}});  // over U+10FFFF
  expect_table("root ::= [\xC3\xA0-\xC3\xBF\\u4e00-\\u9fff]", {{"\xC3\xA0", true},
                                                               {"\xC3\xBF", true},
                                                               {"\xC3\x9F", false},
                                                               {"\xE4\xB8\x80", true},
                                                               {"\xE9\xBF\xBF", true},
                                                               {"\xEA\x80\x80", false},
                                                               {"a", false}});
  expect_table(
      "root ::= [^\xC3\xA9"
      "a-z]",
      {{"\xC3\xA9", false}, {"\xC3\xA8", true}, {"q", false}, {"Q", true}, {"\xE2\x82\xAC", true}});
  expect_table("root ::= .", {{"a", true},
                              {"\n", true},
                              {"\xF4\x8F\xBF\xBF", true},
                              {"", false},
                              {"\xFF", false},
                              {"ab", false}});
  expect_table("root ::= [a-]", {{"a", true}, {"-", true}, {"b", false}});
  expect_table(R"(root ::= [\]\[\x41])", {{"]", true}, {"[", true}, {"A", true}, {"B", false}});
}

TEST(Gbnf, RepetitionBounds) {
  expect_table(R"(root ::= "a"{2,4})",
               {{"a", false}, {"aa", true}, {"aaa", true}, {"aaaa", true}, {"aaaaa", false}});
  expect_table(R"(root ::= "ab"{3})", {{"abab", false}, {"ababab", true}, {"abababab", false}});
  expect_table(R"(root ::= "a"{2,})", {{"a", false}, {"aa", true}, {std::string(50, 'a'), true}});
  expect_table(
      R"(root ::= "a"{0,1000} "b")",
      {{"b", true}, {std::string(1000, 'a') + "b", true}, {std::string(1001, 'a') + "b", false}});
  expect_table(R"(root ::= "a"* "b"+ "c"?)",
               {{"b", true}, {"aabbc", true}, {"aac", false}, {"bcc", false}});
  expect_table(R"(root ::= ("x" | "yz"){ 1 , 2 })",
               {{"x", true}, {"yzx", true}, {"", false}, {"xxx", false}});
}

TEST(Gbnf, AlternationGroupsAndForwardReferences) {
  expect_table(
      R"(
root ::= greeting (" " name)?   # rules may come after use
greeting ::= "hi" | "hello"
name ::= (
    [A-Z]
    [a-z]*
  )
)",
      {{"hi", true}, {"hello Bob", true}, {"hello bob", false}, {"hey", false}, {"hi ", false}});
  expect_table("root ::= \"a\" |\n  \"b\"", {{"a", true}, {"b", true}, {"ab", false}});
}

TEST(Gbnf, RecursionBalancedParentheses) {
  const GrammarMatcher m = matcher_for(R"g(root ::= "(" root ")" root | "")g");
  for (std::string s : std::vector<std::string>{"", "()", "(())", "()()", "(()(()))",
                                                std::string(200, '(') + std::string(200, ')')})
    EXPECT_TRUE(matches(m, s)) << s;
  for (std::string s : {"(", ")", "(()", "())", ")("}) EXPECT_FALSE(matches(m, s)) << s;
  EXPECT_TRUE(is_prefix(m, "((("));
  EXPECT_FALSE(is_prefix(m, "())"));
}

TEST(Gbnf, CanEndAndMustEnd) {
  GrammarMatcher m = matcher_for(R"(root ::= "ab" "c"?)");
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  EXPECT_FALSE(m.accept_bytes("cd"));  // all or nothing
  EXPECT_TRUE(m.can_end());
  ASSERT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.accept_bytes("c"));
}

void expect_error(std::string_view gbnf, std::string_view fragment) {
  try {
    parse_gbnf(gbnf);
    ADD_FAILURE() << "no error for: " << gbnf;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << fragment;
  }
}

TEST(Gbnf, SyntaxErrorsNameLineAndColumn) {
  expect_error("root ::= \"a\"\nfoo = \"b\"", "grammar line 2, column 5: expected '::='");
  expect_error("root ::= \"abc", "grammar line 1, column 10: unterminated string literal");
  expect_error("root ::= [a-z", "grammar line 1, column 10: unterminated character class");
  expect_error("root ::= (\"a\" | \"b\"", "grammar line 1, column 20: expected ')'");
  expect_error("root ::= \"\\q\"", "grammar line 1, column 11: unknown escape '\\q'");
  expect_error("root ::= \"\\x4\"", "grammar line 1, column 11: escape '\\x' needs 2 hex digits");
  expect_error("root ::= [z-a]", "grammar line 1, column 11: character range is out of order");
  expect_error("root ::= \"a\"{3,2}",
               "grammar line 1, column 13: repetition {3,2}: minimum exceeds");
  expect_error("root ::= * \"a\"", "grammar line 1, column 10: expected an item before '*'");
  expect_error("root ::= \"a\"\n  \"b\"", "grammar line 2, column 3: expected a rule name");
  expect_error("root ::= \"a\" )", "grammar line 1, column 14: unexpected ')'");
  expect_error("root ::= \"a\"\nroot ::= \"b\"",
               "grammar line 2, column 1: rule 'root' is defined twice");
  expect_error("root ::= \"\\uD800\"", "surrogate");
  expect_error("root ::= \"\xFF\"", "grammar line 1, column 11: invalid UTF-8");
}

TEST(Gbnf, SemanticErrors) {
  expect_error("root ::= other \"x\"\n\nother ::= \"y\" missing",
               "grammar line 3, column 15: undefined rule 'missing'");
  expect_error("item ::= \"x\"", "no rule 'root'");
  expect_error("", "grammar is empty");
  expect_error("  # only a comment\n", "grammar is empty");
  expect_error("root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]+",
               "left recursion in rule 'expr'");
  expect_error("root ::= a\na ::= b? a \"x\" | \"y\"\nb ::= \"b\"", "left recursion in rule 'a'");
  expect_error("root ::= (\"a\"?)*", "left recursion in rule 'root~");
  expect_error("root ::= \"" + std::string(kMaxGrammarBytes, 'a') + "\"", "over the limit");
  try {
    parse_gbnf("root ::= \"a\"", "start");
    ADD_FAILURE();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("no rule 'start'"), std::string::npos);
  }
}

TEST(Gbnf, LiteralAndChoiceWriters) {
  EXPECT_EQ(gbnf_literal("a\"b\\c\n\x01"), R"("a\"b\\c\n\x01")");
  const std::vector<std::string> choices{"yes", "no", "\"quoted\"\n", "caf\xC3\xA9"};
  const GrammarMatcher m = matcher_for(choice_to_gbnf(choices));
  for (const std::string& c : choices) EXPECT_TRUE(matches(m, c)) << c;
  EXPECT_FALSE(matches(m, "ye"));
  EXPECT_FALSE(matches(m, "yesno"));
  EXPECT_THROW(choice_to_gbnf(std::vector<std::string>{}), GrammarError);
  EXPECT_THROW(gbnf_literal("\xFF"), GrammarError);
}

TEST(Gbnf, CopiesAreIndependent) {
  GrammarMatcher a = matcher_for(R"(root ::= "x" ("1" | "2") "y")");
  ASSERT_TRUE(a.accept_bytes("x"));
  GrammarMatcher b = a;
  ASSERT_TRUE(a.accept_bytes("1"));
  ASSERT_TRUE(b.accept_bytes("2"));
  EXPECT_FALSE(a.accept_bytes("2"));
  EXPECT_TRUE(a.accept_bytes("y"));
  EXPECT_TRUE(b.accept_bytes("y"));
  EXPECT_TRUE(a.can_end() && b.can_end());
  GrammarMatcher c = std::move(b);
  EXPECT_TRUE(c.can_end());
}

}  // namespace
}  // namespace pagedserve::model::grammar

namespace pagedserve::model::grammar {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string hex_escape(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  return buf;
}

// Random classes of code point ranges (all lengths of UTF-8) against direct range membership.
TEST(Gbnf, RandomUnicodeClassesAgreeWithRangeMembership) {
  std::mt19937 rng(42);
  const auto random_cp = [&]() -> uint32_t {
    static const uint32_t kLimits[] = {0x80, 0x800, 0x10000, 0x110000};
    uint32_t cp;
    do {
      cp = rng() % kLimits[rng() % 4];
    } while (cp >= 0xD800 && cp <= 0xDFFF);
    return cp;
  };
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    std::string cls;
    const int n = 1 + static_cast<int>(rng() % (trial < 50 ? 6 : 300));  // large: DFA fallback
    for (int i = 0; i < n; ++i) {
      uint32_t lo = random_cp(), hi = lo + rng() % (trial % 2 ? 3 : 5000);
      if (hi > 0x10FFFF) hi = 0x10FFFF;
      ranges.push_back({lo, hi});
      cls += hex_escape(lo) + "-" + hex_escape(hi);
    }
    const bool negated = trial % 3 == 0;
    const GrammarMatcher m =
        testing::matcher_for("root ::= [" + std::string(negated ? "^" : "") + cls + "]");
    for (int i = 0; i < 300; ++i) {
      uint32_t cp = random_cp();
      if (i % 2 == 0) {  // near a range edge
        const auto& r = ranges[rng() % ranges.size()];
        cp = (i % 4 == 0 ? r.first : r.second) + (rng() % 3) - 1;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
      }
      bool in = false;
      for (const auto& r : ranges) in |= cp >= r.first && cp <= r.second;
      ASSERT_EQ(testing::matches(m, utf8(cp)), in != negated)
          << "trial " << trial << " U+" << std::hex << cp;
    }
  }
}

TEST(Gbnf, LongRepetitionChains) {
  const GrammarMatcher m = testing::matcher_for(R"(root ::= ("ab"){0,20000} "c")");
  EXPECT_TRUE(testing::matches(m, [] {
    std::string s;
    for (int i = 0; i < 20000; ++i) s += "ab";
    return s + "c";
  }()));
  EXPECT_FALSE(testing::matches(m, "abac"));
}

}  // namespace
}  // namespace pagedserve::model::grammar

namespace pagedserve::model::grammar {
namespace {

// Ambiguous grammars reach one state by many paths; equal stacks must be merged, or the
// number of stacks multiplies with every byte (these took minutes before stacks were interned).
TEST(Gbnf, AmbiguousGrammarsStayPolynomial) {
  const std::string a200(200, 'a');
  EXPECT_TRUE(testing::matches(testing::matcher_for(R"(root ::= ("a"?){0,300})"), a200));
  EXPECT_FALSE(testing::matches(testing::matcher_for(R"(root ::= ("a"?){0,300})"), a200 + a200));
  EXPECT_TRUE(testing::matches(testing::matcher_for(R"(root ::= ("a" | "a")* "b")"), a200 + "b"));
  EXPECT_TRUE(
      testing::matches(testing::matcher_for("root ::= x* x*\nx ::= \"a\" | \"a\" | \"aa\""), a200));
}

}  // namespace
}  // namespace pagedserve::model::grammar
