// `pagedserve bench soak`: the chaos soak. Starts a real `pagedserve serve` child, measures the
// request rate it sustains on the trace (or takes --rate), replays the trace at --overload
// times that rate for --seconds while a share of clients misbehave (tools/loadgen/chaos.h),
// then checks that the server survived: alive, every client answered as it should, nothing
// stuck (running = waiting = 0, every KV block free), resident memory flat after warm-up, and
// SIGTERM under load drains and exits 0. Prints the figures and exits 1 on any failed check.
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tools/cli_flags.h"
#include "tools/loadgen/chaos_client.h"
#include "tools/loadgen/client.h"
#include "tools/loadgen/schedule.h"
#include "tools/loadgen/server_process.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

using namespace pagedserve::loadgen;

const char* const kHelp =
    "usage: pagedserve bench soak --model DIR --trace FILE [options]\n"
    "  --model DIR                 the model `serve` runs (a child process on a free port)\n"
    "  --trace FILE                Azure trace CSV (or JSONL) the well-behaved clients replay\n"
    "  --seconds S                 how long arrivals go on (default 600)\n"
    "  --rate R                    arrivals/s of the trace share; default: --overload times the\n"
    "                              rate measured by a calibration run\n"
    "  --overload X                trace rate / sustained rate (default 1.5)\n"
    "  --calibration-requests N    requests of the calibration run (default 1024) ...\n"
    "  --calibration-concurrency C ... kept C in flight (default 256, serve's --max-num-seqs)\n"
    "  --max-prompt-tokens N --max-output-tokens N   trace lengths scaled to these (256, 128)\n"
    "  --seed S                    kinds, arrivals and prompts (default 0)\n"
    "  --idle-timeout S            the server's idle timeout (default 5)\n"
    "  --max-body-bytes BYTES      the server's body limit (default 256K)\n"
    "  --max-queued-requests N     the server's 429 threshold (default 64)\n"
    "  --drain-timeout S           the server's drain bound on SIGTERM (default 10)\n"
    "  --serve-arg ARG             repeatable: more `serve` flags (e.g. --max-num-seqs)\n"
    "  --request-timeout S         deadline of every client operation (default 120)\n"
    "  --settle-timeout S          bound for running/waiting to reach 0 and KV to be free (60)\n"
    "  --rss-growth-limit-mib M    allowed growth of median RSS, warm-up vs end (default 64)\n"
    "  --server-log FILE           the server's output (default soak-server.log)\n"
    "  --result-json FILE          figures, checks and the tally as JSON\n"
    "  --quiet                     no progress lines\n";

std::set<std::string> value_flags() {
  return {"model",
          "trace",
          "seconds",
          "rate",
          "overload",
          "calibration-requests",
          "calibration-concurrency",
          "max-prompt-tokens",
          "max-output-tokens",
          "seed",
          "idle-timeout",
          "max-body-bytes",
          "max-queued-requests",
          "drain-timeout",
          "serve-arg",
          "request-timeout",
          "settle-timeout",
          "rss-growth-limit-mib",
          "server-log",
          "result-json"};
}

struct Check {
  std::string name;
  bool passed = false;
  std::string detail;
};

// The trace as requests for this server: lengths scaled, fit to its context, prompt ids from
// its own /tokenize.
std::vector<OutgoingRequest> prepare_requests(const CliFlags& flags, const std::string& base_url,
                                              std::string& model) {
  TraceReadResult read = read_trace_file(flags.require("trace"), BadLinePolicy::kSkip);
  std::vector<TraceRequest> trace = std::move(read.requests);
  LengthLimits limits;
  limits.max_prompt_tokens = flags.get_int("max-prompt-tokens", 256, 1, INT64_MAX);
  limits.max_output_tokens = flags.get_int("max-output-tokens", 128, 1, INT64_MAX);
  limits.mode = LengthMode::kScale;
  apply_length_limits(trace, limits);
  const nlohmann::json models =
      nlohmann::json::parse(http_fetch(base_url, "/v1/models", "", "", 10).body, nullptr, false);
  if (!models.is_object() || !models.contains("data") || models["data"].empty()) {
    throw std::runtime_error("GET /v1/models gave no model");
  }
  const nlohmann::json& card = models["data"][0];
  model = card.value("id", "");
  fit_to_context(trace, 0, card.value("max_model_len", int64_t{0}));
  PromptOptions prompt;
  prompt.model = model;
  prompt.seed = static_cast<uint32_t>(flags.get_int("seed", 0, 0, UINT32_MAX));
  const nlohmann::json ask = {{"model", model},
                              {"prompt",
                               "Once upon a time, a little girl named Lily found a "
                               "shiny red ball in the big green park."}};
  const nlohmann::json ids = nlohmann::json::parse(
      http_fetch(base_url, "/tokenize", ask.dump(), "", 10).body, nullptr, false);
  if (ids.is_object() && ids.contains("tokens")) {
    for (const auto& id : ids["tokens"]) {
      if (id.get<int32_t>() >= kFirstOrdinaryId) prompt.token_pool.push_back(id.get<int32_t>());
    }
  }
  if (prompt.token_pool.empty()) throw std::runtime_error("POST /tokenize gave no token ids");
  return build_requests(trace, prompt);
}

