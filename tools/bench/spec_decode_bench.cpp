// Speculative decoding (n-gram proposals, or a draft model's with --draft): output tokens per
// second with and without it, in one process on the same workload, for several batch sizes, on two
// tasks:
//  - grounded: every request's prompt is the model's own greedy continuation of a story start
//    (so the continuation repeats text of the prompt, as "repeat / edit this text" does);
//  - repeat: the grounded prompt followed by its own first 32 tokens again, so a model that
//    copies goes on repeating the text ("repeat this text");
//  - free: short story starts, greedy, nothing to copy but what the model repeats itself.
// Runs the synchronous LlmEngine with overlap scheduling on (rows are planned past verifying
// steps). Also prints the step counts, which do not depend on
// the machine's load. Prints one line per (task, batch) with the speed-up,
// the acceptance rate and the mean accepted proposals per verifying sequence-step. Not a Google
// Benchmark loop: the quantity is a ratio of two runs.
//
//   spec_decode_bench [--model DIR] [--max-tokens N] [--prompt-tokens N] [--batches 1,2,4]
//                     [--make-model DIR] [--verify-cost 1] [--k K] [--k-max M] [--ngram-min N]
//                     [--ngram-max M]
//                     [--threads N] [--trials N] [--draft DIR|FILE.gguf] [--temperature T]
//                     [--min-accepted A] [--max-batch N]   (the policy: --speculative-min-accepted,
//                     default as the server's, 0 = every sequence proposes;
//                     --speculative-max-batch, default 0 = no limit)
//
// A memory-bound target whose proposals are accepted as a trained model's are: the trained
// stories260K padded to ~150 MiB of weights by tools/bench/pad_model.py (same function), with
// stories260K itself as the draft.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "actors/llm_engine.h"
#include "kernels/cpu/thread_pool.h"
#include "model/llama_model.h"
#include "model/loader/llama_weights.h"
#include "model/paged_kv_cache.h"
#include "model/synthetic_model.h"

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
  double tokens_per_s = 0;  // every output token over the whole run, prefill included
  // Decode alone: the tokens after each request's first over the time from the step that
  // gave the last request its first token to the end. Speculation cannot speed up a prefill
  // (TTFT is the same with and without it); this is the decode speed the issue asks about.
  double decode_tokens_per_s = 0;
  int64_t tokens = 0;
  actors::SchedulerStats stats;
};

// The synchronous engine with overlap on (as the actor engine runs it, without the thread
// hops, whose wake-up times on a loaded machine would swamp a small model's steps).
// temperature 0: greedy; otherwise sampled at that temperature, request i seeded with i.
Result run(const actors::EngineConfig& config, const std::vector<std::vector<int32_t>>& prompts,
           int max_tokens, float temperature) {
  actors::LlmEngine engine(config, /*overlap=*/true);
  const auto start = std::chrono::steady_clock::now();
  uint64_t seed = 0;
  for (const std::vector<int32_t>& prompt : prompts) {
    model::SamplingParams params = greedy(max_tokens);
    params.temperature = temperature;
    params.seed = seed++;
    engine.add_request(prompt, params);
  }
  Result result;
  std::set<uint64_t> started;  // requests that have their first token
  auto decode_start = start;
  int64_t tokens_at_decode_start = 0;
  while (engine.has_unfinished_requests()) {
    const size_t num_started = started.size();
    for (const actors::RequestOutput& out : engine.step()) {
      for (const actors::SequenceOutput& d : out.deltas) {
        result.tokens += static_cast<int64_t>(d.new_token_ids.size());
        if (!d.new_token_ids.empty()) started.insert(out.request_id);
      }
    }
    if (started.size() == prompts.size() && num_started < prompts.size()) {
      decode_start = std::chrono::steady_clock::now();
      tokens_at_decode_start = result.tokens;
    }
  }
  const auto end = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(end - start).count();
  result.tokens_per_s = static_cast<double>(result.tokens) / seconds;
  result.decode_tokens_per_s = static_cast<double>(result.tokens - tokens_at_decode_start) /
                               std::chrono::duration<double>(end - decode_start).count();
  result.stats = engine.stats();
  return result;
}

