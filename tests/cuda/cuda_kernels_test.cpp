// Each CUDA kernel against its CPU twin (kernels/cpu, model/sampler) on fresh random inputs.
// Where a kernel reads a lower-precision KV cache, the CPU reference is handed the same rounded
// values, so every comparison is at float32 tolerance: what is tested is the kernel's indexing
// and arithmetic, and the rounding itself is checked separately (write_kv).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/sampling_rows.h"
#include "model/sampler.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedserve::cuda_testing {
namespace {

namespace kc = kernels::cuda;

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

::testing::AssertionResult all_close(const std::vector<float>& actual,
                                     const std::vector<float>& expected, double abs_tol,
                                     double rel_tol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (!(std::fabs(a - e) <= abs_tol + rel_tol * std::fabs(e))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << a << ", expected " << e << " (diff " << a - e << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Host-side planning (runs without a GPU): every (token, head-in-group) row of every sequence
// belongs to exactly one work item, and items never mix sequences.
TEST(CudaAttentionPlan, WorkItemsCoverEveryRowOnce) {
  const std::vector<int32_t> query_start_loc = {0, 1, 38, 58, 59, 62};
  for (int group : {1, 3, 4, 8, 16}) {
    const std::vector<int32_t> items = kc::attention_work_items(query_start_loc.data(), 5, group);
    ASSERT_EQ(items.size() % 2, 0u);
    std::map<std::pair<int, int>, int> covered;
    for (size_t i = 0; i < items.size(); i += 2) {
      const int seq = items[i], first = items[i + 1];
      const int rows = (query_start_loc[seq + 1] - query_start_loc[seq]) * group;
      ASSERT_LT(first, rows);
      for (int r = first; r < std::min(rows, first + kc::kAttentionRowsPerBlock); ++r) {
        ++covered[{seq, r}];
      }
    }
    int expected_rows = 0;
    for (int s = 0; s < 5; ++s) {
      const int rows = (query_start_loc[s + 1] - query_start_loc[s]) * group;
      expected_rows += rows;
      for (int r = 0; r < rows; ++r) EXPECT_EQ((covered[{s, r}]), 1) << s << "/" << r;
    }
    EXPECT_EQ(static_cast<int>(covered.size()), expected_rows) << "group " << group;
  }
  EXPECT_EQ(kc::attention_num_partitions(1, 512), 1);
  EXPECT_EQ(kc::attention_num_partitions(512, 512), 1);
  EXPECT_EQ(kc::attention_num_partitions(513, 512), 2);
  EXPECT_EQ(kc::attention_num_partitions(100000, 0), 1);
  EXPECT_EQ(kc::dtype_size(DType::kFp8E4M3), 1u);
  EXPECT_EQ(kc::dtype_size(DType::kBFloat16), 2u);
}

TEST(CudaKernels, RmsNormMatchesCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (int hidden : {8, 64, 1000, 2048}) {
    const int rows = 5;
    const std::vector<float> x = random_floats(rng, static_cast<size_t>(rows) * hidden, -3, 3);
    const std::vector<float> w = random_floats(rng, hidden, 0.5f, 1.5f);
    std::vector<float> expected(x.size());
    kernels::rms_norm(x.data(), w.data(), expected.data(), rows, hidden, 1e-5f);
    DeviceArray<float> dx(x), dw(w), dout(x.size());
    check(kc::rms_norm(dx.get(), dw.get(), dout.get(), rows, hidden, 1e-5f, nullptr), "rms_norm");
    EXPECT_TRUE(all_close(dout.download(), expected, 1e-5, 1e-5)) << "hidden " << hidden;
  }
}

TEST(CudaKernels, RopeMatchesCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (int head_dim : {8, 64, 128}) {
    const int tokens = 7, heads = 6, kv_heads = 2;
    std::vector<float> q = random_floats(rng, static_cast<size_t>(tokens) * heads * head_dim);
    std::vector<float> k = random_floats(rng, static_cast<size_t>(tokens) * kv_heads * head_dim);
    const std::vector<int32_t> positions = {0, 1, 5, 100, 1000, 4095, 30000};
    DeviceArray<float> dq(q), dk(k);
    DeviceArray<int32_t> dpos(positions);
    kernels::rope_rotate_half(q.data(), k.data(), positions.data(), tokens, heads, kv_heads,
                              head_dim, 500000.0f);
    check(kc::rope_rotate_half(dq.get(), dk.get(), dpos.get(), tokens, heads, kv_heads, head_dim,
                               500000.0f, nullptr),
          "rope");
    EXPECT_TRUE(all_close(dq.download(), q, 1e-5, 1e-5)) << "head_dim " << head_dim;
    EXPECT_TRUE(all_close(dk.download(), k, 1e-5, 1e-5)) << "head_dim " << head_dim;
  }
}

// Partial rotary dims, given (scaled) frequencies and an attention factor, against the CPU's
// table form; null frequencies are theta^(-2i / rotary_dim), as the CPU's plain tables.
TEST(CudaKernels, RopeWithFrequenciesAndPartialRotaryMatchesCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(21);
  const int tokens = 6, heads = 4, kv_heads = 2;
  const std::vector<int32_t> positions = {0, 3, 17, 900, 8191, 40000};
  for (int head_dim : {32, 64, 128}) {
    for (int rotary : {head_dim, head_dim / 2}) {
      for (bool given : {false, true}) {
        const int half = rotary / 2;
        std::vector<float> inv_freq(half);
        for (int i = 0; i < half; ++i) {
          inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rotary) / (1.0 + i % 3));
        }
        const float factor = given ? 1.17f : 1.0f;
        std::vector<float> q = random_floats(rng, static_cast<size_t>(tokens) * heads * head_dim);
        std::vector<float> k =
            random_floats(rng, static_cast<size_t>(tokens) * kv_heads * head_dim);
        DeviceArray<float> dq(q), dk(k), dfreq(inv_freq);
        DeviceArray<int32_t> dpos(positions);
        std::vector<float> table(static_cast<size_t>(tokens) * rotary);
        if (given) {
          kernels::rope_cos_sin_inv_freq(positions.data(), tokens, rotary, inv_freq.data(), nullptr,
                                         factor, table.data());
        } else {
          kernels::rope_cos_sin(positions.data(), tokens, rotary, 10000.0f, table.data());
        }
        kernels::rope_rotate_half_partial(q.data(), k.data(), table.data(), tokens, heads, kv_heads,
                                          head_dim, rotary);
        kc::RopeArgs rope;
        rope.rotary_dim = rotary;
        rope.theta = 10000.0f;
        rope.inv_freq = given ? dfreq.get() : nullptr;
        rope.attention_factor = factor;
        check(kc::rope_rotate_half_partial(dq.get(), dk.get(), dpos.get(), tokens, heads, kv_heads,
                                           head_dim, rope, nullptr),
              "rope");
        const std::string what = "head_dim " + std::to_string(head_dim) + " rotary " +
                                 std::to_string(rotary) + (given ? " given" : " plain");
        EXPECT_TRUE(all_close(dq.download(), q, 1e-5, 1e-5)) << what;
        EXPECT_TRUE(all_close(dk.download(), k, 1e-5, 1e-5)) << what;
      }
    }
  }
}

// LongRoPE: each token takes the short or the long table by its flag, as the CPU's per-token
// tables.
TEST(CudaKernels, RopeWithPerTokenLongFrequenciesMatchesCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(25);
  const int tokens = 5, heads = 3, kv_heads = 1, head_dim = 64, rotary = 48, half = rotary / 2;
  const std::vector<int32_t> positions = {0, 7, 4000, 4001, 9000};
  const std::vector<int32_t> uses_long = {0, 0, 1, 1, 1};
  std::vector<float> short_freq(half), long_freq(half);
  for (int i = 0; i < half; ++i) {
    short_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rotary));
    long_freq[i] = short_freq[i] / static_cast<float>(1.0 + 0.5 * i);
  }
  std::vector<float> q = random_floats(rng, static_cast<size_t>(tokens) * heads * head_dim);
  std::vector<float> k = random_floats(rng, static_cast<size_t>(tokens) * kv_heads * head_dim);
  DeviceArray<float> dq(q), dk(k), dshort(short_freq), dlong(long_freq);
  DeviceArray<int32_t> dpos(positions), dflags(uses_long);
  std::vector<const float*> per_token;
  for (int32_t flag : uses_long) per_token.push_back(flag ? long_freq.data() : short_freq.data());
  std::vector<float> table(static_cast<size_t>(tokens) * rotary);
  kernels::rope_cos_sin_inv_freq(positions.data(), tokens, rotary, short_freq.data(),
                                 per_token.data(), 1.05f, table.data());
  kernels::rope_rotate_half_partial(q.data(), k.data(), table.data(), tokens, heads, kv_heads,
                                    head_dim, rotary);
  kc::RopeArgs rope;
  rope.rotary_dim = rotary;
  rope.inv_freq = dshort.get();
  rope.inv_freq_long = dlong.get();
  rope.uses_long = dflags.get();
  rope.attention_factor = 1.05f;
  check(kc::rope_rotate_half_partial(dq.get(), dk.get(), dpos.get(), tokens, heads, kv_heads,
                                     head_dim, rope, nullptr),
        "rope");
  EXPECT_TRUE(all_close(dq.download(), q, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(dk.download(), k, 1e-5, 1e-5));
}

