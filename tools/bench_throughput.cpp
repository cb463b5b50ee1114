// `pagedserve bench throughput`: offline throughput. Submits N synthetic requests (random
// non-special prompt tokens, forced output length) to the Engine at once and reports
// requests, input and output tokens per second, with the engine's preemption and block
// counts. No HTTP: this is the engine's own speed.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "actors/engine.h"
#include "model/grammar/json_schema.h"
#include "net/protocol/grammar_cache.h"
#include "tools/cli_flags.h"
#include "tools/engine_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kThroughputHelp =
    "usage: pagedserve bench throughput --model DIR [options]\n"
    "  --num-requests N    requests submitted at once (default 64)\n"
    "  --prompt-tokens P   prompt length of each request (default 128)\n"
    "  --output-tokens O   tokens generated per request, EOS ignored (default 128)\n"
    "  --seed S            seed of the synthetic prompts (default 0)\n"
    "  --json              one JSON object instead of the table\n"
    "  --json-schema FILE  constrain every output to this JSON schema (structured outputs)\n"
    "  --grammar FILE      constrain every output to this GBNF grammar\n"
    "                      (run with and without one: stage_sampling_s is the mask cost)\n"
    "  --grammar-prewarm M background (as served: masks cached by a thread while the run\n"
    "                      goes), before (cached before the timed run) or off\n"
    "Sampling (every request; seeds 0, 1, ... so runs repeat):\n"
    "With --batch B: prefill and decode speed against this machine's bandwidth and FMA peak\n"
    "(see `pagedserve bench throughput --batch 1 --help`).\n";

std::vector<int32_t> synthetic_prompt(const model::Tokenizer& tokenizer, int length,
                                      std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> any(0, tokenizer.vocab_size() - 1);
  std::vector<int32_t> ids;
  while (static_cast<int>(ids.size()) < length) {
    const int32_t id = any(rng);
    if (!tokenizer.is_special(id)) ids.push_back(id);
  }
  return ids;
}

// The --json-schema / --grammar constraint as GBNF ("" when neither), and its description.
std::pair<std::string, std::string> constraint_from_flags(const CliFlags& flags) {
  const std::string schema_file = flags.get("json-schema", "");
  const std::string grammar_file = flags.get("grammar", "");
  if (!schema_file.empty() && !grammar_file.empty()) {
    throw UsageError("--json-schema and --grammar exclude each other");
  }
  const std::string file = schema_file.empty() ? grammar_file : schema_file;
  if (file.empty()) return {};
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UsageError("cannot read " + file);
  std::stringstream text;
  text << in.rdbuf();
  try {
    if (schema_file.empty()) return {text.str(), "grammar " + file};
    return {model::grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(text.str())),
            "json-schema " + file};
  } catch (const std::exception& e) {
    throw UsageError(file + ": " + e.what());
  }
}

}  // namespace

