// The CUDA executor against the CPU executor: greedy and seeded generation on stories260K
// through the whole engine (batching, chunked prefill, prefix caching, swap preemption), and
// swap / copy-on-write round trips at the executor level. stories260K is found through
// PAGEDSERVE_SHARED (tests/test_paths.h); the device check points that at a carried copy.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "actors/cpu_executor.h"
#include "actors/cuda/cuda_executor.h"
#include "actors/llm_engine.h"
#include "model/grammar/grammar.h"
#include "model/loader/llama_weights.h"
#include "model/synthetic_model.h"
#include "tests/actors/engine_test_util.h"
#include "tests/actors/grammar_engine_util.h"
#include "tests/actors/windowed_stories.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

#define REQUIRE_GPU_AND_MODEL()                                                 \
  do {                                                                          \
    PAGEDSERVE_REQUIRE_GPU();                                                   \
    if (!std::filesystem::exists(testing::stories260k_dir() / "config.json")) { \
      GTEST_SKIP() << "stories260K not found at " << testing::stories260k_dir() \
                   << " (set PAGEDSERVE_SHARED)";                               \
    }                                                                           \
  } while (0)

std::vector<std::vector<int32_t>> test_prompts() {
  std::vector<std::vector<int32_t>> prompts;
  uint32_t state = 12345;
  for (int length : {1, 5, 17, 40, 150}) {
    std::vector<int32_t> p = {1};  // BOS
    for (int i = 1; i < length; ++i) {
      state = state * 1664525u + 1013904223u;
      p.push_back(static_cast<int32_t>(3 + (state >> 8) % 500));
    }
    prompts.push_back(p);
  }
  prompts.push_back(prompts[3]);  // a repeat: served from the prefix cache
  return prompts;
}

EngineConfig config_for(const std::string& device) {
  EngineConfig config = testing_util::stories_config();
  config.device = device;
  config.max_num_batched_tokens = 64;  // forces chunked prefill of the long prompt
  config.max_model_len = 512;
  config.num_threads = 1;
  return config;
}

// Runs every prompt with `params` in one engine and returns each request's tokens.
std::vector<std::vector<int32_t>> generate(const EngineConfig& config,
                                           const model::SamplingParams& params,
                                           SchedulerStats* stats = nullptr) {
  LlmEngine engine(config);
  std::vector<uint64_t> ids;
  for (const auto& prompt : test_prompts()) ids.push_back(engine.add_request(prompt, params));
  auto finished = testing_util::run_to_completion(engine);
  std::vector<std::vector<int32_t>> out;
  for (uint64_t id : ids) out.push_back(finished[id].tokens());
  if (stats) *stats = engine.stats();
  return out;
}

// Executor options for comparisons at float32 tolerance: float32 weights and cache.
CudaExecutorOptions float32_options(int block_size, int num_device_blocks) {
  CudaExecutorOptions options;
  options.block_size = block_size;
  options.num_device_blocks = num_device_blocks;
  options.weight_dtype = "float32";
  options.kv_cache_dtype = "float32";
  return options;
}

// A scheduled sequence sampled greedily that also asks for its top 8 logprobs.
ScheduledSequence greedy_top8(uint64_t seq_id, std::vector<int32_t> tokens, int computed,
                              std::vector<int32_t> table) {
  static const auto params = [] {
    model::SamplingParams greedy;
    greedy.temperature = 0.0f;
    return std::make_shared<const model::SamplingParams>(greedy);
  }();
  ScheduledSequence s;
  s.seq_id = seq_id;
  s.new_token_ids = std::move(tokens);
  s.num_computed_tokens = computed;
  s.block_table = std::move(table);
  s.sample = true;
  s.sampling = params;
  s.sample_seeds = {0};
  s.num_top_logprobs = 8;
  return s;
}

TEST(CudaExecutor, GreedyGenerationEqualsCpu) {
  REQUIRE_GPU_AND_MODEL();
  const model::SamplingParams params = testing_util::greedy(48);
  const auto cpu = generate(config_for("cpu"), params);
  EngineConfig cuda = config_for("cuda");
  cuda.dtype = "float32";
  cuda.kv_cache_dtype = "float32";
  const auto gpu = generate(cuda, params);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_FALSE(cpu[i].empty());
    EXPECT_EQ(gpu[i], cpu[i]) << "prompt " << i;
  }
}

