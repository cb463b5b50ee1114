// CudaExecutor's sampling: penalties, bans and grammar masks applied to the logits, greedy
// rows by argmax, the others by a sort and a seeded draw, and logprobs, with the CPU sampler's
// semantics (docs/cuda.md).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "actors/cuda/cuda_executor_impl.h"

namespace pagedserve::actors {
namespace {

using namespace cuda_detail;

// The grammar masks of a step's constrained rows (structured outputs), computed on the host
// while the device still runs the forward pass, and applied by kc::apply_token_bitmask before
// any other sampling kernel reads the logits.
struct StepMasks {
  int words_per_row = 0;
  std::vector<int32_t> rows;
  std::vector<int32_t> allowed_ids;
  std::vector<uint32_t> words;  // [rows.size(), words_per_row]

  // Adds row `row`'s mask from `state` (synced to the sequence's output). Returns whether the
  // row's banned tokens still apply: not when the grammar allows only banned tokens (it is
  // complete and EOS is banned), where the grammar wins, as in the CPU sampler.
  bool add(const GrammarRowState& state, const ScheduledSequence& seq, int row, int vocab) {
    thread_local std::vector<uint32_t> mask;
    if (!next_token_bitmask(state, tokens_after(*seq.sampling, seq.sample_step), mask)) {
      return true;  // broken, terminated or nothing allowed: sampled unconstrained
    }
    const int allowed = static_cast<int>(std::min<size_t>(state.vocab_size, vocab));
    rows.push_back(row);
    allowed_ids.push_back(allowed);
    const size_t first = words.size();
    words.resize(first + words_per_row, 0);
    std::copy_n(mask.begin(), std::min<size_t>(mask.size(), words_per_row), words.begin() + first);
    const auto is_allowed = [&](int32_t id) {
      return id >= 0 && id < allowed && ((mask[id / 32] >> (id % 32)) & 1u) != 0;
    };
    for (int32_t id = 0; id < allowed; ++id) {
      if (is_allowed(id) && std::find(seq.banned_token_ids.begin(), seq.banned_token_ids.end(),
                                      id) == seq.banned_token_ids.end()) {
        return true;
      }
    }
    return false;
  }
};

}  // namespace

StepOutput CudaExecutor::Impl::sample(const StepInput& input, int num_rows) {
  const auto sample_start = std::chrono::steady_clock::now();
  const int vocab = config.vocab_size;
  StepOutput output;
  output.step_id = input.step_id;
  output.seqs.resize(input.seqs.size());
  if (num_rows == 0) {
    // Nothing to sample (prompt chunks only); still finish the step, so the next one may reuse
    // the pinned staging buffers and errors surface here.
    finish_step(output, sample_start);
    return output;
  }

  // Penalties and bans, one entry per (row, token).
  std::vector<kc::LogitAdjustment> adjustments;
  // Sort segments: non-greedy sampling rows (scaled by temperature) and top-logprob rows (raw).
  std::vector<int32_t> seg_rows;
  std::vector<float> seg_temperatures;
  std::vector<kc::SampleDraw> draws;
  struct TopRequest {
    size_t seq;
    int segment;
    int row;
    int k;
  };
  std::vector<TopRequest> tops;
  StepMasks masks;
  masks.words_per_row = static_cast<int>(model::grammar::bitmask_words(vocab));
  std::vector<GrammarRowState*> row_grammars;  // [row], null when unconstrained
  int row = 0;
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& seq = input.seqs[i];
    if (!seq.sample) continue;
    if (!seq.sampling) {
      throw std::invalid_argument("CudaExecutor: sequence " + std::to_string(seq.seq_id) +
                                  " samples but has no sampling params");
    }
    const model::SamplingParams& p = *seq.sampling;
    GrammarRowState* grammar = p.grammar ? &grammars.sync(seq, input.step_id) : nullptr;
    row_grammars.push_back(grammar);
    const bool bans_apply = grammar == nullptr || masks.add(*grammar, seq, row, vocab);
    if ((bans_apply && !seq.banned_token_ids.empty()) || p.has_penalties()) {
      std::map<int32_t, kc::LogitAdjustment> by_token;
      auto entry = [&](int32_t id) -> kc::LogitAdjustment& {
        kc::LogitAdjustment& a = by_token[id];
        a.row = row;
        a.token = id;
        a.repetition_penalty = p.repetition_penalty;
        a.presence_penalty = p.presence_penalty;
        a.frequency_penalty = p.frequency_penalty;
        return a;
      };
      auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
      if (p.repetition_penalty != 1.0f) {
        for (int32_t id : seq.penalty_prompt_ids)
          if (in_vocab(id)) entry(id).repeated = 1;
        for (int32_t id : seq.penalty_output_ids)
          if (in_vocab(id)) entry(id).repeated = 1;
      }
      if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        for (int32_t id : seq.penalty_output_ids)
          if (in_vocab(id)) ++entry(id).count;
      }
      if (bans_apply) {
        for (int32_t id : seq.banned_token_ids)
          if (in_vocab(id)) entry(id).banned = 1;
      }
      for (const auto& [id, a] : by_token) adjustments.push_back(a);
    }
    if (!p.is_greedy() && !seq.sample_seeds.empty()) {
      const int segment = static_cast<int>(seg_rows.size());
      seg_rows.push_back(row);
      seg_temperatures.push_back(p.temperature);
      for (uint64_t seed : seq.sample_seeds) {
        kc::SampleDraw d;
        d.segment = segment;
        d.row = row;
        d.top_k = p.top_k;
        d.top_p = p.top_p;
        d.min_p = p.min_p;
        d.seed = seed;
        d.step = seq.sample_step;
        draws.push_back(d);
      }
    }
    if (seq.num_top_logprobs > 0) {
      tops.push_back(
          {i, static_cast<int>(seg_rows.size()), row, std::min(seq.num_top_logprobs, vocab)});
      seg_rows.push_back(row);
      seg_temperatures.push_back(1.0f);
    }
    ++row;
  }

  grammars.prune(input.step_id);

  const int num_segments = static_cast<int>(seg_rows.size());
  const int num_draws = static_cast<int>(draws.size());
  reserve_sort(num_segments);
  draw_tokens.reserve(std::max<size_t>(draws.size(), 1) * 4);
  draw_logprobs.reserve(std::max<size_t>(draws.size(), 1) * 4);

  UploadPack pack;
  const size_t off_adj = pack.add(adjustments);
  const size_t off_seg_rows = pack.add(seg_rows);
  const size_t off_seg_temps = pack.add(seg_temperatures);
  const size_t off_draws = pack.add(draws);
  std::vector<int32_t> all_rows(num_rows);
  for (int r = 0; r < num_rows; ++r) all_rows[r] = r;
  const size_t off_all_rows = pack.add(all_rows);
  const size_t off_mask_rows = pack.add(masks.rows);
  const size_t off_mask_allowed = pack.add(masks.allowed_ids);
  const size_t off_mask_words = pack.add(masks.words);
  pack.upload(sample_metadata_pinned, sample_metadata, compute);
  const char* md = sample_metadata.get<char>();

  float* lg = logits.get<float>();
  check_cuda(kc::apply_token_bitmask(
                 lg, vocab, reinterpret_cast<const int32_t*>(md + off_mask_rows),
                 reinterpret_cast<const uint32_t*>(md + off_mask_words), masks.words_per_row,
                 reinterpret_cast<const int32_t*>(md + off_mask_allowed),
                 static_cast<int>(masks.rows.size()), compute),
             "apply_token_bitmask");
  check_cuda(
      kc::adjust_logits(lg, vocab, reinterpret_cast<const kc::LogitAdjustment*>(md + off_adj),
                        static_cast<int>(adjustments.size()), compute),
      "adjust_logits");
  double* lse_d = lse.get<double>();
  check_cuda(kc::log_sum_exp_rows(lg, num_rows, vocab, lse_d, compute), "log_sum_exp_rows");
  int32_t* argmax_d = argmax_tokens.get<int32_t>();
  check_cuda(kc::argmax_rows(lg, num_rows, vocab, argmax_d, compute), "argmax_rows");
  check_cuda(
      kc::token_logprobs(lg, vocab, lse_d, reinterpret_cast<const int32_t*>(md + off_all_rows),
                         argmax_d, num_rows, greedy_logprobs.get<float>(), compute),
      "token_logprobs");
  kc::SortBuffers sort;
  sort.keys_in = sort_keys_in.get<float>();
  sort.keys_out = sort_keys_out.get<float>();
  sort.ids_in = sort_ids_in.get<int32_t>();
  sort.ids_out = sort_ids_out.get<int32_t>();
  sort.offsets = sort_offsets.get<int32_t>();
  sort.temp = sort_temp.get();
  sort.temp_bytes = sort_temp.bytes();
  check_cuda(kc::sort_segments(lg, vocab, reinterpret_cast<const int32_t*>(md + off_seg_rows),
                               reinterpret_cast<const float*>(md + off_seg_temps), num_segments,
                               sort, compute),
             "sort_segments");
  check_cuda(
      kc::sample_sorted(sort.keys_out, sort.ids_out, vocab,
                        reinterpret_cast<const kc::SampleDraw*>(md + off_draws), num_draws, lg,
                        lse_d, draw_tokens.get<int32_t>(), draw_logprobs.get<float>(), compute),
      "sample_sorted");

  // Results back to the host: argmax tokens and their logprobs, draws, lse, top candidates.
  size_t top_total = 0;
  for (const TopRequest& t : tops) top_total += t.k;
  const size_t results_bytes = num_rows * (4 + 4 + 8) + draws.size() * 8 + top_total * 8 + 64;
  results_pinned.reserve(results_bytes);
  char* res = results_pinned.get();
  int32_t* h_argmax = reinterpret_cast<int32_t*>(res);
  float* h_greedy_lp = reinterpret_cast<float*>(h_argmax + num_rows);
  double* h_lse = reinterpret_cast<double*>(res + ((num_rows * 8 + 7) / 8) * 8);
  int32_t* h_draw_tokens = reinterpret_cast<int32_t*>(h_lse + num_rows);
  float* h_draw_lp = reinterpret_cast<float*>(h_draw_tokens + draws.size());
  float* h_top_keys = h_draw_lp + draws.size();
  int32_t* h_top_ids = reinterpret_cast<int32_t*>(h_top_keys + top_total);
  auto d2h = [this](void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute),
               "cudaMemcpyAsync (results)");
  };
  d2h(h_argmax, argmax_d, num_rows * 4);
  d2h(h_greedy_lp, greedy_logprobs.get(), num_rows * 4);
  d2h(h_lse, lse_d, num_rows * 8);
  d2h(h_draw_tokens, draw_tokens.get(), draws.size() * 4);
  d2h(h_draw_lp, draw_logprobs.get(), draws.size() * 4);
  size_t top_offset = 0;
  for (const TopRequest& t : tops) {
    const size_t seg = static_cast<size_t>(t.segment) * vocab;
    d2h(h_top_keys + top_offset, sort.keys_out + seg, t.k * 4);
    d2h(h_top_ids + top_offset, sort.ids_out + seg, t.k * 4);
    top_offset += t.k;
  }
  const auto results_start = finish_step(output, sample_start);

  row = 0;
  size_t draw = 0;
  top_offset = 0;
  size_t top_index = 0;
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& seq = input.seqs[i];
    if (!seq.sample) continue;
    SequenceStepOutput& out = output.seqs[i];
    if (seq.sampling->is_greedy()) {
      for (size_t n = 0; n < seq.sample_seeds.size(); ++n) {
        out.samples.push_back({h_argmax[row], h_greedy_lp[row]});
      }
    } else {
      for (size_t n = 0; n < seq.sample_seeds.size(); ++n, ++draw) {
        out.samples.push_back({h_draw_tokens[draw], h_draw_lp[draw]});
      }
    }
    if (row_grammars[row] != nullptr) {
      out.grammar_ended = advance_on_draws(*row_grammars[row], out.samples);
    }
    if (top_index < tops.size() && tops[top_index].seq == i) {
      const TopRequest& t = tops[top_index++];
      for (int n = 0; n < t.k; ++n) {
        out.top_logprobs.push_back(
            {h_top_ids[top_offset + n],
             static_cast<float>(static_cast<double>(h_top_keys[top_offset + n]) - h_lse[row])});
      }
      top_offset += t.k;
    }
    ++row;
  }
  times.host_results_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - results_start).count();
  return output;
}

