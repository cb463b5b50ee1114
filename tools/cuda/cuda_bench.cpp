// cuda_bench: the GPU measurements of scripts/device-check, written as one JSON document.
//  1. Device-to-device cudaMemcpy bandwidth (bytes read + written per second): the baseline.
//  2. Decode paged-attention bandwidth (K/V bytes read per second) on Llama-like shapes, as a
//     ratio of (1); split-K for one long sequence, with and without the split.
//  3. End-to-end output tokens/s of the CudaExecutor on a random-weight Llama-3.2-1B-shaped
//     model (about 1.24B parameters, bfloat16) at batch 1, 32 and 256: 128-token prompts then
//     128 generated tokens per sequence, greedy (and one seeded top-p run at batch 32), with
//     decode CUDA graphs; batch 1 and 32 also eagerly (--enforce-eager) for comparison.
// Usage: cuda_bench [--out FILE] [--quick] [--attention-only]
//   --quick: smaller shapes, for a smoke run; --attention-only: no end-to-end model (profiling)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/cuda/cuda_executor.h"
#include "kernels/cuda/cuda_kernels.h"

namespace {

namespace kc = pagedserve::kernels::cuda;
using pagedserve::actors::CudaExecutor;
using pagedserve::actors::CudaExecutorOptions;
using pagedserve::actors::CudaStepTimes;
using pagedserve::actors::ScheduledSequence;
using pagedserve::actors::StepInput;
using pagedserve::actors::StepOutput;
using Clock = std::chrono::steady_clock;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// Mean seconds per call of `body` over `iters` calls (after two warm-up calls), by CUDA events.
template <typename Body>
double time_per_call(int iters, Body body) {
  body();
  body();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start), "record");
  for (int i = 0; i < iters; ++i) body();
  check(cudaEventRecord(stop), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1000.0 / iters;
}

double memcpy_bandwidth(size_t bytes) {
  void* src = nullptr;
  void* dst = nullptr;
  check(cudaMalloc(&src, bytes), "cudaMalloc");
  check(cudaMalloc(&dst, bytes), "cudaMalloc");
  check(cudaMemset(src, 1, bytes), "memset");
  const double s = time_per_call(20, [&] {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr), "memcpy");
  });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / s;  // read + write
}

struct AttentionShape {
  std::string name;
  int batch, context, num_heads, num_kv_heads, head_dim, block_size;
  kc::DType dtype;
  int partition_size;
  bool decode_kernel = true;  // false: the tiled (prefill) kernel on the same decode batch
};