TEST(CudaExecutor, SeededSamplingEqualsCpu) {
  REQUIRE_GPU_AND_MODEL();
  model::SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 40;
  params.top_p = 0.9f;
  params.min_p = 0.02f;
  params.seed = 1234;
  params.max_tokens = 32;
  params.repetition_penalty = 1.1f;
  const auto cpu = generate(config_for("cpu"), params);
  EngineConfig cuda = config_for("cuda");
  cuda.dtype = "float32";
  cuda.kv_cache_dtype = "float32";
  const auto gpu = generate(cuda, params);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(gpu[i], cpu[i]) << "prompt " << i;
}

// Structured outputs on the device: the grammar's bitmask is applied by the CUDA sampler, so
// greedy and seeded constrained generation give the CPU executor's tokens, and every text
// matches the pattern (a model that knows nothing of it would not produce it unconstrained).
TEST(CudaExecutor, GrammarConstrainedGenerationEqualsCpu) {
  REQUIRE_GPU_AND_MODEL();
  const std::string pattern = "[0-9]{3}-[a-z]{2,6}( [A-Z][a-z]{1,8})?";
  auto run = [&](const std::string& device, float temperature) {
    EngineConfig config = config_for(device);
    config.dtype = "float32";
    config.kv_cache_dtype = "float32";
    LlmEngine engine(config);
    model::SamplingParams params;
    params.temperature = temperature;
    params.seed = 77;
    params.max_tokens = 40;
    params.n = temperature > 0.0f ? 2 : 1;  // greedy requests take n = 1 (as vLLM)
    params.grammar = testing_util::compile_grammar(engine, model::grammar::regex_to_gbnf(pattern));
    std::vector<uint64_t> ids;
    for (const auto& prompt : test_prompts()) ids.push_back(engine.add_request(prompt, params));
    auto finished = testing_util::run_to_completion(engine);
    std::vector<std::string> texts;
    for (uint64_t id : ids) {
      for (const CompletionOutput& seq : finished[id].last.outputs) texts.push_back(seq.text);
    }
    testing_util::expect_all_blocks_free(engine);
    return texts;
  };
  const std::regex reference(pattern);
  for (float temperature : {0.0f, 1.0f}) {
    const std::vector<std::string> cpu = run("cpu", temperature);
    const std::vector<std::string> gpu = run("cuda", temperature);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_EQ(gpu[i], cpu[i]) << "T " << temperature << ", sequence " << i;
      EXPECT_TRUE(std::regex_match(gpu[i], reference)) << gpu[i];
    }
  }
}

// Lower precision changes logits slightly, so only the start of each greedy continuation is
// required to agree with the CPU (a loose sanity bound, not an accuracy measurement).
TEST(CudaExecutor, HalfPrecisionAndFp8CacheStayCloseToCpu) {
  REQUIRE_GPU_AND_MODEL();
  const model::SamplingParams params = testing_util::greedy(16);
  const auto cpu = generate(config_for("cpu"), params);
  for (const char* kv : {"float16", "fp8"}) {
    EngineConfig cuda = config_for("cuda");
    cuda.dtype = "float16";
    cuda.kv_cache_dtype = kv;
    const auto gpu = generate(cuda, params);
    for (size_t i = 0; i < cpu.size(); ++i) {
      size_t agree = 0;
      while (agree < cpu[i].size() && agree < gpu[i].size() && cpu[i][agree] == gpu[i][agree]) {
        ++agree;
      }
      // fp8 e4m3 keeps 3 mantissa bits: a looser bound than float16's.
      const size_t required = std::string(kv) == "fp8" ? 4 : 8;
      EXPECT_GE(agree, required) << "kv " << kv << ", prompt " << i
                                 << ": greedy prefix shared with CPU";
    }
  }
}

