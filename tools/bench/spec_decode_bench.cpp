// Speculative decoding (n-gram proposals): output tokens per second with and without it, in one
// process on the same workload, for several batch sizes, on two tasks:
//  - grounded: every request's prompt is the model's own greedy continuation of a story start
//    (so the continuation repeats text of the prompt, as "repeat / edit this text" does);
//  - free: short story starts, greedy, nothing to copy but what the model repeats itself.
// Runs the actor Engine as the server does (overlap scheduling on: with speculation, steps
// that carry proposals are not overlapped). Prints one line per (task, batch) with the speed-up,
// the acceptance rate and the mean accepted proposals per verifying sequence-step. Not a Google
// Benchmark loop: the quantity is a ratio of two runs.
//
//   spec_decode_bench [--model DIR] [--max-tokens N] [--prompt-tokens N] [--batches 1,2,4]
//                     [--k K] [--threads N] [--trials N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/llm_engine.h"

namespace {

using namespace pagedserve;

std::filesystem::path default_model() {
  if (const char* env = std::getenv("PAGEDSERVE_SHARED")) {
    return std::filesystem::path(env) / "models" / "stories260K";
  }
  return std::filesystem::path(PAGEDSERVE_SHARED_DIR) / "models" / "stories260K";
}

const std::vector<std::string> kStarts = {
    "Once upon a time",   "Lily and Tom",    "The cat sat", "One day, a little bird",
    "Tim had a red ball", "The sun was hot", "Mom said",    "A big dog ran to the park and"};

model::SamplingParams greedy(int max_tokens) {
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// The model's own greedy continuation of a story start, appended to it.
std::vector<int32_t> grounded_prompt(const actors::EngineConfig& config, const std::string& start,
                                     int length) {
  actors::EngineConfig plain = config;
  plain.speculative = {};
  actors::LlmEngine engine(plain);
  std::vector<int32_t> prompt = engine.tokenizer().encode(start);
  engine.add_request(prompt, greedy(length));
  while (engine.has_unfinished_requests()) {
    for (const actors::RequestOutput& out : engine.step()) {
      for (const actors::SequenceOutput& d : out.deltas) {
        prompt.insert(prompt.end(), d.new_token_ids.begin(), d.new_token_ids.end());
      }
    }
  }
  return prompt;
}

struct Result {
  double tokens_per_s = 0;
  int64_t tokens = 0;
  actors::EngineStats stats;
};

Result run(const actors::EngineConfig& config, const std::vector<std::vector<int32_t>>& prompts,
           int max_tokens) {
  auto engine = actors::Engine::start(config);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<actors::RequestStream>> streams;
  for (const std::vector<int32_t>& prompt : prompts) {
    actors::GenerateRequest request;
    request.prompt_token_ids = prompt;
    request.sampling = greedy(max_tokens);
    streams.push_back(engine->submit(std::move(request)));
  }
  Result result;
  for (auto& stream : streams) {
    while (std::optional<actors::TokenEvent> event = stream->next()) {
      result.tokens += static_cast<int64_t>(event->token_ids.size());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.tokens_per_s = static_cast<double>(result.tokens) / seconds;
  result.stats = engine->stats();
  engine->shutdown();
  return result;
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path model = default_model();
  int max_tokens = 256;
  int prompt_tokens = 256;
  int k = 4;
  int threads = 0;
  int trials = 1;
  std::vector<int> batches = {1, 2, 4, 8, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--model") {
      model = value;
    } else if (flag == "--max-tokens") {
      max_tokens = std::stoi(value);
    } else if (flag == "--prompt-tokens") {
      prompt_tokens = std::stoi(value);
    } else if (flag == "--batches") {
      batches = parse_list(value);
    } else if (flag == "--k") {
      k = std::stoi(value);
    } else if (flag == "--threads") {
      threads = std::stoi(value);
    } else if (flag == "--trials") {
      trials = std::stoi(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  actors::EngineConfig plain;
  plain.model_dir = model;
  plain.num_threads = threads;
  plain.kv_cache_memory_bytes = int64_t{1} << 30;
  actors::EngineConfig spec = plain;
  spec.speculative.method = actors::SpeculativeMethod::kNgram;
  spec.speculative.num_speculative_tokens = k;
  spec.speculative.max_batch_seqs = 0;  // measure every batch size

  std::vector<std::vector<int32_t>> grounded;
  std::vector<std::vector<int32_t>> free_starts;
  {
    actors::LlmEngine tokenizing(plain);
    for (const std::string& start : kStarts) {
      grounded.push_back(grounded_prompt(plain, start, prompt_tokens));
      free_starts.push_back(tokenizing.tokenizer().encode(start));
    }
  }
  std::printf("model %s, k %d, max_tokens %d, grounded prompts of %d + %d tokens\n", model.c_str(),
              k, max_tokens, static_cast<int>(grounded[0].size()) - prompt_tokens, prompt_tokens);
  std::printf("%-9s %5s %12s %12s %8s %10s %10s %8s\n", "task", "batch", "base tok/s", "spec tok/s",
              "speedup", "proposed", "accepted", "acc/row");
  for (const auto& [task, prompts] : {std::pair{"grounded", &grounded}, {"free", &free_starts}}) {
    for (int batch : batches) {
      std::vector<std::vector<int32_t>> batch_prompts;
      for (int i = 0; i < batch; ++i) batch_prompts.push_back((*prompts)[i % prompts->size()]);
      double base_best = 0, spec_best = 0;
      actors::EngineStats stats;
      for (int t = 0; t < trials; ++t) {
        base_best = std::max(base_best, run(plain, batch_prompts, max_tokens).tokens_per_s);
        const Result r = run(spec, batch_prompts, max_tokens);
        if (r.tokens_per_s > spec_best) {
          spec_best = r.tokens_per_s;
          stats = r.stats;
        }
      }
      const double rows = static_cast<double>(std::max<int64_t>(stats.num_spec_rows, 1));
      std::printf("%-9s %5d %12.1f %12.1f %7.2fx %10lld %10lld %8.2f\n", task, batch, base_best,
                  spec_best, spec_best / base_best,
                  static_cast<long long>(stats.num_spec_proposed_tokens),
                  static_cast<long long>(stats.num_spec_accepted_tokens),
                  static_cast<double>(stats.num_spec_accepted_tokens) / rows);
      std::fflush(stdout);
    }
  }
  return 0;
}