TEST(CudaKernels, SplitQkvWithBiasMatchesCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(22);
  const int tokens = 5, q_width = 96, kv_width = 32, width = q_width + 2 * kv_width;
  const std::vector<float> qkv = random_floats(rng, static_cast<size_t>(tokens) * width);
  const std::vector<float> bias = random_floats(rng, width);
  for (bool with_bias : {false, true}) {
    std::vector<float> biased = qkv;
    if (with_bias) kernels::add_bias(biased.data(), bias.data(), tokens, width);
    std::vector<float> q, k, v;
    for (int t = 0; t < tokens; ++t) {
      const float* row = biased.data() + static_cast<size_t>(t) * width;
      q.insert(q.end(), row, row + q_width);
      k.insert(k.end(), row + q_width, row + q_width + kv_width);
      v.insert(v.end(), row + q_width + kv_width, row + width);
    }
    DeviceArray<float> dqkv(qkv), dbias(bias), dq(q.size()), dk(k.size()), dv(v.size());
    check(kc::split_qkv(dqkv.get(), with_bias ? dbias.get() : nullptr, dq.get(), dk.get(), dv.get(),
                        tokens, q_width, kv_width, nullptr),
          "split_qkv");
    EXPECT_TRUE(all_close(dq.download(), q, 0, 1e-7)) << with_bias;
    EXPECT_TRUE(all_close(dk.download(), k, 0, 1e-7)) << with_bias;
    EXPECT_TRUE(all_close(dv.download(), v, 0, 1e-7)) << with_bias;
  }
}