TEST(CudaExecutor, SwapPreemptionGivesTheCpuOutput) {
  REQUIRE_GPU_AND_MODEL();
  const model::SamplingParams params = testing_util::greedy(120);
  auto small_pool = [](const std::string& device) {
    EngineConfig c = config_for(device);
    c.dtype = "float32";
    c.kv_cache_dtype = "float32";
    c.num_kv_blocks = 24;
    c.max_model_len = 256;
    c.swap_space_bytes = 4 << 20;
    c.preemption_mode = PreemptionMode::kSwap;
    return c;
  };
  SchedulerStats cpu_stats, gpu_stats;
  const auto cpu = generate(small_pool("cpu"), params, &cpu_stats);
  const auto gpu = generate(small_pool("cuda"), params, &gpu_stats);
  EXPECT_GT(gpu_stats.num_preemptions_swap, 0) << "the pool was meant to run out";
  EXPECT_EQ(gpu_stats.num_preemptions_swap, cpu_stats.num_preemptions_swap);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(gpu[i], cpu[i]) << "prompt " << i;
}

// One sequence of 20 tokens is prefilled into blocks {0, 1}; its next token is then decoded
// from the same blocks, from copies swapped out and back in to {5, 6} (over blocks holding
// another sequence), and from a copy-on-write copy {7, 1}. All three must give the same top
// logprobs, and the CPU executor the same within float tolerance.
TEST(CudaExecutor, SwapAndCopyOnWriteRoundTrips) {
  REQUIRE_GPU_AND_MODEL();
  const int block_size = 16;
  CudaExecutorOptions options;
  options.block_size = block_size;
  options.num_device_blocks = 16;
  options.num_cpu_blocks = 4;
  options.weight_dtype = "float32";
  options.kv_cache_dtype = "float32";
  CudaExecutor gpu(model::load_llama_weights(testing::stories260k_dir()), options);
  CpuExecutor cpu(model::load_llama_weights(testing::stories260k_dir()), block_size, 16, 4, 1);

  std::vector<int32_t> prompt = test_prompts()[4];
  prompt.resize(20);
  auto prefill = [&](std::vector<int32_t> tokens, std::vector<int32_t> table) {
    StepInput in;
    ScheduledSequence s;
    s.new_token_ids = std::move(tokens);
    s.block_table = std::move(table);
    s.sample = false;
    in.seqs.push_back(s);
    return in;
  };
  auto decode = [&](std::vector<int32_t> table) {
    StepInput in;
    ScheduledSequence s;
    s.new_token_ids = {42};
    s.num_computed_tokens = 20;
    s.block_table = std::move(table);
    s.sample = true;
    model::SamplingParams greedy;
    greedy.temperature = 0.0f;
    s.sampling = std::make_shared<const model::SamplingParams>(greedy);
    s.sample_seeds = {0};
    s.num_top_logprobs = 8;
    in.seqs.push_back(s);
    return in;
  };
  for (Executor* e : {static_cast<Executor*>(&gpu), static_cast<Executor*>(&cpu)}) {
    e->execute(prefill(prompt, {0, 1}));
    e->execute(prefill(test_prompts()[3], {5, 6, 9}));  // junk for the swap-in to overwrite
  }
  std::map<std::string, std::vector<model::TokenLogprob>> gpu_results, cpu_results;
  for (Executor* e : {static_cast<Executor*>(&gpu), static_cast<Executor*>(&cpu)}) {
    auto& results = e == &gpu ? gpu_results : cpu_results;
    StepInput swapped = decode({5, 6});
    swapped.swap_out = {{0, 2}, {1, 3}};
    swapped.swap_in = {{2, 5}, {3, 6}};
    results["swapped"] = e->execute(swapped).seqs[0].top_logprobs;
    StepInput copied = decode({7, 1});
    copied.block_copies = {{0, 7}};
    results["copied"] = e->execute(copied).seqs[0].top_logprobs;
    results["direct"] = e->execute(decode({0, 1})).seqs[0].top_logprobs;
  }
  ASSERT_EQ(gpu_results["direct"].size(), 8u);
  EXPECT_EQ(gpu_results["swapped"], gpu_results["direct"]);
  EXPECT_EQ(gpu_results["copied"], gpu_results["direct"]);
  for (const auto& [name, top] : cpu_results) {
    ASSERT_EQ(top.size(), gpu_results[name].size()) << name;
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_EQ(gpu_results[name][i].token_id, top[i].token_id) << name << " #" << i;
      EXPECT_NEAR(gpu_results[name][i].logprob, top[i].logprob, 1e-4) << name << " #" << i;
    }
  }
}

