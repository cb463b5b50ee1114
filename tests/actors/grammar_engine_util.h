// Compiling a grammar for an engine's tokenizer, for the engine tests of structured outputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/llm_engine.h"
#include "model/grammar/grammar.h"
#include "model/grammar/matcher.h"

namespace pagedserve::actors::testing_util {

inline std::shared_ptr<const model::grammar::CompiledGrammar> compile_grammar(
    const LlmEngine& engine, const std::string& gbnf) {
  const model::Tokenizer& tokenizer = engine.tokenizer();
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[id] = tokenizer.token_bytes_after_text(id);
  }
  auto vocab = std::make_shared<const model::grammar::TokenVocabulary>(
      std::move(bytes), std::vector<int32_t>{*tokenizer.eos_token_id()});
  return model::grammar::CompiledGrammar::compile(model::grammar::parse_gbnf(gbnf), vocab);
}

}  // namespace pagedserve::actors::testing_util