TEST(CudaKernels, GatedActivationsMatchCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(23);
  const int tokens = 7, ffn = 333;
  const std::vector<float> gate_up =
      random_floats(rng, static_cast<size_t>(tokens) * 2 * ffn, -6, 6);
  const std::vector<float> bias = random_floats(rng, 2 * ffn);
  for (auto activation : {kc::GatedActivation::kSilu, kc::GatedActivation::kGeluTanh}) {
    for (bool with_bias : {false, true}) {
      std::vector<float> in = gate_up;
      if (with_bias) kernels::add_bias(in.data(), bias.data(), tokens, 2 * ffn);
      std::vector<float> expected(static_cast<size_t>(tokens) * ffn);
      if (activation == kc::GatedActivation::kSilu) {
        kernels::silu_and_mul_stacked(in.data(), expected.data(), tokens, ffn);
      } else {
        kernels::gelu_tanh_and_mul_stacked(in.data(), expected.data(), tokens, ffn);
      }
      DeviceArray<float> din(gate_up), dbias(bias), dout(expected.size());
      check(kc::gated_activation(din.get(), with_bias ? dbias.get() : nullptr, dout.get(), tokens,
                                 ffn, activation, nullptr),
            "gated_activation");
      EXPECT_TRUE(all_close(dout.download(), expected, 1e-5, 1e-5))
          << (activation == kc::GatedActivation::kSilu ? "silu" : "gelu_tanh") << " bias "
          << with_bias;
    }
  }
}

TEST(CudaKernels, BiasAddScaleAndSoftCapMatchCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(24);
  const int rows = 9, width = 77;
  const size_t n = static_cast<size_t>(rows) * width;
  const std::vector<float> x = random_floats(rng, n, -60, 60);
  const std::vector<float> y = random_floats(rng, n);
  const std::vector<float> bias = random_floats(rng, width);

  std::vector<float> expected = x;
  kernels::add_bias(expected.data(), bias.data(), rows, width);
  DeviceArray<float> dx(x), dy(y), dbias(bias);
  check(kc::add_bias(dx.get(), dbias.get(), rows, width, nullptr), "add_bias");
  EXPECT_TRUE(all_close(dx.download(), expected, 0, 1e-7)) << "add_bias";

  for (size_t i = 0; i < n; ++i) expected[i] += y[i];
  check(kc::add(dx.get(), dy.get(), static_cast<int64_t>(n), nullptr), "add");
  EXPECT_TRUE(all_close(dx.download(), expected, 0, 1e-7)) << "add";

  for (float& v : expected) v *= 0.37f;
  check(kc::scale(dx.get(), static_cast<int64_t>(n), 0.37f, nullptr), "scale");
  EXPECT_TRUE(all_close(dx.download(), expected, 0, 1e-7)) << "scale";

  kernels::soft_cap(expected.data(), static_cast<int64_t>(n), 5.0f);
  check(kc::soft_cap(dx.get(), static_cast<int64_t>(n), 5.0f, nullptr), "soft_cap");
  EXPECT_TRUE(all_close(dx.download(), expected, 1e-6, 1e-5)) << "soft_cap";
  EXPECT_EQ(kc::soft_cap(dx.get(), 1, 0.0f, nullptr), cudaErrorInvalidValue);
}

