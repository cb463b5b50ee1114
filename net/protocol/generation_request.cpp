// The sampling fields /v1/completions and /v1/chat/completions share, and the checks that
// need the tokenized prompts (see generation_request.h).
#include "net/protocol/generation_request.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace pagedserve::net {

namespace {

// SamplingParams::validate's messages start with the field they are about.
std::string param_of_message(const std::string& message) {
  if (message.starts_with("best_of (or n)")) return "n";
  const std::string first = message.substr(0, message.find(' '));
  static const char* const kKnown[] = {
      "temperature", "top_p", "top_k",   "min_p",          "max_tokens",      "min_tokens",
      "stop",        "n",     "best_of", "length_penalty", "use_beam_search", "logprobs"};
  for (const char* known : kKnown) {
    if (first == known) return first;
  }
  return {};
}

std::optional<float> read_float(FieldReader& fields, std::string_view key) {
  std::optional<double> value = fields.number(key);
  if (!value) return std::nullopt;
  if (!std::isfinite(*value) || std::fabs(*value) > 3.0e38) {
    fields.fail(invalid_request(std::string(key) + " must be a finite number", std::string(key)));
    return std::nullopt;
  }
  return static_cast<float>(*value);
}

// n or best_of: an integer >= 1, at most the server's limit (the message names the flag, so
// a client can tell the server's cap from the API's).
std::optional<int> read_sequence_count(FieldReader& fields, std::string_view key, int limit,
                                       std::string_view flag) {
  std::optional<int64_t> value = fields.integer(key, 1, INT_MAX);
  if (!value) return std::nullopt;
  if (*value > limit) {
    fields.fail(invalid_request(std::string(key) + " must be at most " + std::to_string(limit) +
                                    " on this server (" + std::string(flag) + "), got " +
                                    std::to_string(*value),
                                std::string(key)));
    return std::nullopt;
  }
  return static_cast<int>(*value);
}

// 400 when the longest prompt is over --max-prompt-tokens (0: no limit but the context's).
bool check_prompt_limit(FieldReader& fields, const ServedModel& served, int64_t prompt_len,
                        const std::string& param) {
  const int limit = served.limits.max_prompt_tokens;
  if (limit <= 0 || prompt_len <= limit) return true;
  fields.fail(invalid_request("The " + param + " has " + std::to_string(prompt_len) +
                                  " tokens, more than this server's limit of " +
                                  std::to_string(limit) + " prompt tokens (--max-prompt-tokens).",
                              param, "prompt_too_long"));
  return false;
}

void read_penalties(FieldReader& fields, model::SamplingParams& sampling, GenerationRequest& out) {
  if (auto v = read_float(fields, "presence_penalty")) {
    fields.require(*v >= -2.0f && *v <= 2.0f, "presence_penalty must be in [-2, 2]",
                   "presence_penalty");
    out.presence_penalty = *v;
    sampling.presence_penalty = *v;
  }
  if (auto v = read_float(fields, "frequency_penalty")) {
    fields.require(*v >= -2.0f && *v <= 2.0f, "frequency_penalty must be in [-2, 2]",
                   "frequency_penalty");
    out.frequency_penalty = *v;
    sampling.frequency_penalty = *v;
  }
  if (auto v = read_float(fields, "repetition_penalty")) {
    fields.require(*v > 0.0f && *v <= 2.0f, "repetition_penalty must be in (0, 2]",
                   "repetition_penalty");
    out.repetition_penalty = *v;
    sampling.repetition_penalty = *v;
  }
}

void read_stream_fields(FieldReader& fields, GenerationRequest& out) {
  out.stream = fields.boolean("stream").value_or(false);
  if (const nlohmann::json* options = fields.object("stream_options")) {
    fields.require(out.stream, "stream_options is only allowed when stream is true",
                   "stream_options");
    FieldReader inner(*options);
    out.include_usage = inner.boolean("include_usage").value_or(false);
    if (inner.failed()) {
      ApiError error = inner.error();
      error.message = "stream_options." + error.message;
      error.param = "stream_options.include_usage";
      fields.fail(std::move(error));
    }
  }
}

void read_logprobs(FieldReader& fields, Endpoint endpoint, GenerationRequest& out) {
  if (endpoint == Endpoint::kCompletions) {
    if (auto v = fields.integer("logprobs", 0, kMaxLogprobs)) out.logprobs = static_cast<int>(*v);
    return;
  }
  const bool wanted = fields.boolean("logprobs").value_or(false);
  std::optional<int64_t> top = fields.integer("top_logprobs", 0, kMaxLogprobs);
  if (top) fields.require(wanted, "top_logprobs requires logprobs to be true", "top_logprobs");
  if (wanted) out.logprobs = static_cast<int>(top.value_or(0));
}

}  // namespace