// Every family's random model (biases, q/k norms, sandwich norms, GeGLU, soft-capping, sliding
// windows, local RoPE, layers without RoPE, fused q/k/v and gate/up, RoPE scaling) through
// the CUDA executor and the CPU executor from the same checkpoint, a Hugging Face folder or a
// GGUF file (llama.cpp's names, permuted Q/K, stored RoPE divisors): a prompt longer than the
// window, then a mixed step (a decode and a new prompt), then a decode-only step. The top 8
// logprobs of every sampled row must agree (float32 weights and cache on both).
class CudaFamilies
    : public ::testing::TestWithParam<std::tuple<model::SyntheticFamily, bool /*gguf*/>> {};

TEST_P(CudaFamilies, TopLogprobsEqualCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  model::SyntheticModelSpec spec;
  const bool gguf = std::get<1>(GetParam());
  spec.family = std::get<0>(GetParam());
  spec.hidden_size = 128;
  spec.num_layers = 4;  // SmolLM3 leaves RoPE out of the fourth
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.intermediate_size = 192;
  spec.vocab_size = 600;
  spec.sliding_window = 12;  // shorter than the prompts: the window matters
  spec.norm_jitter = 0.3f;
  spec.seed = 7;
  // Gemma 2 and 3 have heads of 256 (wider than hidden / heads), as the released models do.
  if (spec.family == model::SyntheticFamily::kGemma2 ||
      spec.family == model::SyntheticFamily::kGemma3) {
    spec.head_dim = 256;
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (std::string("pagedserve_cuda_family_") + model::synthetic_family_name(spec.family));
  std::filesystem::create_directories(dir);
  const std::filesystem::path model_path = gguf ? dir / "model.gguf" : dir;
  if (gguf) {
    model::write_synthetic_gguf(model_path, spec);
  } else {
    model::write_synthetic_model(dir, spec);
  }
  const model::LlamaCheckpoint checkpoint = model::open_llama_checkpoint(model_path);

  const int block_size = 16;
  CudaExecutor gpu(checkpoint, float32_options(block_size, 16));
  CpuExecutor cpu(checkpoint, block_size, 16, 0, 1);
  const auto sequence = greedy_top8;
  std::vector<int32_t> a(40), b(21);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(1 + (i * 37) % 599);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>(1 + (i * 91 + 5) % 599);
  const std::vector<int32_t> table_a = {3, 0, 5}, table_b = {7, 8};

  std::vector<StepInput> steps(3);
  steps[0].seqs = {sequence(1, a, 0, table_a)};
  steps[1].seqs = {sequence(1, {11}, 40, table_a), sequence(2, b, 0, table_b)};
  steps[2].seqs = {sequence(1, {12}, 41, table_a), sequence(2, {13}, 21, table_b)};
  for (size_t step = 0; step < steps.size(); ++step) {
    steps[step].step_id = step + 1;
    const StepOutput want = cpu.execute(steps[step]);
    const StepOutput got = gpu.execute(steps[step]);
    ASSERT_EQ(got.seqs.size(), want.seqs.size());
    for (size_t q = 0; q < want.seqs.size(); ++q) {
      const auto& w = want.seqs[q].top_logprobs;
      const auto& g = got.seqs[q].top_logprobs;
      ASSERT_EQ(g.size(), 8u) << "step " << step << " seq " << q;
      ASSERT_EQ(w.size(), 8u);
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_NEAR(g[i].logprob, w[i].logprob, 2e-3)
            << "step " << step << " seq " << q << " #" << i;
        // Ids may swap only between candidates the tolerance cannot tell apart.
        if (g[i].token_id != w[i].token_id) {
          EXPECT_NEAR(w[i].logprob, w[i == 0 ? 1 : i - 1].logprob, 4e-3)
              << "step " << step << " seq " << q << " #" << i;
        }
      }
      ASSERT_EQ(got.seqs[q].samples.size(), 1u);
      EXPECT_NEAR(got.seqs[q].samples[0].logprob, want.seqs[q].samples[0].logprob, 2e-3);
    }
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    AllFamilies, CudaFamilies,
    ::testing::Combine(
        ::testing::Values(model::SyntheticFamily::kLlama, model::SyntheticFamily::kLlama3,
                          model::SyntheticFamily::kMistral, model::SyntheticFamily::kQwen2,
                          model::SyntheticFamily::kQwen3, model::SyntheticFamily::kPhi3,
                          model::SyntheticFamily::kGemma2, model::SyntheticFamily::kGemma3,
                          model::SyntheticFamily::kSmolLM3),
        ::testing::Bool()),
    [](const ::testing::TestParamInfo<CudaFamilies::ParamType>& info) {
      return std::string(model::synthetic_family_name(std::get<0>(info.param))) +
             (std::get<1>(info.param) ? "_gguf" : "_hf");
    });

// A windowed model (stories260K as Mistral, window 16) through the engine with the blocks the
// window has passed released (table entries kNoBlock), prompts prefilled in chunks: the CUDA
// executor gives the CPU executor's greedy tokens, and a long generation holds only about
// window / block_size + 2 blocks.
TEST(CudaExecutor, SlidingWindowWithReleasedBlocksEqualsCpu) {
  REQUIRE_GPU_AND_MODEL();
  constexpr int kWindow = 16, kBlockSize = 4;
  auto run = [&](const std::string& device, int* peak_used) {
    EngineConfig config;
    config.model_dir = testing::windowed_stories_dir(kWindow);
    config.device = device;
    config.block_size = kBlockSize;
    config.num_kv_blocks = 64;
    config.max_model_len = 256;
    config.max_num_batched_tokens = 12;  // windows release between chunks
    config.num_threads = 1;
    config.dtype = "float32";
    config.kv_cache_dtype = "float32";
    LlmEngine engine(config);
    model::SamplingParams params = testing_util::greedy(150);
    params.ignore_eos = true;
    std::vector<uint64_t> ids;
    for (const auto& prompt : test_prompts()) {
      if (prompt.size() > 1 && prompt.size() < 100)
        ids.push_back(engine.add_request(prompt, params));
    }
    std::map<uint64_t, testing_util::Finished> out;
    *peak_used = 0;
    while (engine.has_unfinished_requests()) {
      testing_util::collect(out, engine.step());
      *peak_used =
          std::max(*peak_used, engine.scheduler().block_manager().num_used_device_blocks());
    }
    testing_util::expect_all_blocks_free(engine);
    std::vector<std::vector<int32_t>> tokens;
    for (uint64_t id : ids) tokens.push_back(out[id].tokens());
    return tokens;
  };
  int cpu_peak = 0, gpu_peak = 0;
  const auto cpu = run("cpu", &cpu_peak);
  const auto gpu = run("cuda", &gpu_peak);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].size(), 150u);
    EXPECT_EQ(gpu[i], cpu[i]) << "request " << i;
  }
  // Sequences of up to 190 tokens would need 48 blocks each without releasing.
  EXPECT_LE(gpu_peak, static_cast<int>(cpu.size()) * (kWindow / kBlockSize + 3));
  EXPECT_EQ(gpu_peak, cpu_peak);
}