TEST(CudaKernels, SiluAndMulMatchesCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(3);
  const std::vector<float> gate = random_floats(rng, 100003, -8, 8);
  const std::vector<float> up = random_floats(rng, gate.size(), -2, 2);
  std::vector<float> expected(gate.size());
  kernels::silu_and_mul(gate.data(), up.data(), expected.data(), static_cast<int64_t>(gate.size()));
  DeviceArray<float> dg(gate), du(up), dout(gate.size());
  check(
      kc::silu_and_mul(dg.get(), du.get(), dout.get(), static_cast<int64_t>(gate.size()), nullptr),
      "silu_and_mul");
  EXPECT_TRUE(all_close(dout.download(), expected, 1e-6, 1e-5));
}

TEST(CudaKernels, EmbeddingAndConvertRoundToTheWeightDtype) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(4);
  const int vocab = 50, hidden = 72;
  const std::vector<float> table = random_floats(rng, static_cast<size_t>(vocab) * hidden);
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    // convert_floats makes the table, embedding reads it back as float.
    DeviceArray<float> dtable_f(table);
    DeviceArray<uint8_t> dtable(table.size() * kc::dtype_size(dtype));
    check(kc::convert_floats(dtable_f.get(), dtable.get(), dtype,
                             static_cast<int64_t>(table.size()), nullptr),
          "convert");
    EXPECT_EQ(decode(dtype, dtable.download()), decode(dtype, encode(dtype, table)))
        << kc::dtype_name(dtype);
    DeviceArray<int32_t> dids(ids);
    DeviceArray<float> dout(ids.size() * hidden);
    check(kc::embedding(dids.get(), dtable.get(), dtype, dout.get(), static_cast<int>(ids.size()),
                        hidden, nullptr),
          "embedding");
    std::vector<float> expected;
    for (int32_t id : ids) {
      for (int i = 0; i < hidden; ++i) expected.push_back(round_to(dtype, table[id * hidden + i]));
    }
    EXPECT_EQ(dout.download(), expected) << kc::dtype_name(dtype);
  }
}

TEST(CudaKernels, GatherRows) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(5);
  const int width = 33;
  const std::vector<float> in = random_floats(rng, 10 * width);
  const std::vector<int32_t> rows = {9, 0, 4};
  DeviceArray<float> din(in), dout(rows.size() * width);
  DeviceArray<int32_t> drows(rows);
  check(kc::gather_rows(din.get(), drows.get(), dout.get(), 3, width, nullptr), "gather");
  std::vector<float> expected;
  for (int32_t r : rows)
    expected.insert(expected.end(), in.begin() + r * width, in.begin() + (r + 1) * width);
  EXPECT_EQ(dout.download(), expected);
}

// ---- write_kv + paged attention ----

struct AttentionCase {
  DType dtype;
  int head_dim;
  int block_size;
  int partition_size;  // 0: one pass; else split-K
};

std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const AttentionCase& c = info.param;
  return std::string(kc::dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) + "_b" +
         std::to_string(c.block_size) + "_p" + std::to_string(c.partition_size);
}

class CudaAttention : public ::testing::TestWithParam<AttentionCase> {};

// A batch mixing a decode, a whole prefill, a prefill chunk over cached context and a short
// decode, with K/V scattered over shuffled blocks of a pool full of junk. The new tokens' K/V
// go in through write_kv (checked against host rounding), then attention is compared with the
// CPU twin run over the same rounded cache.
struct Seq {
  int seq_len, q_len;
};

