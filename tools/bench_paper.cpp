// `pagedserve bench paper` (the PagedAttention paper's experiments, simulated; writes
// docs/RESULTS.md) and `pagedserve bench calibrate` (fits a sim profile's step-cost
// coefficients to the real CPU executor's step times).
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>

#include "actors/engine_setup.h"
#include "actors/sim_executor.h"
#include "cache/block_manager.h"
#include "tools/cli_flags.h"
#include "tools/engine_flags.h"
#include "tools/paper/admission_bench.h"
#include "tools/paper/paper_bench.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {

namespace {

const std::vector<std::string> kPaperProfiles = {"profiles/opt-13b-a100.json",
                                                 "profiles/opt-66b-4xa100.json",
                                                 "profiles/opt-175b-8xa100-80gb.json"};

// --workload names -> kinds; every one when none is given.
std::vector<paper::PaperWorkload> workloads_from(const std::vector<std::string>& names) {
  std::vector<paper::PaperWorkload> out;
  for (const std::string& name : names) {
    const auto kind = paper::parse_workload(name);
    if (!kind) {
      throw UsageError("--workload must be sharegpt, alpaca, azure-conv or azure-code, got '" +
                       name + "'");
    }
    out.push_back(*kind);
  }
  if (names.empty()) {
    out = {paper::PaperWorkload::kShareGpt, paper::PaperWorkload::kAlpaca,
           paper::PaperWorkload::kAzureConv, paper::PaperWorkload::kAzureCode};
  }
  return out;
}

void require_files(const std::vector<std::filesystem::path>& paths) {
  for (const auto& path : paths) {
    if (!std::filesystem::exists(path)) throw UsageError("no such file: " + path.string());
  }
}

}  // namespace

int run_bench_paper(const std::vector<std::string>& args) {
  const CliFlags flags(args,
                       {"profile", "traces", "workload", "out", "result-json", "num-requests",
                        "seed", "real-model", "real-requests", "real-repeats", "threads"},
                       {"quick", "help"});
  if (flags.has("help")) {
    std::cout
        << "usage: pagedserve bench paper [--workload W ...] [--profile FILE ...]\n"
           "                              [--traces DIR] [--out FILE] [--result-json FILE]\n"
           "  --workload W       sharegpt, alpaca, azure-conv or azure-code (repeatable):\n"
           "                     only those workloads' throughput panels (Fig. 12);\n"
           "                     default: every figure of the paper's evaluation\n"
           "  --profile FILE     sim profile, repeatable (default the paper's three:\n"
           "                     profiles/opt-13b-a100.json, opt-66b-4xa100.json,\n"
           "                     opt-175b-8xa100-80gb.json); single-set-up figures use\n"
           "                     the first\n"
           "  --traces DIR       the traces folder (default ../shared/traces: its\n"
           "                     sharegpt-lengths/, alpaca-lengths/, azure-2023/)\n"
           "  --out FILE         the report (default docs/RESULTS.md); SVGs in paper-figures/\n"
           "                     beside it\n"
           "  --result-json FILE every table's numbers as JSON\n"
           "  --num-requests N   requests per run (default 1000)\n"
           "  --seed N           arrivals, shuffles and token ids (default 0)\n"
           "  --quick            tiny workloads: a smoke test, not results\n"
           "  --real-model DIR   also real runs on the CPU executor (a model from\n"
           "                     `pagedserve make-model`); --real-requests N (16),\n"
           "                     --real-repeats N (2), --threads N (2)\n"
           "All results are SIMULATED (--device sim) except the real runs; see\n"
           "profiles/README.md.\n";
    return 0;
  }
  paper::PaperOptions options;
  for (const std::string& p : flags.all("profile")) options.profiles.emplace_back(p);
  if (options.profiles.empty()) {
    for (const std::string& p : kPaperProfiles) options.profiles.emplace_back(p);
  }
  options.traces_root = flags.get("traces", "../shared/traces");
  options.workloads = workloads_from(flags.all("workload"));
  options.all_figures = flags.all("workload").empty();
  options.out_md = flags.get("out", "docs/RESULTS.md");
  if (flags.has("result-json")) options.result_json = flags.require("result-json");
  options.num_requests = static_cast<int>(flags.get_int("num-requests", 1000, 1, 100000));
  options.seed = static_cast<unsigned>(flags.get_int("seed", 0, 0, UINT32_MAX));
  options.quick = flags.has("quick");
  if (flags.has("real-model")) options.real_model = flags.require("real-model");
  options.real_num_requests = static_cast<int>(flags.get_int("real-requests", 16, 1, 100000));
  options.real_repeats = static_cast<int>(flags.get_int("real-repeats", 2, 1, 100));
  options.real_threads = static_cast<int>(flags.get_int("threads", 2, 1, 1024));
  require_files(options.profiles);
  std::vector<paper::PaperWorkload> needed = options.workloads;
  if (options.all_figures) needed = workloads_from({});
  std::vector<std::filesystem::path> files;
  for (paper::PaperWorkload w : needed)
    files.push_back(paper::workload_file(w, options.traces_root));
  require_files(files);
  const auto start = std::chrono::steady_clock::now();
  options.progress = [&](const std::string& line) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << "[" << s << " s] " << line << "\n";
  };
  paper::run_paper(options);
  std::cout << "wrote " << options.out_md.string() << " (simulated results)\n";
  return 0;
}

