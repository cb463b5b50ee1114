// The sampler's bucketed row (sampler.cpp): one logits row at a temperature, put into 256
// buckets by each token's distance below the maximum (kernels::exp_histogram), each bucket
// knowing its mass. The sampler's walks over the sorted order step over whole buckets; a bucket
// they must look into is opened: its candidates are split again into sub-buckets by the same
// distance, each with its exact (double) mass, so that the walks step over whole sub-buckets
// too and sort only the few sub-buckets where a cut or a draw lands. A flat 128k row (a random
// model's) holds thousands of tokens per bucket; sorting a whole one cost a fifth of a draw.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/sampling_rows.h"

namespace pagedserve::model::sampling {

struct Candidate {
  float logit;  // scaled by the temperature
  int32_t id;
};

// The sorted definition's order: higher scaled logit first, ties by lower id. A function
// object, so that std::sort inlines it (a function pointer costs a third of the time of
// sorting an opened bucket).
struct ByLogitDesc {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};
inline constexpr ByLogitDesc by_logit_desc;

inline constexpr int kNumBuckets = 256;
// An opened bucket's sub-buckets: a flat 128k row's ~2000 tokens per bucket become a few dozen
// per sub-bucket, cheap to sort.
inline constexpr int kNumSubBuckets = 64;

enum class Masses {
  kNone,    // counts only (top-k)
  kSingle,  // float exps: fast, each decision checked against their error bound
  kDouble,  // double exps: what the sorted definition computes, up to rounding
};

// One row's histogram at a temperature, and the buckets opened so far. Positions inside an
// opened bucket index its candidates grouped by sub-bucket (sub-bucket s holds positions
// [sub_begin(b, s), sub_end(b, s))). Sub-buckets go down the distribution as buckets do and
// equal logits share one, so once the sub-buckets a walk reads are sorted, positions follow the
// sorted definition's order within the bucket. Uses per-thread scratch: one row at a time per
// thread.
struct OpenedBucket;
struct RowScratch;

class BucketedRow {
 public:
  BucketedRow(std::span<const float> logits, float temperature, kernels::RowRange range,
              Masses masses);

  // a < b for two shares of the row. With approximate masses, a comparison closer than their
  // error could go the other way exactly: the row is then marked undecided (and redone).
  bool less(double a, double b);
  // What a step over a whole bucket or sub-bucket must clear (shares are at most ~1).
  double slack() const;
  void mark_undecided() { undecided_ = undecided_ || tolerance_ > 0.0; }
  bool undecided() const { return undecided_; }

  double total() const { return total_; }           // sum of exp(scaled - max_scaled)
  int32_t count(int b) const { return count_[b]; }  // counts-only rows (top-k)
  // Whether bucket b holds a token that can be drawn (masses) or any token (counts only).
  bool occupied(int b) const { return has_mass_ ? mass_[b] > 0.0 : count_[b] > 0; }
  double prob(int b) const { return mass_[b] / total_; }  // the bucket's share
  double prob(const Candidate& c) const;                  // as the sorted definition has it
  // Every element of bucket b is at least this fraction of the maximum's probability; nothing
  // is promised for the last bucket.
  double min_ratio(int b) const;

  // Every candidate in buckets [lo, hi], unsorted (a scratch buffer, valid until the next call).
  std::vector<Candidate>& gather(int lo, int hi);

  // ---- opened buckets (each opened once per row, on first use) ----
  size_t size(int b);  // bucket b's candidate count
  size_t sub_begin(int b, int s);
  size_t sub_end(int b, int s);
  // Sub-bucket s's share, from double exps summed in another order than the element walk's.
  double sub_prob(int b, int s);
  // As min_ratio, for sub-bucket s of bucket b.
  double sub_min_ratio(int b, int s) const;
  std::span<const Candidate> sub_sorted(int b, int s);  // sub-bucket s, sorted
  const Candidate& at(int b, size_t position);          // sorts its sub-bucket first

 private:
  OpenedBucket& open(int b);
  // Lower bound on exp(-distance) for an element whose float gap (the histogram's units) is
  // below `gap`.
  double ratio_below_gap(double gap) const;

  std::span<const float> logits_;
  float temperature_;
  float max_scaled_;
  float per_unit_;
  RowScratch& scratch_;
  bool has_mass_ = false;
  double tolerance_ = 0.0;      // relative error of compared shares (0: exact up to rounding)
  double tolerance_abs_ = 0.0;  // and absolute
  bool undecided_ = false;
  std::array<int32_t, kNumBuckets> count_{};
  std::array<double, kNumBuckets> mass_{};
  double total_ = 0.0;
};

}  // namespace pagedserve::model::sampling