void check_write_kv_and_attention(const AttentionCase& p, const std::vector<Seq>& seqs,
                                  bool use_decode_kernel, int sliding_window = 0,
                                  float logit_softcap = 0.0f) {
  std::mt19937 rng(100 + p.head_dim + p.block_size);
  const int num_kv_heads = 2, group = 3, num_heads = num_kv_heads * group;
  const int hd = p.head_dim, bs = p.block_size;
  const int num_seqs = static_cast<int>(seqs.size());

  int blocks_needed = 0;
  for (const Seq& s : seqs) blocks_needed += (s.seq_len + bs - 1) / bs;
  const int num_blocks = blocks_needed + 7;
  std::vector<int32_t> free_blocks(num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);

  int max_blocks = 0;
  for (const Seq& s : seqs) max_blocks = std::max(max_blocks, (s.seq_len + bs - 1) / bs);
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, num_blocks - 1);
  std::vector<int32_t> qsl = {0}, lens, positions;
  std::vector<int64_t> slots;
  size_t next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const int nb = (seqs[s].seq_len + bs - 1) / bs;
    for (int b = 0; b < nb; ++b) tables[s * max_blocks + b] = free_blocks[next++];
    for (int i = 0; i < seqs[s].q_len; ++i) {
      const int pos = seqs[s].seq_len - seqs[s].q_len + i;
      positions.push_back(pos);
      slots.push_back(static_cast<int64_t>(tables[s * max_blocks + pos / bs]) * bs + pos % bs);
    }
    qsl.push_back(qsl.back() + seqs[s].q_len);
    lens.push_back(seqs[s].seq_len);
  }
  const int num_tokens = qsl.back();
  slots.push_back(-1);  // one padding token that must write nothing

  // The pool starts as junk (already rounded); the CPU copy tracks what the GPU should hold.
  const size_t pool = static_cast<size_t>(num_blocks) * num_kv_heads * bs * hd;
  std::vector<float> key_pool = random_floats(rng, pool), value_pool = random_floats(rng, pool);
  for (float& x : key_pool) x = round_to(p.dtype, x);
  for (float& x : value_pool) x = round_to(p.dtype, x);
  DeviceArray<uint8_t> dkey(encode(p.dtype, key_pool)), dvalue(encode(p.dtype, value_pool));

  const size_t kv_elems = static_cast<size_t>(num_tokens + 1) * num_kv_heads * hd;
  const std::vector<float> new_k = random_floats(rng, kv_elems),
                           new_v = random_floats(rng, kv_elems);
  kc::KvCacheLayout cache;
  cache.key = dkey.get();
  cache.value = dvalue.get();
  cache.dtype = p.dtype;
  cache.num_blocks = num_blocks;
  cache.block_size = bs;
  cache.num_kv_heads = num_kv_heads;
  cache.head_dim = hd;
  DeviceArray<float> dnew_k(new_k), dnew_v(new_v);
  DeviceArray<int64_t> dslots(slots);
  check(kc::write_kv(dnew_k.get(), dnew_v.get(), dslots.get(), num_tokens + 1, cache, nullptr),
        "write_kv");
  std::vector<float> rounded_k(new_k.size()), rounded_v(new_v.size());
  for (size_t i = 0; i < new_k.size(); ++i) rounded_k[i] = round_to(p.dtype, new_k[i]);
  for (size_t i = 0; i < new_v.size(); ++i) rounded_v[i] = round_to(p.dtype, new_v[i]);
  kernels::KvCacheView view{key_pool.data(), value_pool.data(), num_blocks, bs, num_kv_heads, hd};
  kernels::write_kv(rounded_k.data(), rounded_v.data(), slots.data(), num_tokens + 1, view);
  ASSERT_EQ(decode(p.dtype, dkey.download()), key_pool) << "write_kv keys";
  ASSERT_EQ(decode(p.dtype, dvalue.download()), value_pool) << "write_kv values";

  const std::vector<float> query =
      random_floats(rng, static_cast<size_t>(num_tokens) * num_heads * hd, -2, 2);
  std::vector<float> expected(query.size());
  kernels::PagedAttentionParams cpu;
  cpu.query = query.data();
  cpu.out = expected.data();
  cpu.key_cache = key_pool.data();
  cpu.value_cache = value_pool.data();
  cpu.query_start_loc = qsl.data();
  cpu.seq_lens = lens.data();
  cpu.block_tables = tables.data();
  cpu.num_seqs = num_seqs;
  cpu.max_blocks_per_seq = max_blocks;
  cpu.num_heads = num_heads;
  cpu.num_kv_heads = num_kv_heads;
  cpu.head_dim = hd;
  cpu.block_size = bs;
  cpu.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  cpu.sliding_window = sliding_window;
  cpu.logit_softcap = logit_softcap;
  kernels::paged_attention(cpu);

  const std::vector<int32_t> work = kc::attention_work_items(qsl.data(), num_seqs, group);
  DeviceArray<float> dq(query), dout(query.size());
  DeviceArray<int32_t> dqsl(qsl), dlens(lens), dtables(tables), dwork(work);
  int max_seq_len = 0;
  for (const Seq& s : seqs) max_seq_len = std::max(max_seq_len, s.seq_len);
  const int parts = kc::attention_num_partitions(max_seq_len, p.partition_size);
  const size_t partial_rows = static_cast<size_t>(num_tokens) * num_heads * parts;
  DeviceArray<float> pout(partial_rows * hd), pmax(partial_rows), psum(partial_rows);
  kc::AttentionParams gpu;
  gpu.query = dq.get();
  gpu.out = dout.get();
  gpu.cache = cache;
  gpu.query_start_loc = dqsl.get();
  gpu.seq_lens = dlens.get();
  gpu.block_tables = dtables.get();
  gpu.work_items = dwork.get();
  gpu.num_work_items = static_cast<int>(work.size() / 2);
  gpu.num_tokens = num_tokens;
  gpu.num_seqs = num_seqs;
  gpu.use_decode_kernel = use_decode_kernel;
  gpu.max_blocks_per_seq = max_blocks;
  gpu.num_heads = num_heads;
  gpu.scale = cpu.scale;
  gpu.sliding_window = sliding_window;
  gpu.logit_softcap = logit_softcap;
  gpu.max_seq_len = max_seq_len;
  gpu.partition_size = p.partition_size;
  gpu.partial_out = pout.get();
  gpu.partial_max = pmax.get();
  gpu.partial_sum = psum.get();
  check(kc::paged_attention(gpu, nullptr), "paged_attention");
  EXPECT_TRUE(all_close(dout.download(), expected, 1e-4, 1e-4));
}

