// `pagedserve generate`: offline generation for one or more prompts, run as one batch.
// Text mode streams a single prompt's continuation as it is generated; --json prints one
// object per prompt with the token ids, the text and why it finished (an `outputs` list when
// n > 1: parallel sampling, best_of, beam search).
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
    "  --min-tokens N      tokens generated before EOS, stop ids or stop strings count\n"
    "  --temperature T     0 = greedy (default 1.0)\n"
    "  --top-p P  --top-k K  --min-p P\n"
    "  --seed S            same seed, same output\n"
    "  --ignore-eos        keep going past the end-of-sequence token\n"
    "  --stop TEXT         stop before this text (repeat for several)\n"
    "  --n N               completions per prompt (default 1)\n"
    "  --best-of N         generate N, return the n most likely (default n)\n"
    "  --use-beam-search   beam search with width best_of (or n); needs --temperature 0\n"
    "  --length-penalty L  beam score = logprob / length^L (default 1)\n"
    "  --json              one JSON object per prompt\n";

struct PromptRun {
  std::vector<int32_t> prompt_ids;
  actors::RequestOutput final_output;  // set when the request finished
};

model::SamplingParams sampling_from_flags(const CliFlags& flags) {
  model::SamplingParams params;
  params.max_tokens = static_cast<int>(flags.get_int("max-tokens", 128, 1, 1 << 24));
  params.min_tokens = static_cast<int>(flags.get_int("min-tokens", 0, 0, 1 << 24));
  params.temperature = static_cast<float>(flags.get_double("temperature", 1.0));
  params.top_p = static_cast<float>(flags.get_double("top-p", 1.0));
  params.top_k = static_cast<int>(flags.get_int("top-k", 0, -1, 1 << 30));
  params.min_p = static_cast<float>(flags.get_double("min-p", 0.0));
  if (flags.has("seed")) {
    params.seed = static_cast<uint64_t>(flags.get_int("seed", 0, 0, INT64_MAX));
  }
  params.ignore_eos = flags.has("ignore-eos");
  params.stop = flags.all("stop");
  params.n = static_cast<int>(flags.get_int("n", 1, 1, 1 << 20));
  if (flags.has("best-of")) {
    params.best_of = static_cast<int>(flags.get_int("best-of", 1, 1, 1 << 20));
  }
  params.use_beam_search = flags.has("use-beam-search");
  params.length_penalty = static_cast<float>(flags.get_double("length-penalty", 1.0));
  if (std::string problem = params.validate(); !problem.empty()) throw UsageError(problem);
  return params;
}

nlohmann::json completion_json(const actors::CompletionOutput& c) {
  return {{"index", c.index},
          {"token_ids", c.token_ids},
          {"text", c.text},
          {"finish_reason", actors::finish_reason_name(c.finish_reason)}};
}

// One line per prompt. n == 1 keeps token_ids/text/finish_reason at the top level; n > 1
// lists the completions under `outputs`.
nlohmann::json request_json(const PromptRun& run, int n) {
  nlohmann::json out = {{"prompt_token_ids", run.prompt_ids},
                        {"num_cached_tokens", run.final_output.num_cached_tokens}};
  const auto& outputs = run.final_output.outputs;
  if (n == 1) {
    const nlohmann::json only =
        outputs.empty() ? nlohmann::json::object() : completion_json(outputs.front());
    out["token_ids"] = only.value("token_ids", nlohmann::json::array());
    out["text"] = only.value("text", "");
    out["finish_reason"] = only.value("finish_reason", "error");
  } else {
    out["outputs"] = nlohmann::json::array();
    for (const actors::CompletionOutput& c : outputs) out["outputs"].push_back(completion_json(c));
  }
  return out;
}

}  // namespace

int run_generate(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = kEngineValueFlags;
  value_flags.insert({"prompt", "max-tokens", "min-tokens", "temperature", "top-p", "top-k",
                      "min-p", "seed", "stop", "n", "best-of", "length-penalty"});
  std::set<std::string> bool_flags = kEngineBoolFlags;
  bool_flags.insert({"json", "ignore-eos", "use-beam-search", "help"});
  const CliFlags flags(args, value_flags, bool_flags);
  if (flags.has("help")) {
    std::cout << kGenerateHelp << kEngineFlagsHelp;
    return 0;
  }
  const std::vector<std::string> prompts = flags.all("prompt");
  if (prompts.empty()) throw UsageError("--prompt is required (repeat it for a batch)");
  const model::SamplingParams params = sampling_from_flags(flags);
  const bool json = flags.has("json");
  // Text mode streams when there is one continuation to stream.
  const bool stream = !json && prompts.size() == 1 && params.num_sequences() == 1;

  actors::LlmEngine engine(engine_config_from_flags(flags));
  const model::Tokenizer& tokenizer = engine.tokenizer();

  std::map<uint64_t, PromptRun> runs;
  std::vector<uint64_t> order;
  for (const std::string& prompt : prompts) {
    PromptRun run;
    run.prompt_ids = tokenizer.encode(prompt, true);
    const uint64_t id = engine.add_request(run.prompt_ids, params);
    order.push_back(id);
    runs.emplace(id, std::move(run));
  }

  while (engine.has_unfinished_requests()) {
    for (actors::RequestOutput& out : engine.step()) {
      PromptRun& run = runs.at(out.request_id);
      if (stream) {
        for (const actors::SequenceOutput& delta : out.deltas) std::cout << delta.text_delta;
        std::cout << (out.finished ? "\n" : "") << std::flush;
      }
      if (out.finished) run.final_output = std::move(out);
    }
  }

  int exit_code = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const PromptRun& run = runs.at(order[i]);
    if (!run.final_output.error.empty()) {
      std::cerr << "error: prompt " << i << ": " << run.final_output.error << "\n";
      exit_code = 1;
    }
    if (json) {
      std::cout << request_json(run, params.n)
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else if (!stream) {
      for (const actors::CompletionOutput& c : run.final_output.outputs) {
        std::cout << "[" << i;
        if (params.n > 1) std::cout << "." << c.index;
        std::cout << "] " << c.text << "\n";
      }
    }
  }
  return exit_code;
}

}  // namespace pagedserve::tools