// The engine sizes the CUDA pool with the executor's own dtype names (no device needed):
// "float" and "half" are weight names the executor accepts, "auto" follows the weights, and a
// cache dtype it refuses is an error here too, not a pool of the wrong size.
TEST(CudaExecutorOptions, KvDtypeBytesFollowTheExecutorsNames) {
  CudaExecutorOptions options;
  options.weight_dtype = "float";
  EXPECT_EQ(cuda_kv_dtype_bytes(options, "bfloat16"), 4u);
  options.weight_dtype = "half";
  EXPECT_EQ(cuda_kv_dtype_bytes(options, "float32"), 2u);
  options.weight_dtype = "auto";
  EXPECT_EQ(cuda_kv_dtype_bytes(options, "bfloat16"), 2u);
  EXPECT_EQ(cuda_kv_dtype_bytes(options, ""), 4u);  // no torch_dtype: float32
  options.kv_cache_dtype = "fp8";
  EXPECT_EQ(cuda_kv_dtype_bytes(options, "bfloat16"), 1u);
  options.kv_cache_dtype = "fp8_e5m2";
  EXPECT_THROW(cuda_kv_dtype_bytes(options, "bfloat16"), std::invalid_argument);
  options.kv_cache_dtype = "auto";
  options.weight_dtype = "int4";
  EXPECT_THROW(cuda_kv_dtype_bytes(options, "bfloat16"), std::invalid_argument);
}