TEST_P(CudaAttention, WriteKvAndAttentionMatchCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  // A mixed batch always takes the tiled kernel.
  check_write_kv_and_attention(GetParam(), {{70, 1}, {37, 37}, {90, 20}, {5, 1}, {130, 3}}, true);
}

TEST_P(CudaAttention, DecodeBatchMatchesCpuWithBothKernels) {
  PAGEDSERVE_REQUIRE_GPU();
  const std::vector<Seq> decode_seqs = {{70, 1}, {1, 1}, {130, 1}, {33, 1}, {5, 1}, {64, 1}};
  {
    SCOPED_TRACE("decode kernel");
    check_write_kv_and_attention(GetParam(), decode_seqs, true);
  }
  {
    SCOPED_TRACE("tiled kernel");
    check_write_kv_and_attention(GetParam(), decode_seqs, false);
  }
}

// Sliding windows below, at and above the tile and block sizes (partitions wholly before a
// row's window are empty and the merge skips them) and soft caps that bend most scores, on the
// mixed batch (tiled kernel) and a decode batch with both kernels.
TEST_P(CudaAttention, SlidingWindowAndSoftcapMatchCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  const std::vector<Seq> mixed = {{70, 1}, {37, 37}, {90, 20}, {5, 1}, {130, 3}};
  const std::vector<Seq> decode_seqs = {{70, 1}, {1, 1}, {130, 1}, {33, 1}, {5, 1}, {64, 1}};
  for (int window : {1, 7, 32, 40}) {
    for (float cap : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << "sliding_window=" << window << " softcap=" << cap);
      check_write_kv_and_attention(GetParam(), mixed, true, window, cap);
      check_write_kv_and_attention(GetParam(), decode_seqs, true, window, cap);
      check_write_kv_and_attention(GetParam(), decode_seqs, false, window, cap);
    }
  }
  SCOPED_TRACE("softcap alone");
  check_write_kv_and_attention(GetParam(), mixed, true, 0, 1.0f);
  check_write_kv_and_attention(GetParam(), decode_seqs, true, 0, 1.0f);
}

std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> cases;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFp8E4M3}) {
    for (int head_dim : {8, 64, 128, 256}) {
      for (int block_size : {8, 16, 32}) {
        for (int partition : {0, 32}) cases.push_back({dtype, head_dim, block_size, partition});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllShapes, CudaAttention, ::testing::ValuesIn(attention_cases()),
                         case_name);

TEST(CudaKernels, CopyBlocksCopiesEveryBuffer) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(6);
  const int num_blocks = 9;
  for (size_t bytes_per_block : {size_t{512}, size_t{24}}) {  // 16-byte words and single bytes
    std::vector<std::vector<uint8_t>> host(3);
    std::vector<std::unique_ptr<DeviceArray<uint8_t>>> device;
    std::vector<void*> pointers;
    for (auto& h : host) {
      h.resize(num_blocks * bytes_per_block);
      for (uint8_t& b : h) b = static_cast<uint8_t>(rng());
      device.push_back(std::make_unique<DeviceArray<uint8_t>>(h));
      pointers.push_back(device.back()->get());
    }
    const std::vector<int32_t> pairs = {2, 7, 0, 5, 8, 1};
    DeviceArray<void*> dptrs(pointers);
    DeviceArray<int32_t> dpairs(pairs);
    check(kc::copy_blocks(dptrs.get(), 3, dpairs.get(), 3, bytes_per_block, nullptr),
          "copy_blocks");
    for (size_t b = 0; b < host.size(); ++b) {
      std::vector<uint8_t> expected = host[b];
      for (size_t i = 0; i < pairs.size(); i += 2) {
        std::copy_n(host[b].begin() + pairs[i] * bytes_per_block, bytes_per_block,
                    expected.begin() + pairs[i + 1] * bytes_per_block);
      }
      EXPECT_EQ(device[b]->download(), expected) << "buffer " << b;
    }
  }
}

// ---- sampling ----

std::vector<float> random_logits(std::mt19937& rng, int rows, int vocab) {
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (float& x : logits) x = dist(rng);
  // Ties at the top of row 0: the lowest id must win.
  const float top = *std::max_element(logits.begin(), logits.begin() + vocab) + 1.0f;
  logits[17] = top;
  logits[5] = top;
  logits[300] = top;
  return logits;
}

TEST(CudaSampling, ArgmaxAndLogprobsMatchCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(7);
  const int rows = 4, vocab = 32000;
  const std::vector<float> logits = random_logits(rng, rows, vocab);
  DeviceArray<float> dlogits(logits);
  DeviceArray<int32_t> dtokens(rows), drows(std::vector<int32_t>{0, 1, 2, 3});
  DeviceArray<double> dlse(rows);
  DeviceArray<float> dlogprobs(rows);
  check(kc::argmax_rows(dlogits.get(), rows, vocab, dtokens.get(), nullptr), "argmax");
  check(kc::log_sum_exp_rows(dlogits.get(), rows, vocab, dlse.get(), nullptr), "lse");
  check(kc::token_logprobs(dlogits.get(), vocab, dlse.get(), drows.get(), dtokens.get(), rows,
                           dlogprobs.get(), nullptr),
        "token_logprobs");
  const std::vector<int32_t> tokens = dtokens.download();
  const std::vector<float> logprobs = dlogprobs.download();
  model::SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(tokens[0], 5);
  for (int r = 0; r < rows; ++r) {
    std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, vocab);
    EXPECT_EQ(tokens[r], model::sample_token(row, greedy, 0, 0)) << "row " << r;
    EXPECT_NEAR(logprobs[r], model::token_logprob(row, tokens[r]), 1e-5) << "row " << r;
  }
}

