// /v1/models, /health, /version, /tokenize, /detokenize (see endpoints.h).
#include "net/protocol/endpoints.h"

#include <climits>

#include "net/protocol/chat.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/json_fields.h"

namespace pagedserve::net {

using nlohmann::ordered_json;

HttpResponse models_response(const ServedModel& served) {
  ordered_json card;
  card["id"] = served.name;
  card["object"] = "model";
  card["created"] = served.created;
  card["owned_by"] = "pagedserve";
  card["root"] = served.name;
  card["max_model_len"] = served.max_model_len;
  ordered_json body;
  body["object"] = "list";
  body["data"] = ordered_json::array({std::move(card)});
  return json_response(body);
}

HttpResponse health_response() { return HttpResponse{200, "", ""}; }

HttpResponse version_response() { return json_response({{"version", kServerVersion}}); }

HttpResponse tokenize_response(std::string_view body, const ServedModel& served) {
  Result<nlohmann::json> parsed = parse_json_object(body);
  if (!parsed) return error_response(parsed.error());
  FieldReader fields(parsed.value());
  check_model_field(fields, served);
  const nlohmann::json* messages = fields.find("messages");
  std::optional<std::string> prompt = fields.string("prompt");
  const bool add_special_tokens = fields.boolean("add_special_tokens").value_or(!messages);
  const bool add_generation_prompt = fields.boolean("add_generation_prompt").value_or(true);
  const nlohmann::json* kwargs = fields.object("chat_template_kwargs");
  if (!fields.failed() && (messages != nullptr) == prompt.has_value()) {
    fields.fail(invalid_request("exactly one of prompt and messages is required", "prompt"));
  }
  if (fields.failed()) return error_response(fields.error());
  std::string text;
  if (messages) {
    Result<std::string> rendered = render_chat(messages, served, add_generation_prompt, kwargs);
    if (!rendered) return error_response(rendered.error());
    text = std::move(rendered.value());
  } else {
    text = std::move(*prompt);
  }
  std::vector<int32_t> ids;
  try {
    ids = served.tokenizer->encode(text, add_special_tokens);
  } catch (const std::exception& e) {
    return error_response(
        invalid_request(std::string("the prompt could not be tokenized: ") + e.what(),
                        messages ? "messages" : "prompt"));
  }
  ordered_json out;
  out["tokens"] = ids;
  out["count"] = ids.size();
  out["max_model_len"] = served.max_model_len;
  return json_response(out);
}

HttpResponse detokenize_response(std::string_view body, const ServedModel& served) {
  Result<nlohmann::json> parsed = parse_json_object(body);
  if (!parsed) return error_response(parsed.error());
  FieldReader fields(parsed.value());
  check_model_field(fields, served);
  std::optional<std::vector<int64_t>> tokens = fields.integer_list("tokens", INT32_MIN, INT32_MAX);
  if (!fields.failed() && !tokens) fields.fail(invalid_request("tokens is required", "tokens"));
  if (fields.failed()) return error_response(fields.error());
  std::vector<int32_t> ids(tokens->begin(), tokens->end());
  if (auto error = check_token_ids(ids, served, "tokens")) return error_response(*error);
  try {
    return json_response({{"prompt", served.tokenizer->decode(ids)}});
  } catch (const std::exception& e) {
    return error_response(server_error(std::string("detokenization failed: ") + e.what()));
  }
}

HttpResponse not_found_response(std::string_view target) {
  return error_response(not_found("no route for " + std::string(target)));
}

HttpResponse method_not_allowed_response(std::string_view method, std::string_view target) {
  return error_response(ApiError{405,
                                 std::string(method) + " is not allowed on " + std::string(target),
                                 "invalid_request_error",
                                 {},
                                 {}});
}

std::optional<HttpResponse> route_simple_endpoint(std::string_view method, std::string_view target,
                                                  std::string_view body,
                                                  const ServedModel& served) {
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = method == "GET" || method == "HEAD";
  const bool post = method == "POST";
  if (path == "/v1/models")
    return get ? models_response(served) : method_not_allowed_response(method, path);
  if (path == "/health") return get ? health_response() : method_not_allowed_response(method, path);
  if (path == "/version")
    return get ? version_response() : method_not_allowed_response(method, path);
  if (path == "/tokenize") {
    return post ? tokenize_response(body, served) : method_not_allowed_response(method, path);
  }
  if (path == "/detokenize") {
    return post ? detokenize_response(body, served) : method_not_allowed_response(method, path);
  }
  return std::nullopt;
}

}  // namespace pagedserve::net
