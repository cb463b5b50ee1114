// ServedModel: what the protocol layer knows about the one model the server serves (its
// name, limits, tokenizer and chat template). Built once at start-up by the server, then
// read-only and shared by every request handler on every thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/chat_template/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "net/protocol/grammar_cache.h"
#include "net/protocol/request_limits.h"
#include "net/protocol/tool_calls.h"

namespace pagedserve::net {

struct ServedModel {
  std::string name;                                  // the `model` clients send and get back
  int max_model_len = 0;                             // prompt + completion tokens, at most
  int vocab_size = 0;                                // token ids must be in [0, vocab_size)
  RequestLimits limits;                              // the operator's caps (serve flags)
  const model::Tokenizer* tokenizer = nullptr;       // not owned; outlives the server
  std::optional<model::ChatTemplate> chat_template;  // nullopt: model::kDefaultChatTemplate
  std::string bos_token;                             // passed to the chat template
  std::string eos_token;                             // passed to the chat template
  int64_t created = 0;                               // unix seconds, shown by /v1/models
  // How this model writes tool calls (chat requests with tools are parsed, and forced calls
  // constrained, in this format): the --tool-call-parser flag, else what the chat template
  // shows, else Hermes (the ChatML default template's family).
  ToolCallFormat tool_call_format = ToolCallFormat::kHermes;
  // Compiled grammars of structured outputs, shared by all requests (thread-safe); their end
  // tokens are the ids that end a sequence.
  std::shared_ptr<GrammarCache> grammars;
};

// Fills a ServedModel from a model directory: the chat template (load_chat_template), BOS/EOS
// strings, vocab size and grammar cache from `tokenizer`. `eos_token_ids`: the ids that end a
// sequence (the engine's list); empty: the tokenizer's EOS. Throws model::ChatTemplateError
// for a template that does not parse (the server should refuse to start rather than fail every
// chat).
ServedModel make_served_model(std::string name, const std::filesystem::path& model_dir,
                              const model::Tokenizer& tokenizer, int max_model_len,
                              std::vector<int32_t> eos_token_ids = {});

// The template chat requests use: the model's, else the parsed kDefaultChatTemplate.
const model::ChatTemplate& chat_template_of(const ServedModel& served);

}  // namespace pagedserve::net
