// A real-world template with tools and tool calls (Qwen2.5's, as published on the Hub):
// multi-line with `-` markers everywhere, tojson of tool schemas and arguments, loop
// look-behind/ahead through messages[loop.index0 +- 1]. The expected text is jinja2's.
#include <gtest/gtest.h>

#include "model/chat_template/chat_template.h"

namespace pagedserve::model {
namespace {

constexpr const char* kQwen25Template = R"tpl({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)tpl";

TEST(ChatTemplateRealWorld, Qwen25ToolCallsMatchJinja2) {
  const ChatTemplate tmpl = ChatTemplate::parse(kQwen25Template);
  const auto context = nlohmann::ordered_json::parse(
      R"json({"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}, {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "add_generation_prompt": true})json");
  EXPECT_EQ(tmpl.render(context),
            "<|im_start|>system\n"
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n"
            "\n"
            "# Tools\n"
            "\n"
            "You may call one or more functions to assist with the user query.\n"
            "\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            "<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
            "\"Get weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
            "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n"
            "</tools>\n"
            "\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n"
            "<tool_call>\n"
            "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n"
            "Weather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n"
            "<tool_call>\n"
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n"
            "<tool_response>\n"
            "{\"temp\": 21}\n"
            "</tool_response>\n"
            "<tool_response>\n"
            "sunny\n"
            "</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace pagedserve::model
