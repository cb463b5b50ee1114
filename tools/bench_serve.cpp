// `pagedserve bench serve` and `pagedserve bench sweep`: the online benchmark. Replays a
// trace (Azure LLM inference CSV or JSONL) against any OpenAI-compatible server and reports
// throughput, TTFT, TPOT, ITL, end-to-end and normalized latency; sweep repeats that over
// request rates and servers and plots normalized latency against rate. The work is in
// tools/loadgen/; this file is flags, set-up calls and output.
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tools/cli_flags.h"
#include "tools/loadgen/client.h"
#include "tools/loadgen/schedule.h"
#include "tools/loadgen/svg_plot.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

using namespace pagedserve::loadgen;

const char* const kServeHelp =
    "usage: pagedserve bench serve --trace FILE [options]\n"
    "  --trace FILE                Azure trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens) or\n"
    "                              JSONL (prompt | prompt_token_ids | messages, timestamp,\n"
    "                              max_tokens, sampling fields)\n"
    "  --on-bad-line skip|fail     malformed trace lines (default skip; each is reported)\n"
    "  --start N --num-requests N  the slice replayed (default: from 0, all)\n"
    "  --max-prompt-tokens N --max-output-tokens N   length limits (default none)\n"
    "  --length-mode clip|scale    clip each length, or scale all by limit/longest (default clip)\n"
    "  --shared-prefix-tokens K    the same K tokens in front of every synthesised prompt\n"
    "  --time-scale X              replay the trace's timestamps X times faster (default 1)\n"
    "  --request-rate R|inf        instead: R requests/s with gamma gaps, inf = all at once\n"
    "  --burstiness B              gamma shape of the gaps, 1 = Poisson (default 1)\n"
    "  --seed S                    seeds gaps and synthesised prompts (default 0)\n"
    "  --max-concurrency N         at most N requests in flight; later arrivals queue\n"
    "  --protocol http|ws          SSE over /v1/(chat/)completions, or pagedserve's WebSocket\n"
    "  --base-url URL              default http://127.0.0.1:8000\n"
    "  --model NAME                default: the first of GET /v1/models\n"
    "  --api-key KEY               sent as a Bearer token\n"
    "  --vocab-size V              token ids of synthesised prompts come from [3, V); default:\n"
    "                              ids of a text sent to POST /tokenize\n"
    "  --ws-path PATH --ws-connections N   WebSocket endpoint (/v1/stream) and sockets (4)\n"
    "  --request-timeout S         per network operation (default 600)\n"
    "  --result-json FILE          summary, configuration and per-request records\n"
    "  --quiet                     no progress line\n";

const char* const kSweepHelp =
    "usage: pagedserve bench sweep --trace FILE --request-rate R1,R2,... [--base-url URL]...\n"
    "  every `bench serve` flag, plus:\n"
    "  --request-rate R            repeatable or comma-separated: the rates swept\n"
    "  --base-url URL              repeatable: one line per server\n"
    "  --label NAME                repeatable: legend names, in --base-url order\n"
    "  --result-json FILE          the table of summaries\n"
    "  --plot FILE.svg             normalized latency against request rate\n";

std::set<std::string> value_flags() {
  return {"trace",
          "on-bad-line",
          "start",
          "num-requests",
          "max-prompt-tokens",
          "max-output-tokens",
          "length-mode",
          "shared-prefix-tokens",
          "time-scale",
          "request-rate",
          "burstiness",
          "seed",
          "max-concurrency",
          "protocol",
          "base-url",
          "model",
          "api-key",
          "vocab-size",
          "ws-path",
          "ws-connections",
          "request-timeout",
          "result-json",
          "plot",
          "label"};
}

// One server's view of the replay: requests with prompts built for its vocabulary.
struct Prepared {
  std::vector<OutgoingRequest> requests;
  std::vector<double> replay_timestamps;  // empty when the trace has none
  nlohmann::ordered_json config;
};

std::vector<TraceRequest> load_trace(const CliFlags& flags, nlohmann::ordered_json& config) {
  const std::string policy = flags.get("on-bad-line", "skip");
  if (policy != "skip" && policy != "fail") throw UsageError("--on-bad-line is skip or fail");
  const std::string path = flags.require("trace");
  TraceReadResult read;
  try {
    read = read_trace_file(path, policy == "fail" ? BadLinePolicy::kFail : BadLinePolicy::kSkip);
  } catch (const TraceError& e) {
    throw UsageError(path + ": " + e.what());
  }
  for (const BadLine& bad : read.bad_lines) {
    std::cerr << path << ":" << bad.line_number << ": skipped: " << bad.reason << "\n";
  }
  std::vector<TraceRequest> trace = slice(read.requests, flags.get_int("start", 0, 0, INT64_MAX),
                                          flags.get_int("num-requests", -1, 1, INT64_MAX));
  LengthLimits limits;
  limits.max_prompt_tokens = flags.get_int("max-prompt-tokens", 0, 1, INT64_MAX);
  limits.max_output_tokens = flags.get_int("max-output-tokens", 0, 1, INT64_MAX);
  const std::string mode = flags.get("length-mode", "clip");
  if (mode != "clip" && mode != "scale") throw UsageError("--length-mode is clip or scale");
  limits.mode = mode == "clip" ? LengthMode::kClip : LengthMode::kScale;
  config["trace"] = path;
  config["bad_lines_skipped"] = read.bad_lines.size();
  config["num_requests"] = trace.size();
  config["length_mode"] = mode;
  config["max_prompt_tokens"] = limits.max_prompt_tokens;
  config["max_output_tokens"] = limits.max_output_tokens;
  config["requests_length_limited"] = apply_length_limits(trace, limits);
  return trace;
}