TEST(CudaSampling, PenaltiesAndBansMatchCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(8);
  const int vocab = 1000;
  std::vector<float> logits = random_logits(rng, 1, vocab);
  model::SamplingParams params;
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  const std::vector<int32_t> prompt = {1, 2, 3, 17, 999};
  const std::vector<int32_t> output = {3, 3, 40, 17, 500, 3};
  const std::vector<int32_t> banned = {2, 40};
  std::vector<float> expected = logits;
  model::apply_penalties(expected, params, prompt, output);
  for (int32_t id : banned) expected[id] = -INFINITY;

  std::map<int32_t, kc::LogitAdjustment> by_token;
  auto entry = [&](int32_t id) -> kc::LogitAdjustment& {
    kc::LogitAdjustment& a = by_token[id];
    a.token = id;
    a.repetition_penalty = params.repetition_penalty;
    a.presence_penalty = params.presence_penalty;
    a.frequency_penalty = params.frequency_penalty;
    return a;
  };
  for (int32_t id : prompt) entry(id).repeated = 1;
  for (int32_t id : output) entry(id).repeated = 1;
  for (int32_t id : output) ++entry(id).count;
  for (int32_t id : banned) entry(id).banned = 1;
  std::vector<kc::LogitAdjustment> adjustments;
  for (const auto& [id, a] : by_token) adjustments.push_back(a);
  DeviceArray<float> dlogits(logits);
  DeviceArray<kc::LogitAdjustment> dadj(adjustments);
  check(kc::adjust_logits(dlogits.get(), vocab, dadj.get(), static_cast<int>(adjustments.size()),
                          nullptr),
        "adjust_logits");
  EXPECT_EQ(dlogits.download(), expected);
}

// Grammar masks on three of five rows (sparse, dense, and one whose grammar vocabulary is
// shorter than the row), against the CPU twin row by row; unmasked rows stay as they were.
TEST(CudaSampling, TokenBitmaskMatchesCpu) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(9);
  const int rows = 5, vocab = 32003;
  const int words = (vocab + 31) / 32;
  const std::vector<float> logits = random_logits(rng, rows, vocab);
  const std::vector<int32_t> masked_rows = {4, 1, 2};
  const std::vector<int32_t> allowed_ids = {vocab, vocab, 30000};
  const std::vector<double> densities = {0.01, 0.9, 0.5};
  std::vector<uint32_t> bitmasks(masked_rows.size() * words, 0);
  for (size_t m = 0; m < masked_rows.size(); ++m) {
    std::bernoulli_distribution bit(densities[m]);
    for (int i = 0; i < words * 32; ++i) {
      if (bit(rng)) bitmasks[m * words + i / 32] |= 1u << (i % 32);
    }
  }
  std::vector<float> expected = logits;
  for (size_t m = 0; m < masked_rows.size(); ++m) {
    kernels::apply_token_bitmask(expected.data() + static_cast<size_t>(masked_rows[m]) * vocab,
                                 vocab, bitmasks.data() + m * words, allowed_ids[m]);
  }
  DeviceArray<float> dlogits(logits);
  DeviceArray<int32_t> drows(masked_rows), dallowed(allowed_ids);
  DeviceArray<uint32_t> dmasks(bitmasks);
  check(kc::apply_token_bitmask(dlogits.get(), vocab, drows.get(), dmasks.get(), words,
                                dallowed.get(), static_cast<int>(masked_rows.size()), nullptr),
        "apply_token_bitmask");
  EXPECT_EQ(dlogits.download(), expected);
}

