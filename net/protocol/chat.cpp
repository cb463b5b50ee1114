// Chat message validation, template rendering and POST /v1/chat/completions parsing
// (see chat.h).
#include "net/protocol/chat.h"

#include <algorithm>
#include <array>
#include <climits>

#include "model/chat_template/chat_template_error.h"

namespace pagedserve::net {

namespace {

constexpr std::array<std::string_view, 5> kRoles = {"system", "developer", "user", "assistant",
                                                    "tool"};

// A content part list joined into one string, or an error naming the bad part.
Result<std::string> join_parts(const nlohmann::json& parts, const std::string& param) {
  std::string text;
  for (size_t j = 0; j < parts.size(); ++j) {
    const nlohmann::json& part = parts[j];
    const std::string part_param = param + "[" + std::to_string(j) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return invalid_request(part_param + " must be an object with a string \"type\"",
                             part_param + ".type");
    }
    if (part["type"] != "text") {
      return invalid_request("only text content parts are supported, got type \"" +
                                 part["type"].get<std::string>() + "\"",
                             part_param + ".type");
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return invalid_request(part_param + ".text must be a string", part_param + ".text");
    }
    if (j > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

// One validated message as the template sees it: {"role", "content"[, "name"]}.
Result<nlohmann::ordered_json> read_message(const nlohmann::json& message, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "]";
  if (!message.is_object()) return invalid_request(param + " must be an object", param);
  auto role = message.find("role");
  if (role == message.end() || !role->is_string()) {
    return invalid_request(param + ".role must be a string", param + ".role");
  }
  const std::string role_name = role->get<std::string>();
  if (std::find(kRoles.begin(), kRoles.end(), role_name) == kRoles.end()) {
    return invalid_request(param +
                               ".role must be one of system, developer, user, assistant, "
                               "tool; got \"" +
                               role_name + "\"",
                           param + ".role");
  }
  nlohmann::ordered_json out;
  out["role"] = role_name;
  auto content = message.find("content");
  const std::string content_param = param + ".content";
  if (content == message.end() || content->is_null()) {
    if (role_name != "assistant") {
      return invalid_request(content_param + " is required", content_param);
    }
    out["content"] = "";
  } else if (content->is_string()) {
    out["content"] = content->get<std::string>();
  } else if (content->is_array()) {
    Result<std::string> text = join_parts(*content, content_param);
    if (!text) return text.error();
    out["content"] = std::move(text.value());
  } else {
    return invalid_request(content_param + " must be a string or a list of content parts",
                           content_param);
  }
  if (auto name = message.find("name"); name != message.end() && !name->is_null()) {
    if (!name->is_string())
      return invalid_request(param + ".name must be a string", param + ".name");
    out["name"] = name->get<std::string>();
  }
  return out;
}

}  // namespace

Result<std::string> render_chat(const nlohmann::json* messages, const ServedModel& served,
                                bool add_generation_prompt, const nlohmann::json* kwargs) {
  if (!messages) return invalid_request("messages is required", "messages");
  if (!messages->is_array()) return invalid_request("messages must be a list", "messages");
  if (messages->empty()) {
    return invalid_request("messages must contain at least one message", "messages");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (kwargs) {
    for (const auto& [key, value] : kwargs->items()) context[key] = value;
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    Result<nlohmann::ordered_json> message = read_message((*messages)[i], i);
    if (!message) return message.error();
    list.push_back(std::move(message.value()));
  }
  context["messages"] = std::move(list);
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = served.bos_token;
  context["eos_token"] = served.eos_token;
  try {
    return chat_template_of(served).render(context);
  } catch (const model::ChatTemplateError& e) {
    if (e.raised_by_template()) return invalid_request(e.what(), "messages");
    return invalid_request(std::string("the chat template failed: ") + e.what(), "messages");
  } catch (const std::exception& e) {
    return server_error(std::string("the chat template failed: ") + e.what());
  }
}

Result<GenerationRequest> parse_chat_json(const nlohmann::json& body, const ServedModel& served) {
  if (!body.is_object()) return invalid_request("the request body must be a JSON object");
  FieldReader fields(body);
  GenerationRequest out;
  out.endpoint = Endpoint::kChat;
  model::SamplingParams sampling;
  read_shared_fields(fields, served, sampling, out);
  if (const nlohmann::json* tools = fields.find("tools")) {
    fields.require(tools->is_array() && tools->empty(), "tools are not supported", "tools");
  }
  std::optional<int64_t> max_tokens = fields.integer("max_completion_tokens", 1, INT_MAX);
  std::optional<int64_t> legacy_max = fields.integer("max_tokens", 1, INT_MAX);
  if (!max_tokens) max_tokens = legacy_max;
  const bool add_generation_prompt = fields.boolean("add_generation_prompt").value_or(true);
  const bool add_special_tokens = fields.boolean("add_special_tokens").value_or(false);
  const nlohmann::json* kwargs = fields.object("chat_template_kwargs");
  if (fields.failed()) return fields.error();

  Result<std::string> prompt =
      render_chat(fields.find("messages"), served, add_generation_prompt, kwargs);
  if (!prompt) return prompt.error();
  actors::GenerateRequest request;
  try {
    request.prompt_token_ids = served.tokenizer->encode(prompt.value(), add_special_tokens);
  } catch (const std::exception& e) {
    return invalid_request(std::string("the prompt could not be tokenized: ") + e.what(),
                           "messages");
  }
  if (request.prompt_token_ids.empty()) {
    return invalid_request("the rendered conversation is empty", "messages");
  }
  request.prompt = prompt.value();
  out.prompts.push_back(std::move(request));
  out.prompt_texts.push_back(std::move(prompt.value()));
  finish_generation_request(fields, served, max_tokens, std::nullopt, sampling, out);
  if (fields.failed()) return fields.error();
  return out;
}

Result<GenerationRequest> parse_chat_request(std::string_view body, const ServedModel& served) {
  Result<nlohmann::json> parsed = parse_json_object(body);
  if (!parsed) return parsed.error();
  return parse_chat_json(parsed.value(), served);
}

}  // namespace pagedserve::net
