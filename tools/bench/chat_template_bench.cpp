// Chat-template speed: parsing a ChatML template once, and rendering a 10-message chat with
// it. The ratio render/parse says how much a server gains by parsing once per model.
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include "model/chat_template/chat_template.h"

namespace {

using pagedserve::model::ChatTemplate;

const char* const kChatMl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

void BM_Parse(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(ChatTemplate::parse(kChatMl));
}
BENCHMARK(BM_Parse);

void BM_Render10Messages(benchmark::State& state) {
  const ChatTemplate tmpl = ChatTemplate::parse(kChatMl);
  nlohmann::json ctx = {{"add_generation_prompt", true}, {"messages", nlohmann::json::array()}};
  for (int i = 0; i < 10; ++i) {
    ctx["messages"].push_back({{"role", i % 2 ? "assistant" : "user"},
                               {"content", std::string(200, static_cast<char>('a' + i))}});
  }
  for (auto _ : state) benchmark::DoNotOptimize(tmpl.render(ctx));
}
BENCHMARK(BM_Render10Messages);

}  // namespace

BENCHMARK_MAIN();
