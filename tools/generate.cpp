// `pagedserve generate`: offline generation for one or more prompts, run as one batch.
// Text mode streams a single prompt's continuation as it is generated; --json prints one
// object per prompt with the token ids, the text and why it finished.
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "actors/llm_engine.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/cli_flags.h"
#include "tools/engine_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kGenerateHelp =
    "usage: pagedserve generate --model DIR --prompt TEXT [--prompt TEXT ...] [options]\n"
    "  --max-tokens N      tokens to generate per prompt (default 128)\n"
    "  --temperature T     0 = greedy (default 1.0)\n"
    "  --top-p P  --top-k K  --min-p P\n"
    "  --seed S            same seed, same output\n"
    "  --ignore-eos        keep going past the end-of-sequence token\n"
    "  --json              one JSON object per prompt\n";

struct PromptRun {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::string finish_reason;
  int num_cached_tokens = 0;
  std::string error;
  std::unique_ptr<model::IncrementalDecoder> stream;
};

}  // namespace

int run_generate(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = kEngineValueFlags;
  value_flags.insert({"prompt", "max-tokens", "temperature", "top-p", "top-k", "min-p", "seed"});
  std::set<std::string> bool_flags = kEngineBoolFlags;
  bool_flags.insert({"json", "ignore-eos", "help"});
  const CliFlags flags(args, value_flags, bool_flags);
  if (flags.has("help")) {
    std::cout << kGenerateHelp << kEngineFlagsHelp;
    return 0;
  }
  const std::vector<std::string> prompts = flags.all("prompt");
  if (prompts.empty()) throw UsageError("--prompt is required (repeat it for a batch)");

  model::SamplingParams params;
  params.max_tokens = static_cast<int>(flags.get_int("max-tokens", 128, 1, 1 << 24));
  params.temperature = static_cast<float>(flags.get_double("temperature", 1.0));
  params.top_p = static_cast<float>(flags.get_double("top-p", 1.0));
  params.top_k = static_cast<int>(flags.get_int("top-k", 0, -1, 1 << 30));
  params.min_p = static_cast<float>(flags.get_double("min-p", 0.0));
  if (flags.has("seed")) {
    params.seed = static_cast<uint64_t>(flags.get_int("seed", 0, 0, INT64_MAX));
  }
  params.ignore_eos = flags.has("ignore-eos");
  if (std::string problem = params.validate(); !problem.empty()) throw UsageError(problem);
  const bool json = flags.has("json");

  actors::LlmEngine engine(engine_config_from_flags(flags));
  const model::Tokenizer& tokenizer = engine.tokenizer();

  std::map<uint64_t, PromptRun> runs;
  std::vector<uint64_t> order;
  for (const std::string& prompt : prompts) {
    PromptRun run;
    run.prompt_ids = tokenizer.encode(prompt, true);
    const uint64_t id = engine.add_request(run.prompt_ids, params);
    if (!json && prompts.size() == 1) {
      run.stream = std::make_unique<model::IncrementalDecoder>(tokenizer, run.prompt_ids);
    }
    order.push_back(id);
    runs.emplace(id, std::move(run));
  }

  while (engine.has_unfinished_requests()) {
    for (const actors::SequenceUpdate& update : engine.step()) {
      PromptRun& run = runs.at(update.id);
      if (update.new_token_id >= 0) {
        run.output_ids.push_back(update.new_token_id);
        if (run.stream) std::cout << run.stream->push(update.new_token_id) << std::flush;
      }
      if (update.finished()) {
        run.finish_reason = actors::finish_reason_name(update.finish_reason);
        run.num_cached_tokens = update.num_cached_tokens;
        run.error = update.error;
        if (run.stream) std::cout << run.stream->flush() << "\n";
      }
    }
  }

  int exit_code = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const PromptRun& run = runs.at(order[i]);
    if (!run.error.empty()) {
      std::cerr << "error: prompt " << i << ": " << run.error << "\n";
      exit_code = 1;
    }
    const std::string text = tokenizer.decode(run.output_ids, /*skip_special_tokens=*/true);
    if (json) {
      nlohmann::json out = {{"prompt_token_ids", run.prompt_ids},
                            {"token_ids", run.output_ids},
                            {"text", text},
                            {"finish_reason", run.finish_reason},
                            {"num_cached_tokens", run.num_cached_tokens}};
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (!run.stream) {
      std::cout << "[" << i << "] " << text << "\n";
    }
  }
  return exit_code;
}

}  // namespace pagedserve::tools