Prepared prepare(const CliFlags& flags, const std::string& base_url) {
  Prepared out;
  nlohmann::ordered_json& config = out.config;
  std::vector<TraceRequest> trace = load_trace(flags, config);
  const std::string api_key = flags.get("api-key", "");
  PromptOptions prompt;
  prompt.model = flags.get("model", "");
  prompt.shared_prefix_tokens = flags.get_int("shared-prefix-tokens", 0, 0, 1 << 24);
  prompt.seed = static_cast<uint32_t>(flags.get_int("seed", 0, 0, UINT32_MAX));
  const HttpReply models = http_fetch(base_url, "/v1/models", "", api_key, 10.0);
  const nlohmann::json listed = nlohmann::json::parse(models.body, nullptr, false);
  int64_t max_model_len = 0;
  if (models.status == 200 && listed.contains("data") && listed["data"].is_array() &&
      !listed["data"].empty()) {
    const nlohmann::json& card = listed["data"][0];
    if (prompt.model.empty() && card.contains("id")) prompt.model = card["id"].get<std::string>();
    if (card.contains("max_model_len") && card["max_model_len"].is_number_integer()) {
      max_model_len = card["max_model_len"].get<int64_t>();
    }
  } else if (prompt.model.empty()) {
    std::cerr << "bench: GET " << base_url << "/v1/models failed ("
              << (models.error.empty() ? "http " + std::to_string(models.status) : models.error)
              << "); pass --model\n";
  }
  config["requests_fit_to_context"] =
      fit_to_context(trace, prompt.shared_prefix_tokens, max_model_len);
  if (flags.has("vocab-size")) {
    prompt.vocab_size = static_cast<int32_t>(flags.get_int("vocab-size", 0, 4, INT32_MAX));
  } else {
    const nlohmann::json ask = {{"model", prompt.model},
                                {"prompt",
                                 "Once upon a time, in a small town by the sea, a "
                                 "curious girl found an old map and a brass key."}};
    const HttpReply tokens = http_fetch(base_url, "/tokenize", ask.dump(), api_key, 10.0);
    const nlohmann::json ids = nlohmann::json::parse(tokens.body, nullptr, false);
    if (tokens.status == 200 && ids.contains("tokens") && ids["tokens"].is_array()) {
      for (const auto& id : ids["tokens"]) {
        if (id.is_number_integer() && id.get<int32_t>() >= kFirstOrdinaryId) {
          prompt.token_pool.push_back(id.get<int32_t>());
        }
      }
    }
    if (prompt.token_pool.empty()) {
      prompt.vocab_size = 259;  // byte tokens 3..258 exist in every Llama-style vocabulary
      std::cerr
          << "bench: no --vocab-size and POST /tokenize gave no ids; prompts use ids 3..258\n";
    }
  }
  for (const TraceRequest& t : trace) {
    if (t.timestamp_s) out.replay_timestamps.push_back(*t.timestamp_s);
  }
  if (out.replay_timestamps.size() != trace.size()) out.replay_timestamps.clear();
  out.requests = build_requests(trace, prompt);
  config["base_url"] = base_url;
  config["model"] = prompt.model;
  config["max_model_len"] = max_model_len;
  config["shared_prefix_tokens"] = prompt.shared_prefix_tokens;
  config["prompt_ids"] =
      prompt.token_pool.empty() ? "uniform from [3, vocab_size)" : "drawn from POST /tokenize ids";
  return out;
}

RunOptions run_options(const CliFlags& flags, const std::string& base_url) {
  RunOptions options;
  const std::string protocol = flags.get("protocol", "http");
  if (protocol != "http" && protocol != "ws") throw UsageError("--protocol is http or ws");
  options.protocol = protocol == "ws" ? Protocol::kWs : Protocol::kHttp;
  options.base_url = base_url;
  options.api_key = flags.get("api-key", "");
  options.ws_path = flags.get("ws-path", options.ws_path);
  options.ws_connections = static_cast<int>(flags.get_int("ws-connections", 4, 1, 1024));
  options.max_concurrency = flags.get_int("max-concurrency", 0, 1, INT64_MAX);
  options.request_timeout_s = flags.get_double("request-timeout", 600.0);
  options.progress = !flags.has("quiet");
  return options;
}

