// Lexing and parsing: whitespace control with transformers' trim_blocks/lstrip_blocks,
// comments, raw blocks, literals, and the errors malformed or unsupported templates must
// produce (with line and column), including a seeded garbage-input loop that must never
// crash or throw anything but ChatTemplateError. Expected strings come from jinja2 3.1
// configured as transformers configures it.
#include <gtest/gtest.h>

#include <random>

#include "model/chat_template/chat_template.h"

namespace pagedserve::model {
namespace {

std::string render(std::string_view source,
                   const nlohmann::json& context = nlohmann::json::object()) {
  return ChatTemplate::parse(source).render(context);
}

// The message of the ChatTemplateError that parsing (or rendering) `source` throws.
std::string error_of(std::string_view source,
                     const nlohmann::json& context = nlohmann::json::object()) {
  try {
    render(source, context);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ChatTemplateWhitespace, TrimBlocksAndLstripBlocksAsTransformersSetsThem) {
  nlohmann::json ctx = {{"l", {1, 2}}};
  EXPECT_EQ(render("<ul>\n  {% for x in l %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n", ctx),
            "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");  // one trailing newline dropped too
  EXPECT_EQ(render("line1\n    {% if true %}\n    inner\n    {% endif %}\nline2"),
            "line1\n    inner\nline2");
  EXPECT_EQ(render("{% for x in [1,2] %}\n{{ x }}\n{% endfor %}\n"), "1\n2\n");
  // Neither applies to {{ }}: its indentation and following newline stay.
  EXPECT_EQ(render("  {{ 1 }}\n  {% if true %}\n  a\n{% endif %}\n\n"), "  1\n  a\n");
}

TEST(ChatTemplateWhitespace, DashAndPlusMarkers) {
  EXPECT_EQ(render("a  {%- if true %} b {% endif -%}  c\n  {# comment #}\n  d {{- ' e ' -}} f\n"),
            "a b c\n  d e f");
  EXPECT_EQ(render("x {%+ if true %}y{% endif +%}\nz"), "x y\nz");
  EXPECT_EQ(render("a\n{{- 'b' -}}\n\n c"), "abc");
}

TEST(ChatTemplateWhitespace, NewlinesAreNormalised) {
  EXPECT_EQ(render("a\r\nb {% if true %}\r\nc{% endif %}\r\n"), "a\nb c");
}

TEST(ChatTemplateSyntax, CommentsAndRaw) {
  EXPECT_EQ(render("a{# {{ not rendered }} #}b"), "ab");
  EXPECT_EQ(render("{% raw %}{{ kept }} {% if %}{% endraw %}"), "{{ kept }} {% if %}");
  EXPECT_EQ(render("{{ '{{' }}{{ '}}' }}{{ \"{%\" }}"), "{{}}{%");
  EXPECT_EQ(render("{{ {'x': {'y': 1}}['x']['y'] }}"), "1");  // }} inside brackets is not an end
}

TEST(ChatTemplateSyntax, Literals) {
  EXPECT_EQ(render("{{ 'a\\n\\t\\'\\\\' }}"), "a\n\t'\\");
  EXPECT_EQ(render("{{ '\\u00e9\\x41\\U0001F600' }}"),
            "\xc3\xa9"
            "A"
            "\xf0\x9f\x98\x80");
  EXPECT_EQ(render("{{ 'a' 'b' }} {{ 1_000 }} {{ 1.5e3 }} {{ True }} {{ none }} {{ [1, 'x'] }}"),
            "ab 1000 1500.0 True None [1, 'x']");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [none, true, 1.5]} }}"), "{'a': 1, 'b': [None, True, 1.5]}");
}

TEST(ChatTemplateErrors, UnsupportedConstructsAreNamedWithTheirPosition) {
  EXPECT_EQ(error_of("hi\n{% include 'x.jinja' %}"),
            "unsupported Jinja construct '{% include %}' at line 2, column 4");
  EXPECT_TRUE(contains(error_of("{% call foo() %}{% endcall %}"), "'{% call %}'"));
  EXPECT_TRUE(contains(error_of("{% extends 'base' %}"), "'{% extends %}'"));
  EXPECT_TRUE(contains(error_of("{% for x in y recursive %}{% endfor %}"), "recursive for loop"));
  EXPECT_TRUE(contains(error_of("{{ f(*args) }}"), "*args"));
  EXPECT_TRUE(contains(error_of("{{ x[1, 2] }}"), "tuple subscript"));
  EXPECT_TRUE(contains(error_of("{{ '%s' % x }}"), "printf-style"));
  EXPECT_TRUE(contains(error_of("{{ '{:>5}'.format(1) }}"), "format specs"));
}

