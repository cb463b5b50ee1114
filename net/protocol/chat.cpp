// Chat message validation, template rendering and POST /v1/chat/completions parsing
// (see chat.h).
#include "net/protocol/chat.h"

#include <algorithm>
#include <array>
#include <climits>

#include "model/chat_template/chat_template_error.h"
#include "model/grammar/grammar.h"
#include "net/protocol/chat_tools.h"
#include "net/protocol/structured_output.h"
#include "net/protocol/tool_call_grammar.h"

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

// An assistant turn's tool_calls as templates expect them: each {"id", "type", "function":
// {"name", "arguments"}} with arguments a JSON object, parsed from the string OpenAI clients
// send (as vLLM does; transformers documents dict arguments). Unparsable arguments stay text.
Result<nlohmann::ordered_json> read_tool_calls(const nlohmann::json& calls,
                                               const std::string& param) {
  const std::string calls_param = param + ".tool_calls";
  if (!calls.is_array()) return invalid_request(calls_param + " must be a list", calls_param);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string call_param = calls_param + "[" + std::to_string(i) + "]";
    const nlohmann::json& call = calls[i];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
        !call["function"].contains("name") || !call["function"]["name"].is_string()) {
      return invalid_request(call_param +
                                 " must be {\"id\", \"type\": \"function\", \"function\": "
                                 "{\"name\", \"arguments\"}}",
                             call_param);
    }
    nlohmann::ordered_json entry;
    if (call.contains("id") && call["id"].is_string()) entry["id"] = call["id"];
    entry["type"] = "function";
    nlohmann::ordered_json function;
    function["name"] = call["function"]["name"];
    const nlohmann::json args = call["function"].value("arguments", nlohmann::json("{}"));
    if (args.is_string()) {
      auto parsed = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
      function["arguments"] =
          parsed.is_discarded() ? nlohmann::ordered_json(args.get<std::string>()) : parsed;
    } else {
      function["arguments"] = nlohmann::ordered_json::parse(args.dump());
    }
    entry["function"] = std::move(function);
    out.push_back(std::move(entry));
  }
  return out;
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
  const bool has_tool_calls = role_name == "assistant" && message.contains("tool_calls") &&
                              !message["tool_calls"].is_null();
  if (content == message.end() || content->is_null()) {
    if (role_name != "assistant") {
      return invalid_request(content_param + " is required", content_param);
    }
    // "" rather than null even for a turn of tool calls: some templates (Phi-3.5,
    // DeepSeek-R1) fail on a None content, and the others render both the same.
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
  if (has_tool_calls) {
    Result<nlohmann::ordered_json> calls = read_tool_calls(message["tool_calls"], param);
    if (!calls) return calls.error();
    out["tool_calls"] = std::move(calls.value());
  }
  if (role_name == "tool") {
    if (auto id = message.find("tool_call_id"); id != message.end() && !id->is_null()) {
      if (!id->is_string()) {
        return invalid_request(param + ".tool_call_id must be a string", param + ".tool_call_id");
      }
      out["tool_call_id"] = id->get<std::string>();
    }
  }
  return out;
}

// tool_choice "required" or a named function: the output must be calls (tool_call_grammar.h).
void constrain_to_tool_calls(FieldReader& fields, const ServedModel& served, const ChatTools& tools,
                             model::SamplingParams& sampling) {
  if (!tools.calls_forced()) return;
  if (sampling.grammar) {
    fields.fail(invalid_request(
        "tool_choice required (or a named function) cannot be combined with a structured output",
        "tool_choice"));
    return;
  }
  OutputConstraint constraint;
  constraint.param = "tools";
  constraint.root = kToolCallsRootRule;
  try {
    constraint.gbnf = tool_call_gbnf(tools, served.tool_call_format);
  } catch (const model::grammar::GrammarError& e) {
    fields.fail(invalid_request(e.what(), "tools"));
    return;
  }
  compile_output_constraint(fields, served, constraint, sampling);
}

}  // namespace

Result<std::string> render_chat(const nlohmann::json* messages, const ServedModel& served,
                                bool add_generation_prompt, const nlohmann::json* kwargs,
                                const nlohmann::ordered_json* tools) {
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
  // Always defined, null without tools, as transformers' apply_chat_template passes them.
  context["tools"] = tools != nullptr && !tools->empty() ? *tools : nlohmann::ordered_json();
  context["documents"] = nlohmann::ordered_json();
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

Result<GenerationRequest> parse_chat_json(const nlohmann::json& body, const ServedModel& served,
                                          const nlohmann::ordered_json* ordered) {
  if (!body.is_object()) return invalid_request("the request body must be a JSON object");
  FieldReader fields(body);
  GenerationRequest out;
  out.endpoint = Endpoint::kChat;
  model::SamplingParams sampling;
  read_shared_fields(fields, served, sampling, out);
  if (auto constraint = read_output_constraint(fields, ordered)) {
    compile_output_constraint(fields, served, *constraint, sampling);
  }
  const ChatTools tools = read_chat_tools(fields, ordered);
  if (!fields.failed()) constrain_to_tool_calls(fields, served, tools, sampling);
  if (tools.calls_wanted()) out.tool_call_format = served.tool_call_format;
  std::optional<int64_t> max_tokens = fields.integer("max_completion_tokens", 1, INT_MAX);
  std::optional<int64_t> legacy_max = fields.integer("max_tokens", 1, INT_MAX);
  if (!max_tokens) max_tokens = legacy_max;
  const bool add_generation_prompt = fields.boolean("add_generation_prompt").value_or(true);
  const bool add_special_tokens = fields.boolean("add_special_tokens").value_or(false);
  const nlohmann::json* kwargs = fields.object("chat_template_kwargs");
  if (fields.failed()) return fields.error();

  Result<std::string> prompt =
      render_chat(fields.find("messages"), served, add_generation_prompt, kwargs, &tools.tools);
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
  const std::optional<nlohmann::ordered_json> ordered = parse_ordered_if_needed(body);
  return parse_chat_json(parsed.value(), served, ordered ? &*ordered : nullptr);
}

}  // namespace pagedserve::net
