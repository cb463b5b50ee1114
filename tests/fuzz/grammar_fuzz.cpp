// Fuzzes the structured-output compilers and the token matcher. The first byte picks the
// compiler (GBNF, anchored or unanchored regex, JSON schema, guided_choice as NUL-separated
// choices); the text follows up to the next NUL; the bytes after it steer a walk through the
// grammar over a small vocabulary (single bytes, JSON words, multi-byte and partial UTF-8).
//
// Checks: GrammarError is the only exception a compiler throws (grammar.h; for a JSON schema
// the text must first be JSON); whatever a regex, schema or choice list compiles to is GBNF
// that parse_gbnf accepts; at every step of the walk the mask agrees with accept_token on a
// copy of the matcher for every id (allowed exactly when accepted), accept_token on a
// non-end token agrees with accept_bytes of its bytes, the end token is allowed exactly when
// can_end(), min_completion_bytes() is 0 exactly when can_end(), and a terminated matcher
// allows nothing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "tests/fuzz/fuzz_util.h"

using namespace pagedserve;
namespace grammar = pagedserve::model::grammar;

namespace {

const std::shared_ptr<const grammar::TokenVocabulary>& vocabulary() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (char c : std::string_view("abcxyzAZ0129-+.eE _\"\\{}[],:\n/")) tokens.emplace_back(1, c);
    for (const char* word :
         {"true", "false", "null", "\":", "\",", "ab", "{\"", "\"}", "12", "\xc3\xa9",
          "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\xc3", "\xa9", "\xff", "aaaa"}) {
      tokens.emplace_back(word);
    }
    tokens.emplace_back("");  // a special token: never allowed
    tokens.emplace_back("");  // the end token
    const int32_t end = static_cast<int32_t>(tokens.size()) - 1;
    return std::make_shared<const grammar::TokenVocabulary>(std::move(tokens),
                                                            std::vector<int32_t>{end});
  }();
  return vocab;
}

// The GBNF for `text` in the compiler `kind` picks, or nullopt when it refuses the text.
std::optional<std::string> to_gbnf(uint8_t kind, std::string_view text) {
  try {
    switch (kind % 5) {
      case 0:
        return std::string(text);
      case 1:
        return grammar::regex_to_gbnf(text, "root", true);
      case 2:
        return grammar::regex_to_gbnf(text, "root", false);
      case 3: {
        const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
        if (schema.is_discarded()) return std::nullopt;
        grammar::JsonSchemaOptions options;
        options.default_additional_properties = (kind & 0x80) != 0;
        return grammar::json_schema_to_gbnf(schema, options);
      }
      default: {
        std::vector<std::string> choices;
        size_t start = 0;
        for (size_t i = 0; i <= text.size(); ++i) {
          if (i == text.size() || text[i] == '\n') {
            choices.emplace_back(text.substr(start, i - start));
            start = i + 1;
          }
        }
        return grammar::choice_to_gbnf(choices);
      }
    }
  } catch (const grammar::GrammarError&) {
    return std::nullopt;
  }
}

void check_state(const grammar::GrammarMatcher& matcher) {
  const auto& vocab = *vocabulary();
  std::vector<uint32_t> mask(grammar::bitmask_words(vocab.size()));
  matcher.fill_next_token_bitmask(mask);
  const bool can_end = matcher.can_end();
  FUZZ_CHECK((matcher.min_completion_bytes() == 0) == can_end, "min_completion_bytes vs can_end");
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
    const bool allowed = (mask[id / 32] >> (id % 32)) & 1;
    if (matcher.is_terminated()) FUZZ_CHECK(!allowed, "a token after termination");
    if (vocab.is_end_token(id) && !matcher.is_terminated()) {
      FUZZ_CHECK(allowed == can_end, "end token allowed != can_end()");
    }
    grammar::GrammarMatcher by_token = matcher;
    FUZZ_CHECK(by_token.accept_token(id) == allowed,
               "mask and accept_token disagree on id " + std::to_string(id));
    if (!vocab.is_end_token(id) && !vocab.bytes(id).empty() && !matcher.is_terminated()) {
      grammar::GrammarMatcher by_bytes = matcher;
      FUZZ_CHECK(by_bytes.accept_bytes(vocab.bytes(id)) == allowed,
                 "accept_bytes and accept_token disagree on id " + std::to_string(id));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view walk =
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  const std::optional<std::string> gbnf = to_gbnf(data[0], text);
  if (!gbnf) return 0;
  std::shared_ptr<const grammar::Grammar> parsed;
  try {
    parsed = grammar::parse_gbnf(*gbnf);
  } catch (const grammar::GrammarError& e) {
    // Only hand-written GBNF may be refused; a refusal of generated GBNF is a bug (it was one:
    // "c(|b)*[x-z]{2}" compiled to left-recursive GBNF, tests/fuzz/regressions/grammar/).
    FUZZ_CHECK(data[0] % 5 == 0,
               "generated GBNF does not parse: " + std::string(e.what()) + "\n" + *gbnf);
    return 0;
  }
  grammar::GrammarMatcher matcher(grammar::CompiledGrammar::compile(parsed, vocabulary()));
  const auto& vocab = *vocabulary();
  check_state(matcher);
  for (size_t step = 0; step < walk.size() && step < 24; ++step) {
    std::vector<uint32_t> mask(grammar::bitmask_words(vocab.size()));
    matcher.fill_next_token_bitmask(mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
      if ((mask[id / 32] >> (id % 32)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    const int32_t id = allowed[static_cast<uint8_t>(walk[step]) % allowed.size()];
    FUZZ_CHECK(matcher.accept_token(id), "an allowed token was refused");
    check_state(matcher);
  }
  return 0;
}
