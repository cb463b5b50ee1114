// Grammars for constrained decoding: one byte-level context-free grammar (llama.cpp's GBNF
// semantics) under every kind of constraint a request can carry. GBNF text is parsed here;
// regular expressions, choices and JSON schemas are translated to GBNF text first
// (regex_to_gbnf, choice_to_gbnf, json_schema.h), so one parser and one matcher serve all.
// Pure: no I/O, no threads.
#pragma once

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pagedserve::model::grammar {

// A grammar, regex or schema that cannot be built. The message says where, e.g.
// "grammar line 3, column 7: expected '::='", "regex column 4: unbalanced ')'",
// "json schema at /properties/age: unsupported keyword 'multipleOf'"; the HTTP layer returns it
// as a 400.
class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A parsed grammar: rules of alternatives of elements over bytes (a character class over
// Unicode code points is expanded to its UTF-8 byte sequences), repetitions expanded into
// helper rules. Immutable once built; shared by every sequence that uses it.
class Grammar;

// Largest grammar text accepted (bytes); larger inputs are refused with a GrammarError.
inline constexpr size_t kMaxGrammarBytes = 256 * 1024;

// GBNF as llama.cpp defines it (grammars/README.md): `name ::= alternatives`, "literals" with
// \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes, [classes] and [^negated] over code points,
// `.` (any code point), ( groups ), `|`, `*` `+` `?` `{m}` `{m,}` `{m,n}`, `#` comments.
// Throws GrammarError naming line and column (undefined rule, missing root, left recursion
// the matcher cannot run, bad escape, ...).
std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");

// A regular expression (the common subset of Python's `re` and ECMAScript that vLLM's
// guided_regex and JSON Schema `pattern` use) as GBNF rules matching the WHOLE output.
// `rule_prefix` names the rules it defines (so several patterns can live in one grammar);
// the rule matching the pattern is `rule_prefix` itself. Throws GrammarError naming the column
// of anything unsupported (backreferences, lookaround, ...).
std::string regex_to_gbnf(std::string_view pattern, std::string_view rule_prefix = "root");
// The same with a choice of semantics: anchored (as above) matches the whole output; unanchored
// is JSON Schema's `pattern` (ECMAScript search): the output must CONTAIN a match, i.e. each
// top-level alternative is surrounded by any text unless it starts with ^ / ends with $.
std::string regex_to_gbnf(std::string_view pattern, std::string_view rule_prefix, bool anchored);

// GBNF whose root matches exactly one of `choices` (vLLM's guided_choice).
std::string choice_to_gbnf(std::span<const std::string> choices);

// A GBNF string literal for `text` (quoted and escaped), for code that writes grammars.
std::string gbnf_literal(std::string_view text);

}  // namespace pagedserve::model::grammar
