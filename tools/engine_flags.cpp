// Engine flags: names, help text and conversion to EngineConfig.
#include "tools/engine_flags.h"

namespace pagedserve::tools {

// clang-format off
const std::set<std::string> kEngineValueFlags = {
    "model",           "block-size",     "num-kv-blocks", "kv-cache-memory",
    "swap-space",      "max-num-seqs",   "max-model-len", "max-num-batched-tokens",
    "preemption-mode", "threads",        "device",        "gpu-memory-utilization",
    "dtype",           "kv-cache-dtype", "kv-allocator",  "sim-profile",
    "quantization",
    // speculative decoding (docs/speculative-decoding.md)
    "speculative", "num-speculative-tokens", "num-speculative-tokens-max", "ngram-min", "ngram-max", "speculative-max-batch", "speculative-min-accepted",
    "draft-model"};
// clang-format on
const std::set<std::string> kEngineBoolFlags = {"no-prefix-caching", "enforce-eager"};

const char* const kEngineFlagsHelp =
    "engine flags:\n"
    "  --model DIR|FILE.gguf        Hugging Face model directory (config.json, safetensors,\n"
    "                               tokenizer.json), a GGUF file, or a directory holding one\n"
    "                               .gguf (docs/models.md lists the families)\n"
    "  --block-size N               tokens per KV block (default 16)\n"
    "  --num-kv-blocks N            KV blocks in the pool (overrides --kv-cache-memory)\n"
    "  --kv-cache-memory BYTES      KV pool size, e.g. 512M, 4G (default 2G; CUDA: what\n"
    "                               --gpu-memory-utilization leaves)\n"
    "  --swap-space BYTES           CPU swap pool size (default 0)\n"
    "  --max-num-seqs N             sequences per batch (default 256)\n"
    "  --max-model-len N            context limit (default: the model's, capped to what the KV\n"
    "                               pool holds)\n"
    "  --max-num-batched-tokens N   tokens per step (default 8192)\n"
    "  --no-prefix-caching          turn automatic prefix caching off\n"
    "  --preemption-mode MODE       swap or recompute, when KV blocks run out (default: swap\n"
    "                               with --swap-space, else recompute)\n"
    "  --threads N                  CPU executor threads (default 0: one per core)\n"
    "  --kv-allocator NAME          paged (default), or the Orca-style baselines reserve-max,\n"
    "                               reserve-pow2, reserve-oracle (one contiguous region each)\n"
    "  --device DEVICE              cpu, cuda, auto or sim (default auto: cuda when built with "
    "CUDA\n"
    "                               and a GPU is visible, else cpu; sim: no model,\n"
    "                               steps priced by --sim-profile FILE, a cost model; see\n"
    "                               profiles/README.md; --model gives the tokenizer)\n"
    "  --enforce-eager              CUDA: no CUDA graphs (decode steps replay graphs captured\n"
    "                               per power-of-two batch size by default)\n"
    "  --gpu-memory-utilization F   CUDA: share of GPU memory for weights, workspace and KV\n"
    "                               pool (default 0.9); the pool takes what is left\n"
    "  --dtype DTYPE                CUDA weights: auto, float32, float16, bfloat16 (default\n"
    "                               auto: the model's torch_dtype)\n"
    "  --kv-cache-dtype DTYPE       KV cache: auto (the weights'), float32, float16,\n"
    "                               bfloat16, int8 (a scale per token and head; CPU only),\n"
    "                               fp8 (e4m3, scale 1; CUDA only)\n"
    "  --quantization TYPE          CPU: quantize float weights at load to q8_0, q4_0 or q4_k\n"
    "                               (also q5_0, q5_1, q5_k, q6_k; the LM head to q6_k for the\n"
    "                               4-bit types); quantized GGUF weights stay as they are\n"
    "                               (default none)\n"
    "  --speculative METHOD         speculative decoding: none (default), ngram (proposals\n"
    "                               from the request's own prompt and output) or draft (a\n"
    "                               small model's greedy proposals); CPU, paged allocator\n"
    "  --draft-model PATH           the draft: a Hugging Face folder or a .gguf file with the\n"
    "                               target's vocabulary (--speculative draft)\n"
    "  --num-speculative-tokens K   proposals verified per sequence per step (default 4)\n"
    "  --num-speculative-tokens-max M  ngram: adaptive length from K up to M (all accepted:\n"
    "                               2 more next step; a rejection: 1 fewer; default: fixed K)\n"
    "  --ngram-min N, --ngram-max M suffix lengths matched, longest first (default 1 and 4)\n"
    "  --speculative-max-batch N    no proposals while more than N sequences run (default 2\n"
    "                               for ngram, 4 for draft; 0: no limit)\n"
    "  --speculative-min-accepted A n-gram: a sequence whose proposals average fewer than\n"
    "                               A x (running sequences - 1/2) accepted tokens per step\n"
    "                               stops proposing for a while (default 0.5; 0: never)\n";

model::WeightFormat weight_format_from_flags(const CliFlags& flags) {
  try {
    return actors::resolve_weight_format(flags.get("quantization", ""));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

actors::EngineConfig engine_config_from_flags(const CliFlags& flags) {
  actors::EngineConfig config;
  config.model_dir = flags.require("model");
  config.block_size = static_cast<int>(flags.get_int("block-size", 16, 1, 256));
  config.num_kv_blocks = static_cast<int>(flags.get_int("num-kv-blocks", 0, 1, 1 << 30));
  config.kv_cache_memory_bytes = flags.get_bytes("kv-cache-memory", config.kv_cache_memory_bytes);
  config.kv_cache_memory_given = flags.has("kv-cache-memory");
  config.swap_space_bytes = flags.get_bytes("swap-space", 0);
  config.max_num_seqs = static_cast<int>(flags.get_int("max-num-seqs", 256, 1, 1 << 20));
  config.max_model_len = static_cast<int>(flags.get_int("max-model-len", 0, 2, 1 << 24));
  config.max_num_batched_tokens =
      static_cast<int>(flags.get_int("max-num-batched-tokens", 8192, 1, 1 << 24));
  config.enable_prefix_caching = !flags.has("no-prefix-caching");
  config.num_threads = static_cast<int>(flags.get_int("threads", 0, 0, 1024));
  config.device = flags.get("device", "auto");
  if (config.device != "auto" && config.device != "cpu" && config.device != "cuda" &&
      config.device != "sim") {
    throw UsageError("--device must be cpu, cuda, auto or sim, got '" + config.device + "'");
  }
  config.cuda_graphs = !flags.has("enforce-eager");
  config.gpu_memory_utilization = flags.get_double("gpu-memory-utilization", 0.9);
  if (!(config.gpu_memory_utilization > 0.0 && config.gpu_memory_utilization <= 1.0)) {
    throw UsageError("--gpu-memory-utilization must be in (0, 1], got " +
                     std::to_string(config.gpu_memory_utilization));
  }
  config.dtype = flags.get("dtype", "auto");
  config.kv_cache_dtype = flags.get("kv-cache-dtype", "auto");
  config.quantization = flags.get("quantization", "");
  weight_format_from_flags(flags);  // a bad value is a usage error, before any model loads
  if (flags.has("preemption-mode")) {
    const std::string mode = flags.require("preemption-mode");
    if (mode == "swap") {
      config.preemption_mode = actors::PreemptionMode::kSwap;
    } else if (mode == "recompute") {
      config.preemption_mode = actors::PreemptionMode::kRecompute;
    } else {
      throw UsageError("--preemption-mode must be swap or recompute, got '" + mode + "'");
    }
  }
  if (config.device == "sim") config.sim_profile = flags.require("sim-profile");
  if (flags.has("speculative")) {
    try {
      config.speculative.method = actors::parse_speculative_method(flags.require("speculative"));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  if (flags.has("draft-model")) config.speculative.draft_model = flags.require("draft-model");
  config.speculative.num_speculative_tokens =
      static_cast<int>(flags.get_int("num-speculative-tokens", 4, 1, 64));
  config.speculative.max_speculative_tokens =
      static_cast<int>(flags.get_int("num-speculative-tokens-max", 0, 0, 64));
  config.speculative.ngram_min = static_cast<int>(flags.get_int("ngram-min", 1, 1, 64));
  config.speculative.ngram_max = static_cast<int>(flags.get_int("ngram-max", 4, 1, 64));
  config.speculative.max_batch_seqs =
      static_cast<int>(flags.get_int("speculative-max-batch", -1, 0, 1 << 20));
  config.speculative.min_accepted_per_seq = flags.get_double("speculative-min-accepted", 0.5);
  if (std::string problem = config.speculative.validate(); !problem.empty()) {
    throw UsageError("--speculative: " + problem);
  }
  if (flags.has("kv-allocator")) {
    try {
      config.kv_allocator = cache::parse_kv_allocator(flags.require("kv-allocator"));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--kv-allocator: ") + e.what());
    }
  }
  return config;
}

const std::set<std::string> kBenchSamplingFlags = {"temperature", "top-p", "top-k", "min-p"};

const char* const kBenchSamplingHelp =
    "  --temperature T     sampling temperature (default 0: greedy)\n"
    "  --top-p P           nucleus sampling mass (default 1: off)\n"
    "  --top-k K           keep the K most likely tokens (default 0: off)\n"
    "  --min-p M           drop tokens below M times the most likely (default 0: off)\n";

model::SamplingParams bench_sampling_from_flags(const CliFlags& flags) {
  model::SamplingParams sampling;
  sampling.temperature = static_cast<float>(flags.get_double("temperature", 0.0));
  sampling.top_p = static_cast<float>(flags.get_double("top-p", 1.0));
  sampling.top_k = static_cast<int>(flags.get_int("top-k", 0, -1, 1 << 24));
  sampling.min_p = static_cast<float>(flags.get_double("min-p", 0.0));
  if (const std::string error = sampling.validate(); !error.empty()) throw UsageError(error);
  return sampling;
}

}  // namespace pagedserve::tools