int run_bench_throughput(const std::vector<std::string>& args) {
  // --batch selects the per-phase roofline benchmark (tools/bench_phases.cpp).
  for (const std::string& arg : args) {
    if (arg == "--batch" || arg.rfind("--batch=", 0) == 0) return run_bench_phases(args);
  }
  std::set<std::string> value_flags = kEngineValueFlags;
  value_flags.insert({"num-requests", "prompt-tokens", "output-tokens", "seed", "json-schema",
                      "grammar", "grammar-prewarm"});
  value_flags.insert(kBenchSamplingFlags.begin(), kBenchSamplingFlags.end());
  std::set<std::string> bool_flags = kEngineBoolFlags;
  bool_flags.insert({"json", "help"});
  const CliFlags flags(args, value_flags, bool_flags);
  if (flags.has("help")) {
    std::cout << kThroughputHelp << kBenchSamplingHelp << kEngineFlagsHelp;
    return 0;
  }
  const int num_requests = static_cast<int>(flags.get_int("num-requests", 64, 1, 1 << 20));
  const int prompt_tokens = static_cast<int>(flags.get_int("prompt-tokens", 128, 1, 1 << 24));
  const int output_tokens = static_cast<int>(flags.get_int("output-tokens", 128, 1, 1 << 24));
  std::mt19937 rng(static_cast<uint32_t>(flags.get_int("seed", 0, 0, UINT32_MAX)));
  model::SamplingParams sampling = bench_sampling_from_flags(flags);
  const auto [gbnf, constraint] = constraint_from_flags(flags);

  actors::EngineOptions options;
  options.max_unfinished_requests = std::max(num_requests, 1);
  const std::string prewarm_mode = flags.get("grammar-prewarm", "background");
  if (prewarm_mode != "background" && prewarm_mode != "before" && prewarm_mode != "off") {
    throw UsageError("--grammar-prewarm must be background, before or off");
  }
  auto engine = actors::Engine::start(engine_config_from_flags(flags), options);
  std::optional<net::GrammarCache> grammars;  // alive for the run: its thread prewarms
  if (!gbnf.empty()) {
    model::grammar::PrewarmLimits prewarm;
    if (prewarm_mode == "off") prewarm.max_states = 0;
    grammars.emplace(engine->tokenizer(), engine->eos_token_ids(), prewarm);
    try {
      sampling.grammar = grammars->get(gbnf);
    } catch (const std::exception& e) {
      engine->shutdown();
      throw UsageError(constraint + ": " + e.what());
    }
    if (prewarm_mode == "before") grammars->wait_for_prewarm();
  }

  std::vector<actors::GenerateRequest> requests(num_requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    actors::GenerateRequest& request = requests[i];
    request.prompt_token_ids = synthetic_prompt(engine->tokenizer(), prompt_tokens, rng);
    request.sampling = sampling;
    request.sampling.seed = static_cast<uint64_t>(i);
    request.sampling.max_tokens = output_tokens;
    request.sampling.ignore_eos = true;
  }

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<actors::RequestStream>> streams;
  for (actors::GenerateRequest& request : requests) {
    streams.push_back(engine->submit(std::move(request)));
  }
  int64_t generated = 0;
  int failed = 0;
  std::string first_error;
  for (auto& stream : streams) {
    while (std::optional<actors::TokenEvent> event = stream->next()) {
      generated += static_cast<int64_t>(event->token_ids.size());
      if (event->finished && event->finish_reason == "error") {
        ++failed;
        if (first_error.empty()) first_error = event->error;
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const actors::EngineStats stats = engine->stats();
  engine->shutdown();
  model::grammar::PrewarmStats prewarmed;
  if (sampling.grammar && prewarm_mode != "off") prewarmed = sampling.grammar->prewarm();

  const double input_tokens = static_cast<double>(num_requests - failed) * prompt_tokens;
  nlohmann::ordered_json out = {
      {"num_requests", num_requests},
      {"failed", failed},
      {"prompt_tokens", prompt_tokens},
      {"output_tokens", output_tokens},
      {"generated_tokens", generated},
      {"elapsed_s", seconds},
      {"requests_per_s", (num_requests - failed) / seconds},
      {"input_tokens_per_s", input_tokens / seconds},
      {"output_tokens_per_s", static_cast<double>(generated) / seconds},
      {"total_tokens_per_s", (input_tokens + static_cast<double>(generated)) / seconds},
      {"num_steps", stats.num_steps},
      {"peak_kv_blocks_used", stats.peak_kv_blocks_used},
      {"kv_blocks_total", stats.num_kv_blocks_total},
      {"num_preemptions_swap", stats.num_preemptions_swap},
      {"num_preemptions_recompute", stats.num_preemptions_recompute},
      {"executor_busy_s", stats.executor_busy_s},
      {"executor_idle_s", stats.executor_idle_s},
      {"temperature", sampling.temperature},
      {"top_p", sampling.top_p},
      {"top_k", sampling.top_k},
      {"min_p", sampling.min_p},
      {"constraint",
       constraint.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(constraint)},
      {"stage_forward_s", stats.stage_s.forward},
      {"stage_sampling_s", stats.stage_s.sampling},
      {"stage_copies_s", stats.stage_s.copies},
      {"stage_schedule_s", stats.stage_s.schedule},
      {"stage_process_outputs_s", stats.stage_s.process_outputs},
      {"stage_detokenize_s", stats.stage_s.detokenize},
      {"grammar_prewarm",
       sampling.grammar ? nlohmann::ordered_json(prewarm_mode) : nlohmann::ordered_json()},
      {"grammar_prewarm_states", prewarmed.states},
      {"grammar_prewarm_complete", prewarmed.complete},
      {"grammar_prewarm_s", prewarmed.seconds}};
  if (flags.has("json")) {
    std::cout << out.dump() << "\n";
  } else {
    for (const auto& [key, value] : out.items()) {
      std::printf("%-28s %s\n", key.c_str(), value.dump().c_str());
    }
  }
  if (failed > 0) {
    std::cerr << "bench throughput: " << failed << " requests failed, e.g.: " << first_error
              << "\n";
    return 1;
  }
  return 0;
}

int run_bench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help") {
    std::cout << "usage: pagedserve bench <throughput|serve|sweep|paper|calibrate|admission|soak> "
                 "[flags]\n";
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "throughput") return run_bench_throughput(rest);
  if (args[0] == "serve" || args[0] == "sweep") return run_bench_online(args[0], rest);
  if (args[0] == "paper") return run_bench_paper(rest);
  if (args[0] == "calibrate") return run_bench_calibrate(rest);
  if (args[0] == "admission") return run_bench_admission(rest);
  if (args[0] == "soak") return run_bench_soak(rest);
  throw UsageError("unknown bench '" + args[0] +
                   "' (known: throughput, serve, sweep, paper, calibrate, admission, soak)");
}

}  // namespace pagedserve::tools
