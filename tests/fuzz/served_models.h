// The served models the protocol harnesses parse against, loaded once per process from
// ../shared: stories260K (512 tokens, no chat template: the default ChatML one) and SmolLM2
// (49k byte-level tokens, its real chat template with tools). Also the checks every parsed
// request and every response body must pass, whichever endpoint produced them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/served_model.h"
#include "tests/fuzz/fuzz_util.h"

namespace pagedserve::fuzz {

inline const net::ServedModel& stories_model() {
  static const model::Tokenizer tokenizer =
      model::Tokenizer::from_dir(shared_dir() / "models" / "stories260K");
  static const net::ServedModel served = net::make_served_model(
      "stories260K", shared_dir() / "models" / "stories260K", tokenizer, 512);
  return served;
}

inline const net::ServedModel& smollm_model() {
  static const std::filesystem::path dir = shared_dir() / "tokenizers" / "smollm2-135m-instruct";
  static const model::Tokenizer tokenizer = model::Tokenizer::from_dir(dir);
  static const net::ServedModel served = net::make_served_model("smollm2", dir, tokenizer, 2048);
  return served;
}

// A request the parser accepted must be one the engine can run: at least one prompt, every
// prompt non-empty with ids in the vocabulary, prompt + max_tokens within the context.
inline void check_generation_request(const net::GenerationRequest& request,
                                     const net::ServedModel& served) {
  FUZZ_CHECK(!request.prompts.empty(), "accepted a request without prompts");
  FUZZ_CHECK(request.prompt_texts.size() == request.prompts.size(), "prompt_texts size");
  FUZZ_CHECK(request.n >= 1, "n = " + std::to_string(request.n));
  for (const actors::GenerateRequest& prompt : request.prompts) {
    const auto& ids = prompt.prompt_token_ids;
    FUZZ_CHECK(!ids.empty(), "accepted an empty prompt");
    for (int32_t id : ids) {
      FUZZ_CHECK(id >= 0 && id < served.vocab_size, "token id " + std::to_string(id));
    }
    FUZZ_CHECK(prompt.sampling.max_tokens >= 0, "negative max_tokens");
    FUZZ_CHECK(
        static_cast<int64_t>(ids.size()) + prompt.sampling.max_tokens <= served.max_model_len,
        "prompt " + std::to_string(ids.size()) + " + max_tokens " +
            std::to_string(prompt.sampling.max_tokens) + " exceeds the context");
    FUZZ_CHECK(prompt.sampling.n == request.n, "sampling.n differs from n");
  }
}

// Every JSON answer parses, and an error answer is OpenAI's {"error": {"message": "..."}}.
inline void check_response(const net::HttpResponse& response) {
  FUZZ_CHECK(response.status >= 200 && response.status <= 599,
             "status " + std::to_string(response.status));
  if (response.content_type != "application/json") return;
  const nlohmann::json body = nlohmann::json::parse(response.body, nullptr, false);
  FUZZ_CHECK(!body.is_discarded(), "response body is not JSON: " + response.body);
  if (response.status >= 400) {
    FUZZ_CHECK(body.contains("error") && body["error"].is_object() &&
                   body["error"].contains("message") && body["error"]["message"].is_string() &&
                   !body["error"]["message"].get<std::string>().empty(),
               "error body without a message: " + response.body);
  }
}

}  // namespace pagedserve::fuzz
