// `pagedserve bench throughput --batch B ...`: the executor's speed by phase, against this
// machine's own limits. Drives LlamaModel directly (no scheduler, no HTTP), as the CPU
// executor does: a prefill of P tokens, then N decode steps of B sequences with P-token
// contexts. Reports prefill tokens/s against the fp32 FMA peak (measured with a small FMA loop)
// and decode tokens/s and ms per step against the read-bandwidth roofline (measured with a
// STREAM-style read loop, or --bandwidth): bytes read per step (every weight once, plus each
// sequence's K/V at the cache's element size) over step time, as a fraction of the bandwidth.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "actors/engine_setup.h"
#include "actors/sample_rows.h"
#include "kernels/cpu/machine_probe.h"
#include "kernels/cpu/thread_pool.h"
#include "model/llama_model.h"
#include "model/loader/llama_weights.h"
#include "tools/cli_flags.h"
#include "tools/engine_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kPhasesHelp =
    "usage: pagedserve bench throughput --model DIR --batch B [options]\n"
    "  --batch B           sequences decoded together (default 1)\n"
    "  --prompt-tokens P   prompt (context) length of each sequence (default 512)\n"
    "  --output-tokens N   decode steps timed (default 64)\n"
    "  --threads T         kernel threads, the caller included (default 0: one per core)\n"
    "  --bandwidth GBPS    roofline bandwidth; default: measured with a read loop at start\n"
    "  --interleave-probe  also read as many bytes as each decode step reads, right after it,\n"
    "                      with the same threads (a 1 GiB ring: both stream from memory), and\n"
    "                      report each step against the probes around it\n"
    "                      (roofline_fraction_interleaved): on a shared machine the bandwidth\n"
    "                      moves during a run\n"
    "  --block-size S      KV cache block size in tokens (default 16)\n"
    "  --kv-cache-dtype D  auto (the weights'), float32, float16, bfloat16, int8 (default auto)\n"
    "  --quantization Q    quantize float weights at load: q8_0, q4_0, q4_k, ... (default none)\n"
    "  --repeat R          prefill repetitions, the median is reported (default 3)\n"
    "  --seed S            seed of the prompt tokens (default 0)\n"
    "  --json              one JSON object instead of the table\n"
    "Decode steps sample every row as the CPU executor does (on the pool), timed with the\n"
    "forward pass; decode_sampling_ms is that part. Sampling (default greedy):\n";
const char* const kPhasesNote =
    "The prompt is prefilled once, as one sequence; the other B - 1 sequences get copies of its\n"
    "KV blocks (values do not change speed), so large batches do not wait on B prefills.\n";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

int32_t argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// FLOPs of a prefill of `tokens` tokens from position 0 (2 per multiply-add): the matmuls of
// every layer, causal attention (q.k and p.v over the positions each query sees), one LM-head
// row.
double prefill_flops(const model::ModelConfig& c, int tokens) {
  const double hidden = c.hidden_size;
  const double q = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double ffn = c.intermediate_size;
  const double per_token_matmul = hidden * (q + 2 * kv) + q * hidden + 3 * hidden * ffn;
  const double context_sum = 0.5 * tokens * (tokens + 1.0);  // sum of (position + 1)
  const double attention = 2.0 * 2.0 * context_sum * q;
  return c.num_hidden_layers * (2.0 * tokens * per_token_matmul + attention) +
         2.0 * hidden * c.vocab_size;
}

}  // namespace