int run_bench_admission(const std::vector<std::string>& args) {
  const CliFlags flags(args,
                       {"profile", "traces", "trace", "num-requests", "rate", "num-kv-blocks",
                        "block-size", "preemption-mode", "seed"},
                       {"help"});
  if (flags.has("help")) {
    std::cout
        << "usage: pagedserve bench admission [--trace conv|code|both] [--rate R ...]\n"
           "Replays a trace on the simulator (--device sim) under each admission rule\n"
           "(whole prompt: the engine's default, vLLM v0's rule; partial prompt: start with\n"
           "whatever chunk the free blocks hold, the old default) and prints preemptions per\n"
           "1,000 requests, throughput and normalized latency.\n"
           "  --profile FILE        sim profile (default profiles/opt-13b-a100.json)\n"
           "  --traces DIR          the traces folder (default ../shared/traces)\n"
           "  --trace NAME          conv, code or both (Azure 2023), sharegpt or alpaca\n"
           "                        (default both)\n"
           "  --num-requests N      requests from the trace's start (default 1000)\n"
           "  --rate R              Poisson arrivals per second, repeatable; 0: all at once\n"
           "                        (default 0, 1, 2, 3)\n"
           "  --num-kv-blocks N     KV pool (default: the profile's KV memory)\n"
           "  --block-size N        tokens per block (default 16)\n"
           "  --preemption-mode M   recompute (default) or swap (4 GiB of swap space)\n"
           "  --seed N              arrival and token-id seed (default 0)\n"
           "All results are SIMULATED; see profiles/README.md.\n";
    return 0;
  }
  paper::AdmissionBenchOptions options;
  options.profile = flags.get("profile", "profiles/opt-13b-a100.json");
  options.traces_root = flags.get("traces", "../shared/traces");
  const std::string trace = flags.get("trace", "both");
  if (trace == "both") {
    options.workloads = {paper::PaperWorkload::kAzureConv, paper::PaperWorkload::kAzureCode};
  } else if (trace == "conv" || trace == "code") {
    options.workloads = {trace == "conv" ? paper::PaperWorkload::kAzureConv
                                         : paper::PaperWorkload::kAzureCode};
  } else if (const auto kind = paper::parse_workload(trace)) {
    options.workloads = {*kind};
  } else {
    throw UsageError("--trace must be conv, code, both, sharegpt or alpaca, got '" + trace + "'");
  }
  options.num_requests = static_cast<int>(flags.get_int("num-requests", 1000, 1, 100000));
  for (const std::string& rate : flags.all("rate")) {
    char* end = nullptr;
    const double value = std::strtod(rate.c_str(), &end);
    if (rate.empty() || *end != '\0' || !(value >= 0.0) || value > 1e9) {
      throw UsageError("--rate must be a number >= 0, got '" + rate + "'");
    }
    options.rates.push_back(value);
  }
  if (options.rates.empty()) options.rates = {0.0, 1.0, 2.0, 3.0};
  options.num_device_blocks = static_cast<int>(flags.get_int("num-kv-blocks", 0, 1, 1 << 30));
  options.block_size = static_cast<int>(flags.get_int("block-size", 16, 1, 256));
  options.seed = static_cast<unsigned>(flags.get_int("seed", 0, 0, UINT32_MAX));
  const std::string mode = flags.get("preemption-mode", "recompute");
  if (mode != "recompute" && mode != "swap") {
    throw UsageError("--preemption-mode must be swap or recompute, got '" + mode + "'");
  }
  for (paper::PaperWorkload w : options.workloads) {
    require_files({paper::workload_file(w, options.traces_root)});
  }
  if (!std::filesystem::exists(options.profile)) {
    throw UsageError("no such file: " + options.profile.string());
  }
  if (mode == "swap") {
    options.preemption = actors::PreemptionMode::kSwap;
    const actors::SimProfile profile = actors::load_sim_profile(options.profile);
    options.num_cpu_blocks = paper::swap_space_blocks(profile, options.block_size);
  }
  paper::run_admission_bench(options, std::cout);
  return 0;
}