void check_model_field(FieldReader& fields, const ServedModel& served) {
  std::optional<std::string> name = fields.string("model");
  if (name && *name != served.name) {
    fields.fail(not_found("The model `" + *name + "` does not exist.", "model", "model_not_found"));
  }
}

void read_shared_fields(FieldReader& fields, const ServedModel& served,
                        model::SamplingParams& sampling, GenerationRequest& out) {
  check_model_field(fields, served);
  out.model = served.name;
  if (auto v = read_float(fields, "temperature")) sampling.temperature = *v;
  if (auto v = read_float(fields, "top_p")) sampling.top_p = *v;
  if (auto v = fields.integer("top_k", -1, INT_MAX)) sampling.top_k = static_cast<int>(*v);
  if (auto v = read_float(fields, "min_p")) sampling.min_p = *v;
  if (auto v = read_sequence_count(fields, "n", served.limits.max_n, "--max-n")) sampling.n = *v;
  if (auto v = read_sequence_count(fields, "best_of", served.limits.max_best_of, "--max-best-of")) {
    sampling.best_of = *v;
  }
  if (auto v = fields.boolean("use_beam_search")) sampling.use_beam_search = *v;
  if (auto v = read_float(fields, "length_penalty")) sampling.length_penalty = *v;
  if (auto v = fields.integer("min_tokens", 0, INT_MAX)) sampling.min_tokens = static_cast<int>(*v);
  if (auto v = fields.boolean("ignore_eos")) sampling.ignore_eos = *v;
  // Any integer seed; negative ones wrap, as a Python int seeds numpy modulo 2^64.
  if (auto v = fields.integer("seed")) sampling.seed = static_cast<uint64_t>(*v);
  if (auto v = fields.string_or_list("stop")) sampling.stop = std::move(*v);
  if (auto v = fields.integer_list("stop_token_ids", 0, served.vocab_size - 1)) {
    sampling.stop_token_ids.assign(v->begin(), v->end());
  }
  out.n = sampling.n;
  read_penalties(fields, sampling, out);
  read_stream_fields(fields, out);
  read_logprobs(fields, out.endpoint, out);
  sampling.logprobs = out.logprobs;
  if (auto v = fields.string("user")) out.user = std::move(*v);
  // OpenAI forbids best_of with stream: only the n best are returned, known at the end.
  if (out.stream && sampling.best_of && *sampling.best_of > sampling.n) {
    fields.fail(invalid_request("best_of must equal n when stream is true", "best_of"));
  }
}

void finish_generation_request(FieldReader& fields, const ServedModel& served,
                               std::optional<int64_t> max_tokens, std::optional<int> default_max,
                               const model::SamplingParams& sampling, GenerationRequest& out) {
  if (fields.failed()) return;
  const std::string messages_param = out.endpoint == Endpoint::kChat ? "messages" : "prompt";
  size_t longest = 0;
  for (const actors::GenerateRequest& prompt : out.prompts) {
    longest = std::max(longest, prompt.prompt_token_ids.size());
  }
  const int64_t prompt_len = static_cast<int64_t>(longest);
  if (!check_prompt_limit(fields, served, prompt_len, messages_param)) return;
  const int64_t limit = served.max_model_len;
  const int64_t completion = max_tokens    ? *max_tokens
                             : default_max ? *default_max
                                           : std::max<int64_t>(limit - prompt_len, 1);
  if (prompt_len + completion > limit) {
    ApiError error = invalid_request(
        "This model's maximum context length is " + std::to_string(limit) +
            " tokens. However, you requested " + std::to_string(prompt_len + completion) +
            " tokens (" + std::to_string(prompt_len) + " in the " + messages_param + ", " +
            std::to_string(completion) + " in the completion). Please reduce the length of the " +
            messages_param + " or completion.",
        prompt_len >= limit ? messages_param : "max_tokens", "context_length_exceeded");
    fields.fail(std::move(error));
    return;
  }
  model::SamplingParams final_sampling = sampling;
  final_sampling.max_tokens = static_cast<int>(completion);
  if (std::string problem = final_sampling.validate(); !problem.empty()) {
    fields.fail(invalid_request(problem, param_of_message(problem)));
    return;
  }
  for (actors::GenerateRequest& prompt : out.prompts) prompt.sampling = final_sampling;
}

std::optional<ApiError> check_token_ids(const std::vector<int32_t>& ids, const ServedModel& served,
                                        const std::string& param) {
  for (int32_t id : ids) {
    if (id < 0 || id >= served.vocab_size) {
      return invalid_request("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                 std::to_string(served.vocab_size) + ")",
                             param);
    }
  }
  return std::nullopt;
}

}  // namespace pagedserve::net