TEST(ChatTemplateErrors, MalformedTemplates) {
  EXPECT_EQ(error_of("{% if x %}\nabc"),
            "chat template syntax error at line 1, column 4: unclosed '{% if %}' (missing "
            "'{% endif %}')");
  EXPECT_TRUE(contains(error_of("{% for x in y %}{% endif %}"), "unexpected '{% endif %}'"));
  EXPECT_TRUE(contains(error_of("a\n  {{ x"), "line 2, column 3: unclosed '{{'"));
  EXPECT_TRUE(contains(error_of("{{ 'abc }}"), "unterminated string"));
  EXPECT_TRUE(contains(error_of("{# never closed"), "unclosed comment"));
  EXPECT_TRUE(contains(error_of("{{ }}"), "expected an expression"));
  EXPECT_TRUE(contains(error_of("{{ x ]}}"), "unexpected ']'"));
  EXPECT_TRUE(contains(error_of("{% break %}"), "outside of a loop"));
  EXPECT_TRUE(contains(error_of("{% raw %}abc"), "missing '{% endraw %}'"));
  EXPECT_TRUE(
      contains(error_of("{% frobnicate %}"), "unsupported Jinja construct '{% frobnicate %}'"));
}

TEST(ChatTemplateErrors, UnknownFiltersAndTestsFailAtParseTime) {
  EXPECT_EQ(error_of("{{ x|nofilter }}"),
            "chat template syntax error at line 1, column 6: unknown filter 'nofilter'");
  EXPECT_TRUE(contains(error_of("{{ x is nothing }}"), "unknown test 'nothing'"));
  EXPECT_THROW(ChatTemplate::parse("{{ x|nofilter }}"), ChatTemplateError);
}

TEST(ChatTemplateErrors, DeepNestingIsAnErrorNotAStackOverflow) {
  EXPECT_TRUE(
      contains(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
               "nests too deeply"));
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
  EXPECT_TRUE(contains(error_of(ifs), "nests too deeply"));
  EXPECT_TRUE(contains(error_of("{{ " + std::string(5000, '-') + "1 }}"), "nests too deeply"));
  // Far more nesting than any real template still works.
  EXPECT_EQ(render("{{ " + std::string(40, '(') + "1" + std::string(40, ')') + " }}"), "1");
  std::string nested;
  for (int i = 0; i < 40; ++i) nested += "{% if true %}";
  nested += "deep";
  for (int i = 0; i < 40; ++i) nested += "{% endif %}";
  EXPECT_EQ(render(nested), "deep");
}

// Random templates from template-ish fragments, and random byte edits of a real template:
// parse and render must either succeed or throw ChatTemplateError.
TEST(ChatTemplateErrors, GarbageNeverCrashes) {
  const std::vector<std::string> fragments = {"{{",
                                              "}}",
                                              "{%",
                                              "%}",
                                              "{#",
                                              "#}",
                                              "-",
                                              "+",
                                              "{%-",
                                              "-%}",
                                              "if ",
                                              "for ",
                                              "in ",
                                              "endfor",
                                              "endif",
                                              "else",
                                              "elif",
                                              "set ",
                                              "=",
                                              "x",
                                              "messages",
                                              "loop",
                                              ".",
                                              "index",
                                              "[",
                                              "]",
                                              "(",
                                              ")",
                                              "'",
                                              "\"",
                                              "a",
                                              "1",
                                              "-1",
                                              ":",
                                              "|",
                                              "length",
                                              "tojson",
                                              "is ",
                                              "defined",
                                              "not ",
                                              "and ",
                                              "or ",
                                              "~",
                                              "*",
                                              "/",
                                              "//",
                                              "%",
                                              "**",
                                              ",",
                                              "{",
                                              "}",
                                              "\n",
                                              " ",
                                              "namespace(",
                                              "macro ",
                                              "endmacro",
                                              "raw",
                                              "endraw",
                                              "break",
                                              "continue",
                                              "ns.x",
                                              "[::-1]",
                                              "none",
                                              "range(",
                                              "'\\",
                                              "\\u12",
                                              "raise_exception(",
                                              "\xff",
                                              "\xc3"};
  const nlohmann::json context = {
      {"messages",
       {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}},
      {"x", 3},
      {"a", "str"}};
  std::mt19937 rng(1234);
  auto try_template = [&](const std::string& source) {
    try {
      ChatTemplate::parse(source).render(context);
    } catch (const ChatTemplateError&) {
    }
  };
  for (int i = 0; i < 20000; ++i) {
    std::string source;
    int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) source += fragments[rng() % fragments.size()];
    try_template(source);
  }
  const std::string real =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\\nYou are helpful<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
      "message['role'] + '\\n' + message['content'] | trim + '<|im_end|>' + '\\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  for (int i = 0; i < 20000; ++i) {
    std::string source = real;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !source.empty(); ++k) {
      size_t at = rng() % source.size();
      switch (rng() % 3) {
        case 0:
          source.erase(at, 1 + rng() % 8);
          break;
        case 1:
          source.insert(at, fragments[rng() % fragments.size()]);
          break;
        default:
          source[at] = static_cast<char>(rng() % 256);
      }
    }
    try_template(source);
  }
}

}  // namespace
}  // namespace pagedserve::model