// Steps of B sequences with L-token prompts (one prefill step, then decodes), timed on the
// real executor, for B and L over a grid; a, b, c by least squares.
int run_bench_calibrate(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = kEngineValueFlags;
  value_flags.insert({"out", "name"});
  const CliFlags flags(args, value_flags, {"help"});
  if (flags.has("help")) {
    std::cout << "usage: pagedserve bench calibrate --model DIR --out FILE [engine flags]\n"
                 "Fits a sim profile's a, b, c to the CPU executor's measured step times.\n"
              << kEngineFlagsHelp;
    return 0;
  }
  actors::EngineSetup setup = actors::set_up_engine(engine_config_from_flags(flags));
  const int bs = setup.config.block_size;
  cache::BlockManagerConfig bm = setup.blocks;
  bm.enable_prefix_caching = false;
  std::vector<actors::StepSample> samples;
  std::mt19937 rng(0);
  const int vocab = setup.executor->model_config().vocab_size;
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  uint64_t step_id = 0;
  for (int batch : {1, 2, 4, 8}) {
    for (int len : {16, 64, 128, 256}) {
      if (len + 8 >= setup.config.max_model_len) continue;
      cache::BlockManager blocks(bm);
      if (int64_t{batch} * ((len + 8) / bs + 2) > blocks.num_total_device_blocks()) continue;
      std::vector<actors::ScheduledSequence> seqs(batch);
      for (int i = 0; i < batch; ++i) {
        std::vector<int32_t> prompt(len);
        for (int32_t& t : prompt) t = token(rng);
        blocks.allocate(i + 1, prompt);
        seqs[i].seq_id = i + 1;
        seqs[i].new_token_ids = prompt;
        seqs[i].sample = true;
        model::SamplingParams greedy;
        greedy.temperature = 0.0f;
        seqs[i].sampling = std::make_shared<const model::SamplingParams>(greedy);
        seqs[i].sample_seeds = {1};
      }
      for (int step = 0; step < 4; ++step) {
        actors::StepInput input;
        input.step_id = step_id++;
        for (actors::ScheduledSequence& s : seqs) {
          const auto table = blocks.block_table(s.seq_id);
          s.block_table.assign(table.begin(), table.end());
          input.seqs.push_back(s);
        }
        const auto t0 = std::chrono::steady_clock::now();
        const actors::StepOutput out = setup.executor->execute(input);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        samples.push_back({actors::step_shape(input), seconds});
        for (size_t i = 0; i < seqs.size(); ++i) {
          actors::ScheduledSequence& s = seqs[i];
          s.num_computed_tokens += static_cast<int>(s.new_token_ids.size());
          const int32_t next = out.seqs[i].samples.front().token_id;
          s.new_token_ids = {next};
          blocks.append_token(s.seq_id, next);
        }
      }
    }
  }
  const actors::CostFit fit = actors::fit_cost_model(samples);
  const model::ModelConfig& mc = setup.executor->model_config();
  actors::SimProfile profile;
  profile.name = flags.get("name", "calibrated on the CPU executor (" +
                                       setup.config.model_dir.filename().string() + ")");
  profile.step_overhead_s = std::max(fit.a, 0.0);
  profile.per_batched_token_s = std::max(fit.b, 0.0);
  profile.per_kv_token_read_s = std::max(fit.c, 0.0);
  profile.kv_bytes_per_token =
      int64_t{2} * mc.num_hidden_layers * mc.num_key_value_heads * mc.head_dim * 4;
  profile.kv_cache_bytes = int64_t{setup.config.num_kv_blocks} * bs * profile.kv_bytes_per_token;
  profile.max_model_len = setup.config.max_model_len;
  profile.vocab_size = mc.vocab_size;
  nlohmann::ordered_json json = actors::sim_profile_to_json(profile);
  json["_comment"] = "Fitted by `pagedserve bench calibrate` from " +
                     std::to_string(samples.size()) + " steps; rms error " +
                     std::to_string(fit.rms_error_s) +
                     " s. Wall-clock timings: noisy on a busy machine.";
  const std::string out_path = flags.require("out");
  std::ofstream(out_path) << json.dump(2) << "\n";
  std::cout << json.dump(2) << "\nwrote " << out_path << "\n";
  return 0;
}

}  // namespace pagedserve::tools