int run_bench_phases(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = {
      "model",      "batch",  "prompt-tokens", "output-tokens",  "threads",     "bandwidth",
      "block-size", "repeat", "seed",          "kv-cache-dtype", "quantization"};
  value_flags.insert(kBenchSamplingFlags.begin(), kBenchSamplingFlags.end());
  const CliFlags flags(args, value_flags, {"json", "help", "interleave-probe"});
  if (flags.has("help")) {
    std::cout << kPhasesHelp << kBenchSamplingHelp << kPhasesNote;
    return 0;
  }
  const std::string model_dir = flags.require("model");
  const int batch_size = static_cast<int>(flags.get_int("batch", 1, 1, 4096));
  const int prompt_tokens = static_cast<int>(flags.get_int("prompt-tokens", 512, 1, 1 << 20));
  const int output_tokens = static_cast<int>(flags.get_int("output-tokens", 64, 1, 1 << 20));
  const int threads = static_cast<int>(flags.get_int("threads", 0, 0, 1024));
  const int block_size = static_cast<int>(flags.get_int("block-size", 16, 1, 128));
  const int repeats = static_cast<int>(flags.get_int("repeat", 3, 1, 1000));
  const double bandwidth_flag = flags.get_double("bandwidth", 0.0);
  if (bandwidth_flag < 0) throw UsageError("--bandwidth must be positive, got a negative value");
  std::mt19937 rng(static_cast<uint32_t>(flags.get_int("seed", 0, 0, UINT32_MAX)));
  const auto sampling =
      std::make_shared<const model::SamplingParams>(bench_sampling_from_flags(flags));

  const model::WeightFormat format = weight_format_from_flags(flags);
  kernels::ThreadPool pool(threads);
  const auto load_start = Clock::now();
  const model::LlamaCheckpoint checkpoint = model::open_llama_checkpoint(model_dir);
  const model::LlamaModel model(checkpoint, &pool, kernels::best_isa(), format);
  const double load_s = seconds_since(load_start);
  const model::ModelConfig& c = model.config();
  const kernels::KvDtype kv_dtype =
      actors::resolve_cpu_kv_dtype(flags.get("kv-cache-dtype", "auto"), c.torch_dtype);

  const double bandwidth =
      bandwidth_flag > 0 ? bandwidth_flag : kernels::measure_read_bandwidth_gbps(&pool);
  const double peak_gflops = kernels::measure_fma_peak_gflops(&pool);

  const int total_tokens = prompt_tokens + output_tokens;
  const int blocks_per_seq = (total_tokens + block_size - 1) / block_size;
  model::PagedKvCache cache(c.num_hidden_layers, batch_size * blocks_per_seq, block_size,
                            c.num_key_value_heads, c.head_dim, kv_dtype);
  std::vector<std::vector<int32_t>> tables(batch_size);
  for (int s = 0; s < batch_size; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
  }
  std::uniform_int_distribution<int32_t> any_token(0, c.vocab_size - 1);
  std::vector<int32_t> prompt(prompt_tokens);
  for (int32_t& t : prompt) t = any_token(rng);

  // Prefill: one sequence of P tokens in one forward pass, repeated (same slots rewritten).
  std::vector<double> prefill_s;
  // Buffers kept across passes, as the CPU executor keeps them.
  model::LlamaModel::Workspace workspace;
  int32_t first_token = 0;
  for (int r = 0; r < repeats; ++r) {
    model::ForwardBatch batch;
    batch.add_sequence(prompt, 0, tables[0], block_size, true);
    const auto start = Clock::now();
    const std::span<const float> logits = model.forward(batch, cache, workspace);
    prefill_s.push_back(seconds_since(start));
    first_token = argmax(logits.data(), c.vocab_size);
  }
  const double prefill_median_s = median(prefill_s);
  const double prefill_gflops = prefill_flops(c, prompt_tokens) / prefill_median_s / 1e9;
  // The other sequences share the prompt's K/V by copy.
  const int prompt_blocks = (prompt_tokens + block_size - 1) / block_size;
  for (int s = 1; s < batch_size; ++s) {
    for (int b = 0; b < prompt_blocks; ++b) cache.copy_block(tables[0][b], tables[s][b]);
  }

  // Decode: B sequences, one token each per step, each row sampled as the executor samples it.
  std::vector<int32_t> next(batch_size, first_token);
  std::vector<actors::ScheduledSequence> rows(batch_size);
  for (int s = 0; s < batch_size; ++s) {
    rows[s].seq_id = static_cast<uint64_t>(s);
    rows[s].sample = true;
    rows[s].sampling = sampling;
    rows[s].sample_seeds = {static_cast<uint64_t>(s)};
  }
  std::vector<actors::SequenceStepOutput> sampled(batch_size);
  std::vector<double> sampling_s;
  // K and V of one token in every layer, at the cache's element size.
  const double kv_bytes_per_token = static_cast<double>(cache.bytes_per_block()) / block_size;
  const double weight_bytes = static_cast<double>(model.weight_bytes_per_step());
  std::vector<double> step_s;
  std::vector<double> achieved_gbps;
  double bytes_at_median_context = 0;
  std::optional<kernels::InterleavedRoofline> interleaved;
  if (flags.has("interleave-probe")) {
    interleaved.emplace();
    interleaved->start(&pool, static_cast<size_t>(weight_bytes));
  }
  for (int step = 0; step < output_tokens; ++step) {
    const int position = prompt_tokens + step;
    model::ForwardBatch batch;
    for (int s = 0; s < batch_size; ++s) {
      batch.add_sequence({next[s]}, position, tables[s], block_size, true);
    }
    batch.gather_chunk_maxima = actors::step_reads_chunk_maxima(rows);  // as the CPU executor
    const auto start = Clock::now();
    const std::span<const float> step_logits = model.forward(batch, cache, workspace);
    const auto sampling_start = Clock::now();
    for (actors::ScheduledSequence& row : rows) row.sample_step = static_cast<uint64_t>(step);
    actors::sample_step_rows(rows, step_logits, static_cast<size_t>(c.vocab_size), &pool, sampled,
                             nullptr, 0, workspace.logit_chunk_maxima());
    const double seconds = seconds_since(start);
    sampling_s.push_back(seconds_since(sampling_start));
    for (int s = 0; s < batch_size; ++s) next[s] = sampled[s].samples.at(0).token_id;
    const double bytes = weight_bytes + batch_size * (kv_bytes_per_token * (position + 1) +
                                                      c.hidden_size * sizeof(float));
    if (step == output_tokens / 2) bytes_at_median_context = bytes;
    step_s.push_back(seconds);
    achieved_gbps.push_back(bytes / seconds / 1e9);
    if (interleaved)
      interleaved->after_step(&pool, static_cast<size_t>(bytes), bytes / seconds / 1e9);
  }
  const double step_median_s = median(step_s);
  const double achieved = median(achieved_gbps);

  nlohmann::ordered_json out = {
      {"model", model_dir},
      {"isa", kernels::isa_name(model.isa())},
      {"threads", pool.num_threads()},
      {"kv_cache_dtype", kernels::kv_dtype_name(kv_dtype)},
      {"weights", model.weight_format_summary()},
      {"batch", batch_size},
      {"prompt_tokens", prompt_tokens},
      {"output_tokens", output_tokens},
      {"load_s", load_s},
      {"bandwidth_gbps", bandwidth},
      {"bandwidth_measured", bandwidth_flag <= 0},
      {"peak_gflops", peak_gflops},
      {"prefill_tokens_per_s", prompt_tokens / prefill_median_s},
      {"prefill_ms", prefill_median_s * 1e3},
      {"prefill_gflops", prefill_gflops},
      {"prefill_peak_fraction", prefill_gflops / peak_gflops},
      {"decode_tokens_per_s", batch_size / step_median_s},
      {"decode_step_ms", step_median_s * 1e3},
      {"decode_step_ms_min", *std::min_element(step_s.begin(), step_s.end()) * 1e3},
      {"decode_sampling_ms", median(sampling_s) * 1e3},
      {"sampling_fraction", median(sampling_s) / step_median_s},
      {"temperature", sampling->temperature},
      {"top_p", sampling->top_p},
      {"top_k", sampling->top_k},
      {"min_p", sampling->min_p},
      {"weight_bytes_per_step", weight_bytes},
      {"bytes_per_decode_step", bytes_at_median_context},
      {"decode_achieved_gbps", achieved},
      {"roofline_fraction", achieved / bandwidth}};
  if (interleaved) {
    const std::vector<double>& probes = interleaved->probe_gbps();
    out["probe_gbps_median"] = median(probes);
    out["probe_gbps_min"] = *std::min_element(probes.begin(), probes.end());
    out["probe_gbps_max"] = *std::max_element(probes.begin(), probes.end());
    out["roofline_fraction_interleaved"] = median(interleaved->fractions());
  }
  if (flags.has("json")) {
    std::cout << out.dump() << "\n";
  } else {
    for (const auto& [key, value] : out.items()) {
      std::printf("%-24s %s\n", key.c_str(), value.dump().c_str());
    }
  }
  return 0;
}

}  // namespace pagedserve::tools
