// `pagedserve generate`: offline generation for one or more prompts, run as one batch on the
// synchronous LlmEngine (as vLLM's offline LLM class drives its engine directly). Prompts come
// from --prompt flags (sampling from the flags) or a --prompts-file of OpenAI completions
// requests, one JSON object per line. Text mode streams a single prompt's continuation as it
// is generated; --json prints one object per prompt with the token ids, the text and why it
// finished (an `outputs` list when n > 1), and for a prompts file a last `"summary": true`
// line with peak blocks, preemptions by mode and prefix-cache hits.
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <variant>

#include "actors/llm_engine.h"
#include "model/tokenizer/tokenizer.h"
#include "net/protocol/completions.h"
#include "tools/cli_flags.h"
#include "tools/engine_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kGenerateHelp =
    "usage: pagedserve generate --model DIR --prompt TEXT [--prompt TEXT ...] [options]\n"
    "       pagedserve generate --model DIR --prompts-file FILE.jsonl [--json]\n"
    "  --prompts-file F    one OpenAI completions request per line (prompt, max_tokens,\n"
    "                      temperature, top_p, top_k, n, seed, stop, ignore_eos, ...)\n"
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
    "  --presence-penalty P  --frequency-penalty F  (in [-2, 2])\n"
    "  --repetition-penalty R  (in (0, 2], 1 = off)\n"
    "  --json              one JSON object per prompt\n";

struct PromptRun {
  std::vector<int32_t> prompt_ids;
  model::SamplingParams sampling;
  actors::RequestOutput final_output;  // set when the request finished
};

// A prompt to run, or the reason a line of the prompts file was refused.
struct PromptSpec {
  std::vector<int32_t> prompt_ids;
  model::SamplingParams sampling;
  std::string error;  // set: print it instead of running
};

// Each line is an OpenAI completions request (parsed by the server's own rules); a line with a
// list of prompts gives one PromptSpec per prompt.
std::vector<PromptSpec> read_prompts_file(const std::string& path,
                                          const actors::LlmEngine& engine) {
  std::ifstream in(path);
  if (!in) throw UsageError("--prompts-file: cannot open " + path);
  const net::ServedModel served = net::make_served_model(
      "pagedserve", engine.config().model_dir, engine.tokenizer(), engine.config().max_model_len);
  std::vector<PromptSpec> specs;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    net::Result<net::GenerationRequest> parsed = net::parse_completion_request(line, served);
    if (!parsed) {
      specs.push_back(
          {{}, {}, path + ":" + std::to_string(number) + ": " + parsed.error().message});
      continue;
    }
    for (actors::GenerateRequest& prompt : parsed.value().prompts) {
      specs.push_back({std::move(prompt.prompt_token_ids), std::move(prompt.sampling), {}});
    }
  }
  return specs;
}

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
  params.presence_penalty = static_cast<float>(flags.get_double("presence-penalty", 0.0));
  params.frequency_penalty = static_cast<float>(flags.get_double("frequency-penalty", 0.0));
  params.repetition_penalty = static_cast<float>(flags.get_double("repetition-penalty", 1.0));
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
  value_flags.insert({"prompt", "prompts-file", "max-tokens", "min-tokens", "temperature", "top-p",
                      "top-k", "min-p", "seed", "stop", "n", "best-of", "length-penalty",
                      "presence-penalty", "frequency-penalty", "repetition-penalty"});
  std::set<std::string> bool_flags = kEngineBoolFlags;
  bool_flags.insert({"json", "ignore-eos", "use-beam-search", "help"});
  const CliFlags flags(args, value_flags, bool_flags);
  if (flags.has("help")) {
    std::cout << kGenerateHelp << kEngineFlagsHelp;
    return 0;
  }
  const std::vector<std::string> prompts = flags.all("prompt");
  const bool from_file = flags.has("prompts-file");
  if (prompts.empty() == !from_file) {
    throw UsageError("give --prompt (repeat it for a batch) or --prompts-file, not both");
  }
  const model::SamplingParams params = sampling_from_flags(flags);
  const bool json = flags.has("json");

  actors::LlmEngine engine(engine_config_from_flags(flags));
  const model::Tokenizer& tokenizer = engine.tokenizer();
  std::vector<PromptSpec> specs;
  if (from_file) {
    specs = read_prompts_file(flags.require("prompts-file"), engine);
  } else {
    for (const std::string& prompt : prompts)
      specs.push_back({tokenizer.encode(prompt), params, {}});
  }
  // Text mode streams when there is one continuation to stream.
  const bool stream = !json && specs.size() == 1 && specs[0].sampling.num_sequences() == 1;

  std::map<uint64_t, PromptRun> runs;
  std::vector<std::variant<uint64_t, std::string>> order;  // request id, or a refused line
  for (PromptSpec& spec : specs) {
    if (!spec.error.empty()) {
      order.emplace_back(std::move(spec.error));
      continue;
    }
    PromptRun run{spec.prompt_ids, spec.sampling, {}};
    const uint64_t id = engine.add_request(std::move(spec.prompt_ids), spec.sampling);
    order.emplace_back(id);
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
    if (const auto* refused = std::get_if<std::string>(&order[i])) {
      std::cerr << "error: " << *refused << "\n";
      if (json) std::cout << nlohmann::json({{"error", *refused}}).dump() << "\n";
      exit_code = 1;
      continue;
    }
    const PromptRun& run = runs.at(std::get<uint64_t>(order[i]));
    if (!run.final_output.error.empty()) {
      std::cerr << "error: prompt " << i << ": " << run.final_output.error << "\n";
      exit_code = 1;
    }
    if (json) {
      std::cout << request_json(run, run.sampling.n)
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else if (!stream) {
      for (const actors::CompletionOutput& c : run.final_output.outputs) {
        std::cout << "[" << i;
        if (run.sampling.n > 1) std::cout << "." << c.index;
        std::cout << "] " << c.text << "\n";
      }
    }
  }
  if (from_file && json) {
    const actors::SchedulerStats stats = engine.stats();
    std::cout << nlohmann::json({{"summary", true},
                                 {"num_requests", runs.size()},
                                 {"num_refused", order.size() - runs.size()},
                                 {"peak_kv_blocks_used", stats.peak_used_blocks},
                                 {"kv_blocks_total", engine.config().num_kv_blocks},
                                 {"num_preemptions_swap", stats.num_preemptions_swap},
                                 {"num_preemptions_recompute", stats.num_preemptions_recompute},
                                 {"prefix_cache_hit_tokens", stats.prefix_cache_hit_tokens},
                                 {"num_steps", stats.num_steps}})
              << "\n";
  }
  return exit_code;
}

}  // namespace pagedserve::tools
