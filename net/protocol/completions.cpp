// Parsing POST /v1/completions bodies (see completions.h).
#include "net/protocol/completions.h"

#include "net/protocol/structured_output.h"

#include <climits>

namespace pagedserve::net {

namespace {

struct RawPrompt {
  std::string text;                // set for a string prompt
  std::vector<int32_t> token_ids;  // set for a token prompt
  bool is_tokens = false;
};

// A list of token ids as one prompt, or nullopt (error recorded) when an item is not an id.
std::optional<RawPrompt> token_prompt(const nlohmann::json& list, const ServedModel& served,
                                      FieldReader& fields) {
  RawPrompt prompt;
  prompt.is_tokens = true;
  for (const nlohmann::json& item : list) {
    std::optional<int64_t> id = json_to_integer(item, INT32_MIN, INT32_MAX);
    if (!id) {
      fields.fail(invalid_request(
          "prompt must be a string, a list of token ids, or a list of strings or token-id lists",
          "prompt"));
      return std::nullopt;
    }
    prompt.token_ids.push_back(static_cast<int32_t>(*id));
  }
  if (auto error = check_token_ids(prompt.token_ids, served, "prompt")) {
    fields.fail(std::move(*error));
    return std::nullopt;
  }
  return prompt;
}

std::vector<RawPrompt> read_prompts(FieldReader& fields, const ServedModel& served) {
  const nlohmann::json* value = fields.find("prompt");
  if (!value) {
    fields.fail(invalid_request("prompt is required", "prompt"));
    return {};
  }
  const std::string kShape =
      "prompt must be a string, a list of token ids, or a list of strings or token-id lists";
  std::vector<RawPrompt> prompts;
  if (value->is_string()) {
    prompts.push_back(RawPrompt{value->get<std::string>(), {}, false});
  } else if (value->is_array() && !value->empty() && value->front().is_number()) {
    if (auto prompt = token_prompt(*value, served, fields)) prompts.push_back(std::move(*prompt));
  } else if (value->is_array()) {
    for (const nlohmann::json& item : *value) {
      if (item.is_string()) {
        prompts.push_back(RawPrompt{item.get<std::string>(), {}, false});
      } else if (item.is_array()) {
        auto prompt = token_prompt(item, served, fields);
        if (!prompt) return {};
        prompts.push_back(std::move(*prompt));
      } else {
        fields.fail(invalid_request(kShape, "prompt"));
        return {};
      }
    }
    fields.require(!prompts.empty(), "prompt must not be an empty list", "prompt");
  } else {
    fields.fail(invalid_request(kShape, "prompt"));
    return {};
  }
  for (const RawPrompt& prompt : prompts) {
    fields.require(prompt.is_tokens ? !prompt.token_ids.empty() : !prompt.text.empty(),
                   "prompt must not be empty", "prompt");
  }
  return prompts;
}

// Tokenizes string prompts and fills out.prompts / out.prompt_texts.
void encode_prompts(FieldReader& fields, const ServedModel& served, std::vector<RawPrompt> raw,
                    bool add_special_tokens, GenerationRequest& out) {
  for (RawPrompt& prompt : raw) {
    actors::GenerateRequest request;
    try {
      if (prompt.is_tokens) {
        request.prompt_token_ids = std::move(prompt.token_ids);
        if (out.echo) prompt.text = served.tokenizer->decode(request.prompt_token_ids);
      } else {
        request.prompt_token_ids = served.tokenizer->encode(prompt.text, add_special_tokens);
        request.prompt = prompt.text;
      }
    } catch (const std::exception& e) {
      fields.fail(
          invalid_request(std::string("the prompt could not be tokenized: ") + e.what(), "prompt"));
      return;
    }
    fields.require(!request.prompt_token_ids.empty(), "prompt must not be empty", "prompt");
    out.prompts.push_back(std::move(request));
    out.prompt_texts.push_back(std::move(prompt.text));
  }
}

}  // namespace

Result<GenerationRequest> parse_completion_json(const nlohmann::json& body,
                                                const ServedModel& served,
                                                const nlohmann::ordered_json* ordered) {
  if (!body.is_object()) return invalid_request("the request body must be a JSON object");
  FieldReader fields(body);
  GenerationRequest out;
  out.endpoint = Endpoint::kCompletions;
  model::SamplingParams sampling;
  read_shared_fields(fields, served, sampling, out);
  if (auto constraint = read_output_constraint(fields, ordered)) {
    compile_output_constraint(fields, served, *constraint, sampling);
  }
  if (fields.find("suffix")) {
    fields.fail(invalid_request("suffix is not supported", "suffix"));
  }
  out.echo = fields.boolean("echo").value_or(false);
  // echo with logprobs wants the prompt tokens' logprobs too, which needs every prompt
  // position's logits; the engine computes only the last one's.
  if (out.echo && out.logprobs) {
    fields.fail(invalid_request(
        "echo is not supported together with logprobs: prompt logprobs are not computed", "echo"));
  }
  const bool add_special_tokens = fields.boolean("add_special_tokens").value_or(true);
  std::optional<int64_t> max_tokens = fields.integer("max_tokens", 1, INT_MAX);
  std::vector<RawPrompt> raw = read_prompts(fields, served);
  if (fields.failed()) return fields.error();
  encode_prompts(fields, served, std::move(raw), add_special_tokens, out);
  finish_generation_request(fields, served, max_tokens, kDefaultCompletionMaxTokens, sampling, out);
  if (fields.failed()) return fields.error();
  return out;
}

Result<GenerationRequest> parse_completion_request(std::string_view body,
                                                   const ServedModel& served) {
  Result<nlohmann::json> parsed = parse_json_object(body);
  if (!parsed) return parsed.error();
  const std::optional<nlohmann::ordered_json> ordered = parse_ordered_if_needed(body);
  return parse_completion_json(parsed.value(), served, ordered ? &*ordered : nullptr);
}

}  // namespace pagedserve::net