// An explicit --kv-cache-memory sizes the CUDA pool (instead of --gpu-memory-utilization).
TEST(CudaExecutor, KvCacheMemorySizesThePool) {
  REQUIRE_GPU_AND_MODEL();
  EngineConfig config = config_for("cuda");
  config.dtype = "float32";
  config.kv_cache_dtype = "float32";
  config.num_kv_blocks = 0;
  config.kv_cache_memory_bytes = int64_t{3} << 20;
  config.kv_cache_memory_given = true;
  LlmEngine engine(config);
  const model::ModelConfig& mc = engine.model_config();
  const int64_t block_bytes = int64_t{2} * mc.num_hidden_layers * mc.num_key_value_heads *
                              config.block_size * mc.head_dim * 4;  // keys and values, float32
  EXPECT_EQ(engine.scheduler().block_manager().num_total_device_blocks(),
            (int64_t{3} << 20) / block_bytes);
}

// Decode steps replayed from CUDA graphs (padded to power-of-two batches, tables and split-K
// partition counts) against the same steps run eagerly: same top logprobs, batches of 5, 3, 1
// and 5 again (a replay of the first graph), with split-K forced by 32-token partitions.
TEST(CudaExecutor, DecodeGraphsMatchEagerSteps) {
  REQUIRE_GPU_AND_MODEL();
  const int block_size = 16;
  CudaExecutorOptions options = float32_options(block_size, 128);
  options.attention_partition_size = 32;
  CudaExecutor graphed(model::load_llama_weights(testing::stories260k_dir()), options);
  options.cuda_graphs = false;
  CudaExecutor eager(model::load_llama_weights(testing::stories260k_dir()), options);

  std::vector<std::vector<int32_t>> prompts = test_prompts();
  prompts.resize(5);
  std::vector<std::vector<int32_t>> tables(prompts.size());
  std::vector<int> lengths(prompts.size());
  int next_block = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    lengths[i] = static_cast<int>(prompts[i].size());
    for (int b = 0; b < (lengths[i] + 8) / block_size + 1; ++b) tables[i].push_back(next_block++);
  }
  auto sequence = [&](size_t i, std::vector<int32_t> tokens, int computed) {
    return greedy_top8(i + 1, std::move(tokens), computed, tables[i]);
  };
  StepInput prefill;
  for (size_t i = 0; i < prompts.size(); ++i) prefill.seqs.push_back(sequence(i, prompts[i], 0));
  for (Executor* e : {static_cast<Executor*>(&graphed), static_cast<Executor*>(&eager)}) {
    e->execute(prefill);
  }
  const std::vector<std::vector<size_t>> decode_batches = {
      {0, 1, 2, 3, 4}, {1, 3, 4}, {2}, {0, 1, 2, 3, 4}};
  int step = 0;
  for (const auto& members : decode_batches) {
    StepInput in;
    in.step_id = static_cast<uint64_t>(++step);
    for (size_t i : members)
      in.seqs.push_back(sequence(i, {static_cast<int32_t>(40 + i)}, lengths[i]));
    const StepOutput want = eager.execute(in);
    const StepOutput got = graphed.execute(in);
    for (size_t i : members) ++lengths[i];
    ASSERT_EQ(got.seqs.size(), want.seqs.size());
    for (size_t q = 0; q < want.seqs.size(); ++q) {
      ASSERT_EQ(got.seqs[q].top_logprobs.size(), 8u);
      EXPECT_EQ(got.seqs[q].samples[0].token_id, want.seqs[q].samples[0].token_id)
          << "step " << step << " seq " << q;
      for (size_t k = 0; k < 8; ++k) {
        EXPECT_NEAR(got.seqs[q].top_logprobs[k].logprob, want.seqs[q].top_logprobs[k].logprob, 1e-4)
            << "step " << step << " seq " << q << " #" << k;
      }
    }
  }
  EXPECT_EQ(graphed.graph_launches(), decode_batches.size());
  EXPECT_EQ(eager.graph_launches(), 0u);
}

