// Fuzzes request bodies straight into the protocol layer (no HTTP framing to get right first):
// the first byte picks the endpoint (completions, chat, tokenize, detokenize) and the model
// (stories260K with the default ChatML template, or SmolLM2 with its own template and tools);
// the rest is the body.
//
// Checks: nothing throws (net/protocol returns errors as values); an accepted generation
// request is runnable (check_generation_request); every answer is valid JSON with an error
// message when it is an error; /tokenize's count equals its token list's length and every id
// is in the vocabulary.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "net/protocol/chat.h"
#include "net/protocol/completions.h"
#include "net/protocol/endpoints.h"
#include "tests/fuzz/served_models.h"

using namespace pagedserve;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::stories_model();
  fuzz::smollm_model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const net::ServedModel& served = (selector & 4) ? fuzz::smollm_model() : fuzz::stories_model();

  switch (selector & 3) {
    case 0:
    case 1: {
      net::Result<net::GenerationRequest> parsed = (selector & 3) == 0
                                                       ? net::parse_completion_request(body, served)
                                                       : net::parse_chat_request(body, served);
      if (parsed) {
        fuzz::check_generation_request(parsed.value(), served);
      } else {
        fuzz::check_response(net::error_response(parsed.error()));
      }
      break;
    }
    case 2: {
      const net::HttpResponse response = net::tokenize_response(body, served);
      fuzz::check_response(response);
      if (response.status == 200) {
        const nlohmann::json answer = nlohmann::json::parse(response.body);
        const nlohmann::json& tokens = answer.at("tokens");
        FUZZ_CHECK(answer.at("count") == tokens.size(), response.body);
        for (const nlohmann::json& id : tokens) {
          FUZZ_CHECK(id.is_number_integer() && id >= 0 && id < served.vocab_size, response.body);
        }
      }
      break;
    }
    case 3:
      fuzz::check_response(net::detokenize_response(body, served));
      break;
  }
  return 0;
}