// The step's last wait: everything enqueued so far (forward, sampling, result copies) done.
std::chrono::steady_clock::time_point CudaExecutor::Impl::finish_step(
    StepOutput& output, std::chrono::steady_clock::time_point sample_start) {
  using Clock = std::chrono::steady_clock;
  const auto wait_start = Clock::now();
  check_cuda(cudaEventRecord(step_end, compute), "cudaEventRecord (step end)");
  check_cuda(cudaStreamSynchronize(compute), "cudaStreamSynchronize (step)");
  const auto waited = Clock::now();
  float forward_ms = 0, sampling_ms = 0;
  check_cuda(cudaEventElapsedTime(&forward_ms, forward_start, forward_end),
             "cudaEventElapsedTime (forward)");
  check_cuda(cudaEventElapsedTime(&sampling_ms, forward_end, step_end),
             "cudaEventElapsedTime (sampling)");
  ++times.steps;
  times.host_sample_s += std::chrono::duration<double>(wait_start - sample_start).count();
  times.wait_s += std::chrono::duration<double>(waited - wait_start).count();
  times.gpu_forward_s += forward_ms / 1e3;
  times.gpu_sampling_s += sampling_ms / 1e3;
  output.times.forward_s = forward_ms / 1e3;
  output.times.sampling_s = sampling_ms / 1e3;
  return waited;
}

}  // namespace pagedserve::actors