// The step timers: every step with rows counted once, GPU times from events (positive, and
// the graphed decode steps included), the host parts within the wall time around execute().
TEST(CudaExecutor, StepTimesCoverEveryStepWithinItsWallTime) {
  REQUIRE_GPU_AND_MODEL();
  const int block_size = 16;
  CudaExecutor gpu(model::load_llama_weights(testing::stories260k_dir()),
                   float32_options(block_size, 64));
  std::vector<std::vector<int32_t>> prompts = test_prompts();
  prompts.resize(2);
  std::vector<std::vector<int32_t>> tables(prompts.size());
  std::vector<int> lengths(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    lengths[i] = static_cast<int>(prompts[i].size());
    for (int b = 0; b < (lengths[i] + 8) / block_size + 1; ++b) {
      tables[i].push_back(static_cast<int32_t>(i * 16 + b));
    }
  }
  using Clock = std::chrono::steady_clock;
  double wall_s = 0;
  auto run = [&](const StepInput& in) {
    const auto start = Clock::now();
    const StepOutput out = gpu.execute(in);
    wall_s += std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GT(out.times.forward_s, 0.0);
    EXPECT_GT(out.times.sampling_s, 0.0);
  };
  StepInput prefill;
  for (size_t i = 0; i < prompts.size(); ++i) {
    prefill.seqs.push_back(greedy_top8(i + 1, prompts[i], 0, tables[i]));
  }
  run(prefill);
  for (int step = 1; step <= 3; ++step) {
    StepInput in;
    in.step_id = static_cast<uint64_t>(step);
    for (size_t i = 0; i < prompts.size(); ++i) {
      in.seqs.push_back(
          greedy_top8(i + 1, {static_cast<int32_t>(40 + step)}, lengths[i]++, tables[i]));
    }
    run(in);
  }
  const CudaStepTimes t = gpu.step_times();
  EXPECT_EQ(t.steps, 4u);
  EXPECT_GT(t.gpu_forward_s, 0.0);
  EXPECT_GT(t.gpu_sampling_s, 0.0);
  EXPECT_GT(t.host_prepare_s, 0.0);
  const double host = t.host_prepare_s + t.host_sample_s + t.wait_s + t.host_results_s;
  EXPECT_LE(host, wall_s);
  EXPECT_GE(host, 0.9 * wall_s);  // nothing of a step's time left out
  // The GPU's part cannot outlast the wall time it ran in (the events sit inside execute()).
  EXPECT_LE(t.gpu_forward_s + t.gpu_sampling_s, wall_s);
}

TEST(CudaExecutor, RefusesBadInputWithAClearError) {
  REQUIRE_GPU_AND_MODEL();
  CudaExecutorOptions options;
  options.num_device_blocks = 4;
  options.weight_dtype = "float32";
  CudaExecutor gpu(model::load_llama_weights(testing::stories260k_dir()), options);
  StepInput in;
  ScheduledSequence s;
  s.new_token_ids = {100000};
  s.block_table = {0};
  in.seqs.push_back(s);
  EXPECT_THROW(gpu.execute(in), std::out_of_range);
  in.seqs[0].new_token_ids = {5};
  in.seqs[0].block_table = {9};
  EXPECT_THROW(gpu.execute(in), std::out_of_range);
  StepInput copy;
  copy.block_copies = {{0, 4}};
  EXPECT_THROW(gpu.execute(copy), std::out_of_range);
  options.kv_cache_dtype = "int3";
  EXPECT_THROW(CudaExecutor(model::load_llama_weights(testing::stories260k_dir()), options),
               std::invalid_argument);
}

}  // namespace
}  // namespace pagedserve::actors
