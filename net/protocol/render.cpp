// /v1/completions/render and /v1/chat/completions/render (see render.h).
#include "net/protocol/render.h"

#include "net/protocol/chat.h"
#include "net/protocol/completions.h"
#include "net/protocol/response_assembler.h"

namespace pagedserve::net {
namespace {

using nlohmann::ordered_json;

// The sampling fields the engine acts on, under vLLM's SamplingParams names.
ordered_json sampling_params_json(const model::SamplingParams& s) {
  ordered_json out;
  out["n"] = s.n;
  out["best_of"] = s.best_of ? ordered_json(*s.best_of) : ordered_json(nullptr);
  out["presence_penalty"] = s.presence_penalty;
  out["frequency_penalty"] = s.frequency_penalty;
  out["repetition_penalty"] = s.repetition_penalty;
  out["temperature"] = s.temperature;
  out["top_p"] = s.top_p;
  out["top_k"] = s.top_k;
  out["min_p"] = s.min_p;
  out["seed"] = s.seed ? ordered_json(*s.seed) : ordered_json(nullptr);
  out["stop"] = s.stop;
  out["stop_token_ids"] = s.stop_token_ids;
  out["ignore_eos"] = s.ignore_eos;
  out["max_tokens"] = s.max_tokens;
  out["min_tokens"] = s.min_tokens;
  out["logprobs"] = s.logprobs ? ordered_json(*s.logprobs) : ordered_json(nullptr);
  return out;
}

}  // namespace

ordered_json generate_request_json(const GenerationRequest& request, size_t index) {
  const actors::GenerateRequest& prompt = request.prompts.at(index);
  ordered_json out;
  out["request_id"] = make_response_id(request.endpoint);
  out["token_ids"] = prompt.prompt_token_ids;
  out["features"] = nullptr;  // text only: no multimodal placeholders
  out["sampling_params"] = sampling_params_json(prompt.sampling);
  out["model"] = request.model;
  out["stream"] = request.stream;
  out["stream_options"] =
      request.stream ? ordered_json{{"include_usage", request.include_usage}} : ordered_json();
  out["cache_salt"] = nullptr;
  out["priority"] = 0;
  out["kv_transfer_params"] = nullptr;
  return out;
}

HttpResponse render_response(Endpoint endpoint, std::string_view body, const ServedModel& served) {
  Result<GenerationRequest> parsed = endpoint == Endpoint::kChat
                                         ? parse_chat_request(body, served)
                                         : parse_completion_request(body, served);
  if (!parsed) return error_response(parsed.error());
  const GenerationRequest& request = parsed.value();
  for (const actors::GenerateRequest& prompt : request.prompts) {
    if (prompt.sampling.use_beam_search) {
      return error_response(invalid_request("Beam search is not supported by the render endpoint",
                                            "use_beam_search"));
    }
  }
  if (endpoint == Endpoint::kChat) return json_response(generate_request_json(request, 0));
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    out.push_back(generate_request_json(request, i));
  }
  return json_response(out);
}

}  // namespace pagedserve::net