// What verification costs: one decode step of `batch` sequences at context `context`, with 1
// and with K + 1 new tokens each (logits for every one), on the model alone. Alternated, best
// of `reps`, so that a loaded machine hurts both alike. Returns the time ratio (K + 1) / 1.
double verify_cost_ratio(const std::filesystem::path& dir, int batch, int context, int k,
                         int threads, int reps) {
  kernels::ThreadPool pool(threads);
  const model::LlamaCheckpoint checkpoint = model::open_llama_checkpoint(dir);
  const model::LlamaModel llama(checkpoint, &pool);
  const model::ModelConfig& c = llama.config();
  const int block_size = 16;
  const int blocks = (context + k + 1 + block_size - 1) / block_size;
  model::PagedKvCache cache(c.num_hidden_layers, batch * blocks, block_size, c.num_key_value_heads,
                            c.head_dim, kernels::KvDtype::kFloat32);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int s = 0; s < batch; ++s) {
    for (int b = 0; b < blocks; ++b) tables[s].push_back(s * blocks + b);
  }
  model::LlamaModel::Workspace workspace;
  auto step = [&](int tokens) {
    model::ForwardBatch fb;
    for (int s = 0; s < batch; ++s) {
      fb.add_sequence(std::vector<int32_t>(static_cast<size_t>(tokens), 7), context, tables[s],
                      block_size, tokens);
    }
    const auto start = std::chrono::steady_clock::now();
    llama.forward(fb, cache, workspace);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double one = 1e9, many = 1e9;
  for (int r = 0; r < reps; ++r) {
    one = std::min(one, step(1));
    many = std::min(many, step(k + 1));
  }
  return many / one;
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
  int k_max = 0;
  int ngram_min = 1;
  int ngram_max = 4;
  int threads = 0;
  int trials = 1;
  bool verify_cost = false;
  std::string draft;
  float temperature = 0.0f;
  double min_accepted = actors::SpeculativeConfig{}.min_accepted_per_seq;
  int max_batch = 0;
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
    } else if (flag == "--make-model") {
      // The 768 x 12 benchmark model of docs/PERFORMANCE.md in float16 (pagedserve make-model
      // --hidden 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000
      // --context 4096 --dtype f16 --seed 1), written to DIR and used as --model.
      model::SyntheticModelSpec spec;
      spec.dtype = model::DType::F16;
      spec.seed = 1;
      model::write_synthetic_model(value, spec);
      model = value;
    } else if (flag == "--k") {
      k = std::stoi(value);
    } else if (flag == "--k-max") {
      k_max = std::stoi(value);
    } else if (flag == "--ngram-min") {
      ngram_min = std::stoi(value);
    } else if (flag == "--ngram-max") {
      ngram_max = std::stoi(value);
    } else if (flag == "--threads") {
      threads = std::stoi(value);
    } else if (flag == "--verify-cost") {
      verify_cost = value == "1";
    } else if (flag == "--trials") {
      trials = std::stoi(value);
    } else if (flag == "--draft") {
      draft = value;
    } else if (flag == "--max-batch") {
      max_batch = std::stoi(value);
    } else if (flag == "--min-accepted") {
      min_accepted = std::stod(value);
    } else if (flag == "--temperature") {
      temperature = std::stof(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (verify_cost) {
    std::printf(
        "model %s: time of a decode step with K + 1 = %d tokens per sequence over one "
        "with 1 (context 256, best of 7)\n",
        model.c_str(), k + 1);
    for (int batch : batches) {
      std::printf("batch %3d: %.2fx\n", batch,
                  verify_cost_ratio(model, batch, 256, k, std::max(threads, 1), 7));
      std::fflush(stdout);
    }
    return 0;
  }
  actors::EngineConfig plain;
  plain.model_dir = model;
  plain.num_threads = threads;
  plain.kv_cache_memory_bytes = int64_t{1} << 30;
  actors::EngineConfig spec = plain;
  spec.speculative.method = actors::SpeculativeMethod::kNgram;
  spec.speculative.num_speculative_tokens = k;
  spec.speculative.max_speculative_tokens = k_max;  // 0 (default): a fixed K
  spec.speculative.ngram_min = ngram_min;
  spec.speculative.ngram_max = ngram_max;
  spec.speculative.max_batch_seqs = max_batch;  // 0 (default): measure every batch size
  spec.speculative.min_accepted_per_seq = min_accepted;
  if (!draft.empty()) {
    spec.speculative.method = actors::SpeculativeMethod::kDraft;
    spec.speculative.draft_model = draft;
  }

  std::vector<std::vector<int32_t>> grounded;
  std::vector<std::vector<int32_t>> repeat;
  std::vector<std::vector<int32_t>> free_starts;
  {
    actors::LlmEngine tokenizing(plain);
    for (const std::string& start : kStarts) {
      grounded.push_back(grounded_prompt(plain, start, prompt_tokens));
      std::vector<int32_t> again = grounded.back();
      const size_t head = std::min<size_t>(again.size(), 32);
      again.insert(again.end(), grounded.back().begin(), grounded.back().begin() + head);
      repeat.push_back(std::move(again));
      free_starts.push_back(tokenizing.tokenizer().encode(start));
    }
  }
  std::printf(
      "model %s, %s, k %d, k max %d, min accepted %.2f, temperature %.2f, max_tokens %d, grounded "
      "prompts of %d + %d tokens\n",
      model.c_str(), draft.empty() ? "n-gram" : ("draft " + draft).c_str(), k, k_max, min_accepted,
      temperature, max_tokens, static_cast<int>(grounded[0].size()) - prompt_tokens, prompt_tokens);
  std::printf("%-9s %5s %11s %11s %8s %8s %7s %7s %9s %9s %8s\n", "task", "batch", "base tok/s",
              "spec tok/s", "speedup", "decode", "steps", "spec", "proposed", "accepted",
              "acc/row");
  for (const auto& [task, prompts] :
       {std::pair{"grounded", &grounded}, {"repeat", &repeat}, {"free", &free_starts}}) {
    for (int batch : batches) {
      std::vector<std::vector<int32_t>> batch_prompts;
      for (int i = 0; i < batch; ++i) batch_prompts.push_back((*prompts)[i % prompts->size()]);
      double base_best = 0, spec_best = 0, base_decode = 0, spec_decode = 0;
      actors::SchedulerStats stats, base_stats;
      for (int t = 0; t < trials; ++t) {
        const Result b = run(plain, batch_prompts, max_tokens, temperature);
        base_best = std::max(base_best, b.tokens_per_s);
        base_decode = std::max(base_decode, b.decode_tokens_per_s);
        base_stats = b.stats;
        const Result r = run(spec, batch_prompts, max_tokens, temperature);
        spec_decode = std::max(spec_decode, r.decode_tokens_per_s);
        if (r.tokens_per_s > spec_best) {
          spec_best = r.tokens_per_s;
          stats = r.stats;
        }
      }
      const double rows = static_cast<double>(std::max<int64_t>(stats.num_spec_rows, 1));
      std::printf("%-9s %5d %11.1f %11.1f %7.2fx %7.2fx %7lld %7lld %9lld %9lld %8.2f\n", task,
                  batch, base_best, spec_best, spec_best / base_best, spec_decode / base_decode,
                  static_cast<long long>(base_stats.num_steps),
                  static_cast<long long>(stats.num_steps),
                  static_cast<long long>(stats.num_spec_proposed_tokens),
                  static_cast<long long>(stats.num_spec_accepted_tokens),
                  static_cast<double>(stats.num_spec_accepted_tokens) / rows);
      std::fflush(stdout);
    }
  }
  return 0;
}