nlohmann::json attention_bandwidth(const AttentionShape& s, double memcpy_bw) {
  std::mt19937 rng(1);
  const int blocks_per_seq = (s.context + s.block_size - 1) / s.block_size;
  const int num_blocks = s.batch * blocks_per_seq;
  const size_t block_elems = static_cast<size_t>(s.num_kv_heads) * s.block_size * s.head_dim;
  const size_t pool_bytes = num_blocks * block_elems * kc::dtype_size(s.dtype);
  void *key = nullptr, *value = nullptr;
  check(cudaMalloc(&key, pool_bytes), "cudaMalloc");
  check(cudaMalloc(&value, pool_bytes), "cudaMalloc");
  check(cudaMemset(key, 0x11, pool_bytes), "memset");  // small finite values in every dtype
  check(cudaMemset(value, 0x11, pool_bytes), "memset");
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int32_t> qsl(s.batch + 1), lens(s.batch, s.context);
  for (int b = 0; b <= s.batch; ++b) qsl[b] = b;
  const int group = s.num_heads / s.num_kv_heads;
  const std::vector<int32_t> work = kc::attention_work_items(qsl.data(), s.batch, group);
  const int parts = kc::attention_num_partitions(s.context, s.partition_size);
  const size_t q_elems = static_cast<size_t>(s.batch) * s.num_heads * s.head_dim;
  const size_t partial_rows = static_cast<size_t>(s.batch) * s.num_heads * parts;
  float *q, *out, *pout, *pmax, *psum;
  int32_t *dqsl, *dlens, *dtable, *dwork;
  check(cudaMalloc(&q, q_elems * 4), "cudaMalloc");
  check(cudaMemset(q, 0, q_elems * 4), "memset");
  check(cudaMalloc(&out, q_elems * 4), "cudaMalloc");
  check(cudaMalloc(&pout, partial_rows * s.head_dim * 4), "cudaMalloc");
  check(cudaMalloc(&pmax, partial_rows * 4), "cudaMalloc");
  check(cudaMalloc(&psum, partial_rows * 4), "cudaMalloc");
  auto upload = [](int32_t** dst, const std::vector<int32_t>& v) {
    check(cudaMalloc(dst, v.size() * 4), "cudaMalloc");
    check(cudaMemcpy(*dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
  };
  upload(&dqsl, qsl);
  upload(&dlens, lens);
  upload(&dtable, table);
  upload(&dwork, work);

  kc::AttentionParams p;
  p.query = q;
  p.out = out;
  p.cache.key = key;
  p.cache.value = value;
  p.cache.dtype = s.dtype;
  p.cache.num_blocks = num_blocks;
  p.cache.block_size = s.block_size;
  p.cache.num_kv_heads = s.num_kv_heads;
  p.cache.head_dim = s.head_dim;
  p.query_start_loc = dqsl;
  p.seq_lens = dlens;
  p.block_tables = dtable;
  p.work_items = dwork;
  p.num_work_items = static_cast<int>(work.size() / 2);
  p.num_tokens = s.batch;
  p.num_seqs = s.batch;
  p.use_decode_kernel = s.decode_kernel;
  p.max_blocks_per_seq = blocks_per_seq;
  p.num_heads = s.num_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.max_seq_len = s.context;
  p.partition_size = s.partition_size;
  p.partial_out = pout;
  p.partial_max = pmax;
  p.partial_sum = psum;
  const double seconds =
      time_per_call(20, [&] { check(kc::paged_attention(p, nullptr), "paged_attention"); });
  const double kv_bytes = 2.0 * static_cast<double>(s.batch) * s.context * s.num_kv_heads *
                          s.head_dim * kc::dtype_size(s.dtype);
  const double bw = kv_bytes / seconds;
  for (void* ptr : {static_cast<void*>(q), static_cast<void*>(out), static_cast<void*>(pout),
                    static_cast<void*>(pmax), static_cast<void*>(psum), static_cast<void*>(dqsl),
                    static_cast<void*>(dlens), static_cast<void*>(dtable),
                    static_cast<void*>(dwork), key, value}) {
    cudaFree(ptr);
  }
  nlohmann::json j = {{"name", s.name},
                      {"batch", s.batch},
                      {"context", s.context},
                      {"num_heads", s.num_heads},
                      {"num_kv_heads", s.num_kv_heads},
                      {"head_dim", s.head_dim},
                      {"block_size", s.block_size},
                      {"kv_dtype", kc::dtype_name(s.dtype)},
                      {"partition_size", s.partition_size},
                      {"kernel", s.decode_kernel ? "decode" : "tiled"},
                      {"microseconds", seconds * 1e6},
                      {"kv_gb_per_s", bw / 1e9},
                      {"fraction_of_memcpy", bw / memcpy_bw}};
  std::cout << j.dump() << std::endl;
  return j;
}

// A Llama-3.2-1B-shaped model with small uniform random weights (norms 1), tied embeddings.
pagedserve::model::LlamaWeights random_llama(bool quick) {
  pagedserve::model::LlamaWeights w;
  pagedserve::model::ModelConfig& c = w.config;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = quick ? 512 : 2048;
  c.intermediate_size = quick ? 1536 : 8192;
  c.num_hidden_layers = quick ? 4 : 16;
  c.num_attention_heads = quick ? 8 : 32;
  c.num_key_value_heads = quick ? 2 : 8;
  c.head_dim = 64;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0f;
  c.vocab_size = quick ? 32000 : 128256;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 131072;
  c.torch_dtype = "bfloat16";
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto fill = [&state](std::vector<float>& v, size_t n, float scale) {
    v.resize(n);
    for (float& x : v) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      x = (static_cast<float>(state >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
  };
  const size_t h = c.hidden_size, f = c.intermediate_size;
  const size_t qw = static_cast<size_t>(c.num_attention_heads) * c.head_dim;
  const size_t kvw = static_cast<size_t>(c.num_key_value_heads) * c.head_dim;
  fill(w.embed_tokens, c.vocab_size * h, 0.05f);
  w.final_norm.assign(h, 1.0f);
  w.layers.resize(c.num_hidden_layers);
  for (auto& l : w.layers) {
    l.input_norm.assign(h, 1.0f);
    l.post_norm.assign(h, 1.0f);
    fill(l.wq, qw * h, 0.03f);
    fill(l.wk, kvw * h, 0.03f);
    fill(l.wv, kvw * h, 0.03f);
    fill(l.wo, h * qw, 0.03f);
    fill(l.w_gate, f * h, 0.03f);
    fill(l.w_up, f * h, 0.03f);
    fill(l.w_down, h * f, 0.015f);
  }
  return w;
}

int64_t count_params(const pagedserve::model::LlamaWeights& w) {
  int64_t n = static_cast<int64_t>(w.embed_tokens.size() + w.final_norm.size() + w.lm_head.size());
  for (const auto& l : w.layers) {
    n += static_cast<int64_t>(l.input_norm.size() + l.post_norm.size() + l.wq.size() + l.wk.size() +
                              l.wv.size() + l.wo.size() + l.w_gate.size() + l.w_up.size() +
                              l.w_down.size());
  }
  return n;
}

// Prefill `batch` prompts of prompt_len tokens (chunked to the executor's token budget), then
// decode until each sequence has gen_len tokens. Each sequence owns a fixed run of blocks.
nlohmann::json end_to_end(CudaExecutor& executor, int batch, int prompt_len, int gen_len,
                          int max_batched_tokens, bool sampled) {
  const int bs = executor.block_size();
  const int blocks_per_seq = (prompt_len + gen_len + bs - 1) / bs;
  if (static_cast<int64_t>(batch) * blocks_per_seq > executor.num_device_blocks()) {
    throw std::runtime_error("KV pool too small for the end-to-end batch");
  }
  const int vocab = executor.model_config().vocab_size;
  std::mt19937 rng(batch);
  std::vector<std::vector<int32_t>> tables(batch), prompts(batch);
  std::vector<int32_t> last(batch);
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < blocks_per_seq; ++i) tables[b].push_back(b * blocks_per_seq + i);
    for (int i = 0; i < prompt_len; ++i) prompts[b].push_back(static_cast<int32_t>(rng() % vocab));
  }
  auto make_seq = [&](int b, std::vector<int32_t> tokens, int computed, uint64_t step) {
    ScheduledSequence s;
    s.request_id = s.seq_id = b;
    s.new_token_ids = std::move(tokens);
    s.num_computed_tokens = computed;
    s.block_table = tables[b];
    s.sample = true;
    pagedserve::model::SamplingParams params;
    if (sampled) {
      params.temperature = 1.0f;
      params.top_p = 0.9f;
    } else {
      params.temperature = 0.0f;
    }
    s.sampling = std::make_shared<const pagedserve::model::SamplingParams>(params);
    s.sample_seeds = {static_cast<uint64_t>(b) + 1};
    s.sample_step = step;
    return s;
  };
  int64_t generated = 0;
  uint64_t step_id = 0;
  const auto t0 = Clock::now();
  const int seqs_per_prefill = std::max(1, max_batched_tokens / prompt_len);
  for (int b0 = 0; b0 < batch; b0 += seqs_per_prefill) {
    StepInput in;
    in.step_id = step_id++;
    for (int b = b0; b < std::min(batch, b0 + seqs_per_prefill); ++b) {
      in.seqs.push_back(make_seq(b, prompts[b], 0, 0));
    }
    const StepOutput out = executor.execute(in);
    for (size_t i = 0; i < out.seqs.size(); ++i) last[b0 + i] = out.seqs[i].samples.at(0).token_id;
    generated += static_cast<int64_t>(out.seqs.size());
  }
  const auto t1 = Clock::now();
  const CudaStepTimes before = executor.step_times();
  for (int g = 1; g < gen_len; ++g) {
    StepInput in;
    in.step_id = step_id++;
    for (int b = 0; b < batch; ++b) {
      in.seqs.push_back(make_seq(b, {last[b]}, prompt_len + g - 1, static_cast<uint64_t>(g)));
    }
    const StepOutput out = executor.execute(in);
    for (int b = 0; b < batch; ++b) last[b] = out.seqs[b].samples.at(0).token_id;
    generated += batch;
  }
  const auto t2 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  nlohmann::json j = {
      {"batch", batch},
      {"prompt_len", prompt_len},
      {"gen_len", gen_len},
      {"sampling", sampled ? "temperature 1, top_p 0.9" : "greedy"},
      {"prefill_seconds", prefill_s},
      {"decode_seconds", decode_s},
      {"decode_ms_per_step", decode_s * 1e3 / std::max(1, gen_len - 1)},
      {"output_tokens_per_s", generated / (prefill_s + decode_s)},
      {"decode_tokens_per_s", static_cast<double>(batch) * (gen_len - 1) / decode_s}};
  // Where a decode step's time went (CudaStepTimes), ms per step.
  const CudaStepTimes after = executor.step_times();
  const double steps = static_cast<double>(std::max<uint64_t>(1, after.steps - before.steps));
  const auto per_step_ms = [&](double CudaStepTimes::*field) {
    return (after.*field - before.*field) * 1e3 / steps;
  };
  j["decode_step_split_ms"] = {{"host_prepare", per_step_ms(&CudaStepTimes::host_prepare_s)},
                               {"host_sample", per_step_ms(&CudaStepTimes::host_sample_s)},
                               {"wait", per_step_ms(&CudaStepTimes::wait_s)},
                               {"host_results", per_step_ms(&CudaStepTimes::host_results_s)},
                               {"gpu_forward", per_step_ms(&CudaStepTimes::gpu_forward_s)},
                               {"gpu_sampling", per_step_ms(&CudaStepTimes::gpu_sampling_s)}};
  std::cout << j.dump() << std::endl;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  bool quick = false;
  bool attention_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--attention-only") {
      attention_only = true;
    } else {
      std::cerr << "usage: cuda_bench [--out FILE] [--quick] [--attention-only]\n";
      return 2;
    }
  }
  try {
    if (pagedserve::actors::cuda_device_count() == 0) {
      std::cerr << "cuda_bench: no CUDA device visible\n";
      return 1;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    nlohmann::json result;
    result["device"] = prop.name;
    const double memcpy_bw = memcpy_bandwidth(quick ? (size_t{256} << 20) : (size_t{1} << 30));
    result["memcpy_d2d_gb_per_s"] = memcpy_bw / 1e9;
    std::cout << "memcpy d2d: " << memcpy_bw / 1e9 << " GB/s (read + write)" << std::endl;

    const int ctx_scale = quick ? 4 : 1;
    std::vector<AttentionShape> shapes = {
        {"decode_b64_ctx4096_fp16", 64, 4096 / ctx_scale, 32, 8, 128, 16, kc::DType::kFloat16, 0},
        {"decode_b64_ctx4096_fp16_split1024", 64, 4096 / ctx_scale, 32, 8, 128, 16,
         kc::DType::kFloat16, 1024},
        {"decode_b64_ctx4096_fp16_tiled", 64, 4096 / ctx_scale, 32, 8, 128, 16, kc::DType::kFloat16,
         0, false},
        {"decode_b256_ctx1024_fp16", 256, 1024 / ctx_scale, 32, 8, 128, 16, kc::DType::kFloat16, 0},
        {"decode_b64_ctx4096_fp16_hd64", 64, 4096 / ctx_scale, 32, 8, 64, 16, kc::DType::kFloat16,
         0},
        {"decode_b64_ctx4096_fp8", 64, 4096 / ctx_scale, 32, 8, 128, 16, kc::DType::kFp8E4M3, 0},
        {"decode_b64_ctx4096_fp16_bs32", 64, 4096 / ctx_scale, 32, 8, 128, 32, kc::DType::kFloat16,
         0},
        {"decode_b1_ctx32768_fp16_nosplit", 1, 32768 / ctx_scale, 32, 8, 128, 16,
         kc::DType::kFloat16, 0},
        {"decode_b1_ctx32768_fp16_split512", 1, 32768 / ctx_scale, 32, 8, 128, 16,
         kc::DType::kFloat16, 512},
    };
    for (const AttentionShape& s : shapes) {
      result["attention"].push_back(attention_bandwidth(s, memcpy_bw));
    }

    if (attention_only) {
      std::cout << result.dump(2) << std::endl;
      return 0;
    }
    auto weights = random_llama(quick);
    const int64_t params = count_params(weights);
    result["model"] = {{"shape", quick ? "small (quick)" : "Llama-3.2-1B"},
                       {"parameters", params},
                       {"weight_dtype", "bfloat16"}};
    std::cout << "random model: " << params << " parameters" << std::endl;
    CudaExecutorOptions options;
    options.weight_dtype = "bfloat16";
    options.kv_cache_dtype = "auto";
    options.max_num_batched_tokens = 8192;
    options.max_num_seqs = 256;
    options.gpu_memory_utilization = 0.9;
    const int gen = quick ? 32 : 128;
    {
      // Every decode step launched eagerly (--enforce-eager), for comparison: batch 1 and 32.
      options.cuda_graphs = false;
      CudaExecutor eager(weights, options);
      for (int batch : {1, 32}) {
        nlohmann::json row = end_to_end(eager, batch, 128, gen, 8192, false);
        row["cuda_graphs"] = false;
        result["end_to_end"].push_back(row);
      }
      options.cuda_graphs = true;
    }
    const auto load_start = Clock::now();
    CudaExecutor executor(std::move(weights), options);
    result["model"]["load_seconds"] =
        std::chrono::duration<double>(Clock::now() - load_start).count();
    result["model"]["kv_blocks"] = executor.num_device_blocks();
    for (int batch : {1, 32, 256}) {
      result["end_to_end"].push_back(end_to_end(executor, batch, 128, gen, 8192, false));
      result["end_to_end"].back()["cuda_graphs"] = true;
    }
    result["end_to_end"].push_back(end_to_end(executor, 32, 128, gen, 8192, true));
    result["end_to_end"].back()["cuda_graphs"] = true;
    result["decode_graph_launches"] = executor.graph_launches();
    const std::string text = result.dump(2);
    if (!out_path.empty()) {
      std::ofstream(out_path) << text << "\n";
    }
    std::cout << text << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "cuda_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