// Arrival times: the trace's timestamps (time-scaled) unless --request-rate is given.
std::vector<double> arrivals(const CliFlags& flags, const Prepared& prepared,
                             std::optional<double> rate, nlohmann::ordered_json& config) {
  const double burstiness = flags.get_double("burstiness", 1.0);
  const double time_scale = flags.get_double("time-scale", 1.0);
  if (!(burstiness > 0) || !(time_scale > 0)) {
    throw UsageError("--burstiness and --time-scale must be > 0");
  }
  const size_t n = prepared.requests.size();
  if (!rate && prepared.replay_timestamps.empty()) {
    throw UsageError("the trace has no timestamps: pass --request-rate");
  }
  config["request_rate"] = rate
                               ? (std::isinf(*rate) ? nlohmann::json("inf") : nlohmann::json(*rate))
                               : nlohmann::json("replay");
  config["burstiness"] = burstiness;
  config["time_scale"] = time_scale;
  if (!rate) return replay_arrivals(prepared.replay_timestamps, time_scale);
  return rate_arrivals(n, *rate, burstiness,
                       static_cast<uint32_t>(flags.get_int("seed", 0, 0, UINT32_MAX)));
}

std::optional<double> rate_flag(const std::string& text) {
  try {
    return parse_rate(text);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--request-rate: ") + e.what());
  }
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
}

int run_bench_serve(const std::vector<std::string>& args) {
  const CliFlags flags(args, value_flags(), {"quiet", "help"});
  if (flags.has("help")) {
    std::cout << kServeHelp;
    return 0;
  }
  const std::string base_url = flags.get("base-url", "http://127.0.0.1:8000");
  Prepared prepared = prepare(flags, base_url);
  const std::optional<double> rate =
      flags.has("request-rate") ? rate_flag(flags.get("request-rate", "")) : std::nullopt;
  const std::vector<double> when = arrivals(flags, prepared, rate, prepared.config);
  const RunResult run = run_load(run_options(flags, base_url), prepared.requests, when);
  const Summary summary = summarize(run.records, run.duration_s);
  std::cout << format_summary(summary, "Serving Benchmark Result");
  std::cout << "(lengths: --length-mode " << prepared.config["length_mode"].get<std::string>()
            << ", " << prepared.config["requests_length_limited"] << " requests limited, "
            << prepared.config["requests_fit_to_context"] << " fit to max_model_len)\n";
  if (flags.has("result-json")) {
    nlohmann::ordered_json out = {{"config", prepared.config}, {"summary", summary_json(summary)}};
    nlohmann::ordered_json& records = out["requests"] = nlohmann::ordered_json::array();
    for (const RequestRecord& r : run.records) records.push_back(record_json(r));
    write_file(flags.get("result-json", ""), out.dump(1) + "\n");
  }
  return summary.completed == 0 && !run.records.empty() ? 1 : 0;
}

int run_bench_sweep(const std::vector<std::string>& args) {
  const CliFlags flags(args, value_flags(), {"quiet", "help"});
  if (flags.has("help")) {
    std::cout << kSweepHelp;
    return 0;
  }
  std::vector<double> rates;
  for (const std::string& list : flags.all("request-rate")) {
    std::stringstream items(list);
    for (std::string item; std::getline(items, item, ',');) rates.push_back(*rate_flag(item));
  }
  if (rates.empty()) throw UsageError("--request-rate is required (e.g. 1,2,4,8)");
  std::vector<std::string> urls = flags.all("base-url");
  if (urls.empty()) urls.push_back("http://127.0.0.1:8000");
  const std::vector<std::string> labels = flags.all("label");
  nlohmann::ordered_json table = nlohmann::ordered_json::array();
  std::vector<PlotSeries> series;
  for (size_t u = 0; u < urls.size(); ++u) {
    Prepared prepared = prepare(flags, urls[u]);
    PlotSeries line{u < labels.size() ? labels[u] : urls[u], {}, {}};
    for (const double rate : rates) {
      nlohmann::ordered_json config = prepared.config;
      const auto when = arrivals(flags, prepared, rate, config);
      const RunResult run = run_load(run_options(flags, urls[u]), prepared.requests, when);
      const Summary summary = summarize(run.records, run.duration_s);
      std::cout << format_summary(summary,
                                  line.label + " @ " + config["request_rate"].dump() + " req/s");
      table.push_back(
          {{"label", line.label}, {"config", config}, {"summary", summary_json(summary)}});
      if (std::isfinite(rate)) {
        line.x.push_back(rate);
        line.y.push_back(summary.completed > 0 ? summary.normalized_latency_s : NAN);
      }
    }
    series.push_back(std::move(line));
  }
  if (flags.has("result-json")) write_file(flags.get("result-json", ""), table.dump(1) + "\n");
  if (flags.has("plot")) write_file(flags.get("plot", ""), svg_line_plot(series, PlotOptions{}));
  return 0;
}

}  // namespace

int run_bench_online(const std::string& name, const std::vector<std::string>& args) {
  return name == "serve" ? run_bench_serve(args) : run_bench_sweep(args);
}

}  // namespace pagedserve::tools