// Requests/s the server completes from a queue of `count` trace requests kept `concurrency`
// deep (closed loop, so the measure is throughput, not a burst's tail): what it sustains.
double measure_sustained_rate(const std::string& base_url,
                              const std::vector<OutgoingRequest>& requests, int64_t count,
                              int64_t concurrency) {
  std::vector<OutgoingRequest> batch;
  for (int64_t i = 0; i < count; ++i) batch.push_back(requests[i % requests.size()]);
  RunOptions options;
  options.base_url = base_url;
  options.progress = false;
  options.max_concurrency = concurrency;
  const RunResult run = run_load(options, batch, std::vector<double>(batch.size(), 0.0));
  const Summary summary = summarize(run.records, run.duration_s);
  if (summary.completed == 0) throw std::runtime_error("calibration: no request completed");
  if (summary.failed > 0) {
    std::cerr << "soak: calibration: " << summary.failed << " of " << count
              << " requests failed (e.g. 429: lower --calibration-concurrency)\n";
  }
  return summary.request_throughput;
}

// Polls /metrics until nothing runs or waits and every KV block is free; the last reading.
Check wait_until_settled(const std::string& base_url, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string last = "no /metrics answer";
  while (std::chrono::steady_clock::now() < deadline) {
    const HttpReply metrics = http_fetch(base_url, "/metrics", "", "", 10);
    const auto value = [&](const char* name) {
      return prometheus_value(metrics.body, name).value_or(-1);
    };
    const double running = value("pagedserve_num_requests_running");
    const double waiting = value("pagedserve_num_requests_waiting");
    const double free = value("pagedserve_kv_blocks_free");
    const double total = value("pagedserve_kv_blocks_total");
    last = "running " + std::to_string(int64_t(running)) + ", waiting " +
           std::to_string(int64_t(waiting)) + ", kv_blocks_free " + std::to_string(int64_t(free)) +
           " of " + std::to_string(int64_t(total));
    if (running == 0 && waiting == 0 && total > 0 && free == total) return {"settled", true, last};
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return {"settled", false, last + " after " + std::to_string(int64_t(timeout_s)) + " s"};
}

// /health answers 200 and a short completion completes.
Check check_alive(const std::string& base_url, const std::string& model) {
  const HttpReply health = http_fetch(base_url, "/health", "", "", 10);
  const nlohmann::json ask = {
      {"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", 8}, {"ignore_eos", true}};
  const HttpReply answer = http_fetch(base_url, "/v1/completions", ask.dump(), "", 60);
  const nlohmann::json body = nlohmann::json::parse(answer.body, nullptr, false);
  const bool ok = health.status == 200 && answer.status == 200 && body.is_object() &&
                  body.contains("usage") && body["usage"].value("completion_tokens", 0) == 8;
  return {
      "alive", ok,
      "/health " + std::to_string(health.status) + ", completion " + std::to_string(answer.status)};
}

// Kills the server child unless it already exited (so a failed soak leaves no process behind).
struct ServerGuard {
  pid_t pid = -1;
  bool exited = false;
  ~ServerGuard() {
    if (pid > 0 && !exited) {
      kill(pid, SIGKILL);
      wait_for_exit(pid, 10);
    }
  }
};

// The kernel's count of connections dropped because a listen queue was full (machine-wide:
// other processes' listeners count too); -1 when /proc/net/netstat cannot be read.
int64_t listen_overflows() {
  std::ifstream in("/proc/net/netstat");
  std::stringstream text;
  text << in.rdbuf();
  return parse_tcp_ext(text.str(), "ListenOverflows").value_or(-1);
}

struct ChaosPhase {
  double total_rate = 0;         // arrivals/s, all kinds
  int64_t listen_overflows = 0;  // during the phase, machine-wide
  std::vector<ChaosResult> results;
  RssSummary rss;
};

ChaosPhase run_chaos_phase(const CliFlags& flags, const ChaosClientOptions& options, pid_t pid,
                           const std::vector<OutgoingRequest>& requests, double trace_rate) {
  const ChaosMix mix = default_chaos_mix();
  const double seconds = flags.get_double("seconds", 600);
  const auto seed = static_cast<uint32_t>(flags.get_int("seed", 0, 0, UINT32_MAX));
  ChaosPhase phase;
  phase.total_rate = trace_rate / well_behaved_share(mix);
  std::vector<double> arrivals =
      rate_arrivals(static_cast<size_t>(std::ceil(phase.total_rate * seconds * 1.5)) + 16,
                    phase.total_rate, 1.0, seed);
  while (!arrivals.empty() && arrivals.back() >= seconds) arrivals.pop_back();
  const std::vector<ChaosKind> kinds = assign_kinds(arrivals.size(), mix, seed + 1);
  std::vector<OutgoingRequest> sent(arrivals.size());
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = requests[i % requests.size()];
  RssSampler sampler(pid, 1.0);
  const int64_t overflows_before = listen_overflows();
  phase.results = run_chaos(options, kinds, sent, arrivals);
  phase.listen_overflows = listen_overflows() - overflows_before;
  sampler.stop();
  phase.rss = summarize_rss(sampler.samples(), 0.2);
  return phase;
}

struct DrainPhase {
  Check check{"sigterm drain", false, ""};
  ChaosTally clients;
};

// Streams in flight, then SIGTERM: every admitted stream finishes and the server exits 0
// within its drain timeout (plus slack for the engine's shutdown).
DrainPhase run_drain_phase(const ChaosClientOptions& options, ServerGuard& server,
                           const std::vector<OutgoingRequest>& requests, double drain_timeout_s) {
  const size_t count = std::min<size_t>(16, requests.size());
  std::vector<OutgoingRequest> streams(requests.begin(), requests.begin() + count);
  for (OutgoingRequest& r : streams) {
    r.max_tokens = 128;
    r.payload["max_tokens"] = 128;
  }
  const std::vector<ChaosKind> kinds(count, ChaosKind::kStreamed);
  const std::vector<double> arrivals(count, 0.0);
  auto clients =
      std::async(std::launch::async, [&] { return run_chaos(options, kinds, streams, arrivals); });
  std::string admitted = "not all admitted within 10 s";
  for (int i = 0; i < 200; ++i) {  // until every stream is running or waiting (10 s at most)
    const std::string text = http_fetch(options.base_url, "/metrics", "", "", 5).body;
    const double in_engine = prometheus_value(text, "pagedserve_num_requests_running").value_or(0) +
                             prometheus_value(text, "pagedserve_num_requests_waiting").value_or(0);
    if (in_engine >= static_cast<double>(count)) {
      admitted = std::to_string(count) + " streams in flight";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(server.pid, SIGTERM);
  const auto code = wait_for_exit(server.pid, drain_timeout_s + 30);
  server.exited = code.has_value();
  DrainPhase phase;
  phase.clients = tally(clients.get());
  phase.check.passed = code == 0 && phase.clients.violations == 0;
  phase.check.detail =
      admitted + " at SIGTERM; " +
      (code ? "exit code " + std::to_string(*code)
            : "still running after " + std::to_string(drain_timeout_s + 30) + " s") +
      "; streams: " + std::to_string(phase.clients.requests - phase.clients.violations) +
      " completed, " + std::to_string(phase.clients.violations) + " not";
  return phase;
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  return text;
}

Summary well_behaved_summary(const std::vector<ChaosResult>& results, ChaosKind kind) {
  std::vector<RequestRecord> records;
  double end_s = 0;
  for (const ChaosResult& r : results) {
    end_s = std::max(end_s, r.record.end_s);
    if (r.kind == kind) records.push_back(r.record);
  }
  return summarize(records, end_s);
}

void print_report(const nlohmann::ordered_json& report, const ChaosTally& tally,
                  const std::vector<Check>& checks) {
  const auto& cal = report["rates"];
  const auto& lat = report["streamed_latency_ms"];
  const auto& rss = report["rss"];
  std::cout << "== pagedserve chaos soak ==\n"
            << "sustained rate " << cal["sustained_rps"] << " req/s ("
            << cal["source"].get<std::string>() << "); trace share at " << cal["trace_rps"]
            << " req/s, all clients at " << cal["total_rps"] << " req/s for " << report["seconds"]
            << " s\n"
            << format_tally(tally) << "streamed well-behaved: TTFT p50 " << lat["ttft_p50"]
            << " ms, p99 " << lat["ttft_p99"] << " ms; TPOT p50 " << lat["tpot_p50"] << " ms, p99 "
            << lat["tpot_p99"] << " ms\n"
            << "server RSS: peak " << mib(rss["peak_bytes"]) << ", warm-up "
            << mib(rss["warm_bytes"]) << ", end " << mib(rss["late_bytes"]) << ", growth "
            << mib(rss["growth_bytes"]) << " (limit " << mib(rss["limit_bytes"]) << ")\n"
            << "kernel listen-queue overflows during the chaos (machine-wide): "
            << report["listen_overflows_machine_wide"] << "\n"
            << "load generator send lag p50 " << report["send_lag_ms"]["p50"] << " ms, p99 "
            << report["send_lag_ms"]["p99"] << " ms\n";
  if (report["send_lag_ms"]["p99"].get<double>() > 1000) {
    std::cout << "WARNING: the load generator fell behind its schedule (send lag p99 over 1 s): "
                 "arrivals came in bursts, not at the intended rate; give it more CPU\n";
  }
  bool all = true;
  for (const Check& c : checks) {
    std::cout << (c.passed ? "PASS " : "FAIL ") << c.name << ": " << c.detail << "\n";
    all = all && c.passed;
  }
  std::cout << (all ? "soak: passed\n" : "soak: FAILED\n");
}

std::vector<std::string> serve_args_from(const CliFlags& flags) {
  std::vector<std::string> args = {"--model",
                                   flags.require("model"),
                                   "--log-interval",
                                   "0",
                                   "--idle-timeout",
                                   flags.get("idle-timeout", "5"),
                                   "--max-body-bytes",
                                   flags.get("max-body-bytes", "256K"),
                                   "--max-queued-requests",
                                   flags.get("max-queued-requests", "64"),
                                   "--drain-timeout",
                                   std::to_string(flags.get_int("drain-timeout", 10, 0, 3600))};
  for (const std::string& extra : flags.all("serve-arg")) args.push_back(extra);
  return args;
}

ChaosClientOptions client_options(const CliFlags& flags, const std::string& base_url,
                                  const std::string& model) {
  ChaosClientOptions options;
  options.base_url = base_url;
  options.model = model;
  options.request_timeout_s = flags.get_double("request-timeout", 120);
  // Generous: the server's idle timeout plus slack for a loaded machine.
  options.idle_deadline_s = flags.get_double("idle-timeout", 5) * 3 + 30;
  options.max_body_bytes = flags.get_bytes("max-body-bytes", 256 << 10);
  options.progress = !flags.has("quiet");
  return options;
}

// The figures for docs/RELIABILITY.md: rates, well-behaved latency, resident memory.
void add_figures(nlohmann::ordered_json& report, const ChaosPhase& chaos, double trace_rate,
                 double overload, int64_t rss_limit) {
  // value rounded to 1/per_unit (per_unit 100: hundredths), printed without binary noise.
  const auto round_to = [](double value, double per_unit) {
    return std::round(value * per_unit) / per_unit;
  };
  report["rates"]["sustained_rps"] = round_to(trace_rate / overload, 100);
  report["rates"]["trace_rps"] = round_to(trace_rate, 100);
  report["rates"]["total_rps"] = round_to(chaos.total_rate, 100);
  const Summary streamed = well_behaved_summary(chaos.results, ChaosKind::kStreamed);
  report["streamed_latency_ms"] = {{"ttft_p50", round_to(streamed.ttft.p50_ms, 10)},
                                   {"ttft_p99", round_to(streamed.ttft.p99_ms, 10)},
                                   {"tpot_p50", round_to(streamed.tpot.p50_ms, 10)},
                                   {"tpot_p99", round_to(streamed.tpot.p99_ms, 10)}};
  report["rss"] = {{"peak_bytes", chaos.rss.peak_bytes}, {"warm_bytes", chaos.rss.warm_bytes},
                   {"late_bytes", chaos.rss.late_bytes}, {"growth_bytes", chaos.rss.growth_bytes},
                   {"limit_bytes", rss_limit},           {"samples", chaos.rss.samples}};
  report["listen_overflows_machine_wide"] = chaos.listen_overflows;
  // How late the load generator sent (sent - scheduled, every client): when it cannot keep the
  // open-loop schedule, arrivals come in bursts and the offered rate is not the one intended.
  std::vector<double> lag_s;
  for (const ChaosResult& r : chaos.results)
    lag_s.push_back(r.record.sent_s - r.record.scheduled_s);
  const Distribution lag = distribution_ms(lag_s);
  report["send_lag_ms"] = {{"p50", round_to(lag.p50_ms, 10)}, {"p99", round_to(lag.p99_ms, 10)}};
  report["streamed_summary"] = summary_json(streamed);
  report["non_streamed_summary"] =
      summary_json(well_behaved_summary(chaos.results, ChaosKind::kNonStreamed));
}

}  // namespace

int run_bench_soak(const std::vector<std::string>& args) {
  const CliFlags flags(args, value_flags(), {"quiet", "help"});
  if (flags.has("help")) {
    std::cout << kHelp;
    return 0;
  }
  const std::vector<std::string> serve_args = serve_args_from(flags);
  const ServerProcess process =
      start_server(std::filesystem::read_symlink("/proc/self/exe"), serve_args,
                   flags.get("server-log", "soak-server.log"), 120);
  ServerGuard server{process.pid};
  std::string model;
  const std::vector<OutgoingRequest> requests = prepare_requests(flags, process.base_url, model);
  nlohmann::ordered_json report;
  report["serve_args"] = serve_args;
  report["seconds"] = flags.get_double("seconds", 600);
  const double overload = flags.get_double("overload", 1.5);
  double trace_rate = 0;
  if (flags.has("rate")) {
    trace_rate = flags.get_double("rate", 1);
    report["rates"]["source"] = "--rate";
  } else {
    const int64_t n = flags.get_int("calibration-requests", 1024, 1, 1 << 20);
    const int64_t depth = flags.get_int("calibration-concurrency", 256, 1, 1 << 20);
    trace_rate = overload * measure_sustained_rate(process.base_url, requests, n, depth);
    report["rates"]["source"] =
        "measured: " + std::to_string(n) + " requests, " + std::to_string(depth) + " in flight";
  }
  const ChaosClientOptions options = client_options(flags, process.base_url, model);
  const ChaosPhase chaos = run_chaos_phase(flags, options, server.pid, requests, trace_rate);
  const int64_t rss_limit = flags.get_int("rss-growth-limit-mib", 64, 1, 1 << 20) << 20;
  add_figures(report, chaos, trace_rate, overload, rss_limit);
  const ChaosTally counts = tally(chaos.results);
  std::vector<Check> checks;
  checks.push_back(check_alive(process.base_url, model));
  checks.push_back({"every client answered as it should", counts.violations == 0,
                    std::to_string(counts.requests) + " clients, " +
                        std::to_string(counts.violations) + " violations"});
  checks.push_back(wait_until_settled(process.base_url, flags.get_double("settle-timeout", 60)));
  checks.push_back({"rss growth after warm-up",
                    chaos.rss.samples > 0 && chaos.rss.growth_bytes < rss_limit,
                    mib(chaos.rss.growth_bytes) + " < " + mib(rss_limit)});
  const DrainPhase drain = run_drain_phase(options, server, requests,
                                           double(flags.get_int("drain-timeout", 10, 0, 3600)));
  checks.push_back(drain.check);
  report["tally"] = tally_json(counts);
  report["drain_clients"] = tally_json(drain.clients);
  bool passed = true;
  for (const Check& c : checks) {
    report["checks"].push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}});
    passed = passed && c.passed;
  }
  print_report(report, counts, checks);
  if (flags.has("result-json")) {
    std::ofstream(flags.get("result-json", "")) << report.dump(1) << "\n";
  }
  return passed ? 0 : 1;
}

}  // namespace pagedserve::tools