struct SortedRows {
  std::vector<float> keys;
  std::vector<int32_t> ids;
};

TEST(CudaSampling, SeededDrawsMatchCpuSampler) {
  PAGEDSERVE_REQUIRE_GPU();
  std::mt19937 rng(9);
  const int vocab = 5000;
  struct Setting {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
  };
  const std::vector<Setting> settings = {{0.7f, 0, 1.0f, 0.0f},     {1.0f, 50, 1.0f, 0.0f},
                                         {1.3f, 0, 0.8f, 0.0f},     {0.9f, 0, 1.0f, 0.1f},
                                         {1.0f, 100, 0.95f, 0.05f}, {2.0f, 3, 0.5f, 0.0f}};
  const int rows = static_cast<int>(settings.size());
  const std::vector<float> logits = random_logits(rng, rows, vocab);
  std::vector<int32_t> seg_rows(rows);
  std::vector<float> seg_temps(rows);
  std::vector<kc::SampleDraw> draws;
  for (int r = 0; r < rows; ++r) {
    seg_rows[r] = r;
    seg_temps[r] = settings[r].temperature;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      kc::SampleDraw d;
      d.segment = r;
      d.row = r;
      d.top_k = settings[r].top_k;
      d.top_p = settings[r].top_p;
      d.min_p = settings[r].min_p;
      d.seed = seed * 7919 + 3;
      d.step = seed % 5;
      draws.push_back(d);
    }
  }
  DeviceArray<float> dlogits(logits);
  DeviceArray<int32_t> dseg_rows(seg_rows);
  DeviceArray<float> dseg_temps(seg_temps);
  const size_t n = static_cast<size_t>(rows) * vocab;
  DeviceArray<float> keys_in(n), keys_out(n);
  DeviceArray<int32_t> ids_in(n), ids_out(n), offsets(rows + 1);
  const size_t temp_bytes = kc::sort_temp_bytes(rows, vocab);
  DeviceArray<uint8_t> temp(temp_bytes);
  kc::SortBuffers sort{keys_in.get(), keys_out.get(), ids_in.get(), ids_out.get(),
                       offsets.get(), temp.get(),     temp_bytes};
  check(kc::sort_segments(dlogits.get(), vocab, dseg_rows.get(), dseg_temps.get(), rows, sort,
                          nullptr),
        "sort_segments");
  DeviceArray<double> dlse(rows);
  check(kc::log_sum_exp_rows(dlogits.get(), rows, vocab, dlse.get(), nullptr), "lse");
  DeviceArray<kc::SampleDraw> ddraws(draws);
  DeviceArray<int32_t> dtokens(draws.size());
  DeviceArray<float> dlogprobs(draws.size());
  check(kc::sample_sorted(keys_out.get(), ids_out.get(), vocab, ddraws.get(),
                          static_cast<int>(draws.size()), dlogits.get(), dlse.get(), dtokens.get(),
                          dlogprobs.get(), nullptr),
        "sample_sorted");

  // The sort itself: descending by logit / T, ties by ascending id.
  const std::vector<int32_t> sorted_ids = ids_out.download();
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> expected(vocab);
    std::iota(expected.begin(), expected.end(), 0);
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    const float t = settings[r].temperature;
    std::stable_sort(expected.begin(), expected.end(),
                     [&](int32_t a, int32_t b) { return row[a] / t > row[b] / t; });
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), sorted_ids.begin() + r * vocab))
        << "row " << r;
  }
  const std::vector<int32_t> tokens = dtokens.download();
  const std::vector<float> logprobs = dlogprobs.download();
  for (size_t d = 0; d < draws.size(); ++d) {
    const Setting& s = settings[draws[d].row];
    model::SamplingParams params;
    params.temperature = s.temperature;
    params.top_k = s.top_k;
    params.top_p = s.top_p;
    params.min_p = s.min_p;
    std::span<const float> row(logits.data() + static_cast<size_t>(draws[d].row) * vocab, vocab);
    const int32_t expected = model::sample_token(row, params, draws[d].seed, draws[d].step);
    EXPECT_EQ(tokens[d], expected) << "draw " << d << " (row " << draws[d].row << ")";
    EXPECT_NEAR(logprobs[d], model::token_logprob(row, tokens[d]), 1e-5) << "draw " << d;
  }
}

}  // namespace
}  // namespace pagedserve::cuda_testing
