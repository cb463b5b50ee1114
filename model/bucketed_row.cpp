#include "model/bucketed_row.h"

#include <algorithm>
#include <cmath>

namespace pagedserve::model::sampling {
namespace {

// Scaled logits further than this below the maximum (e^-48 ~ 1e-21 of its probability) share
// the last bucket; a narrower row spreads its whole range over the buckets.
constexpr float kMaxBucketedGap = 48.0f;
// Bucket masses are summed in another order than the element-by-element walk; a cut or a draw
// within this of a bucket's edge opens the bucket instead of stepping over it.
constexpr double kSlack = 1e-9;

float buckets_per_unit(kernels::RowRange range, float temperature) {
  const float spread = std::min((range.max - range.min) / temperature, kMaxBucketedGap);
  return static_cast<float>(kNumBuckets - 1) / std::max(spread, 1e-3f);
}

}  // namespace

// One opened bucket: its candidates grouped by sub-bucket, each group sorted and its mass
// summed only once a walk asks (a walk stops in one sub-bucket and never reads past it).
struct OpenedBucket {
  std::vector<Candidate> items;
  std::array<uint32_t, kNumSubBuckets + 1> begin{};
  std::array<double, kNumSubBuckets> mass{};  // < 0: not summed yet
  std::array<bool, kNumSubBuckets> sorted{};
};

// Per-thread buffers: rows are sampled on the thread pool, one row at a time per thread.
struct RowScratch {
  std::vector<uint8_t> bucket;
  std::vector<int32_t> ids;
  std::vector<Candidate> candidates;
  std::vector<uint8_t> sub;                         // each gathered candidate's sub-bucket
  std::array<int16_t, kNumBuckets> slot{};          // bucket -> pool index, -1: not opened
  std::vector<std::unique_ptr<OpenedBucket>> pool;  // kept across rows for their capacity
  size_t used = 0;
};

namespace {
RowScratch& row_scratch() {
  thread_local RowScratch scratch;
  return scratch;
}
}  // namespace

BucketedRow::BucketedRow(std::span<const float> logits, float temperature, kernels::RowRange range,
                         Masses masses)
    : logits_(logits),
      temperature_(temperature),
      max_scaled_(range.max / temperature),
      per_unit_(buckets_per_unit(range, temperature)),
      scratch_(row_scratch()) {
  // Float masses: sums of terms each within e of the exact ones, so the total and every
  // cumulative sum of bucket masses within e of theirs (to first order; the bound's 3 ulp for
  // the exp, 1.32 measured, covers the second-order terms and the double roundings). Every
  // comparison the walks make is of two shares over the same total, whose error then cancels:
  // a draw's target against a cumulative share (two numerators within e: the comparison within
  // e of each, 2e of the larger), a cumulative share against top-p (numerator and total: 2e).
  // Min-p compares an element's exact exp with min_p * exp(0) over that total: exact, as in
  // double (find_cut). Terms past the bucketed range (gap > kMaxBucketedGap) are below e^-48
  // of the max's and move a share by < 1e-15 in all; the 1e-15 covers them. (Only the AVX-512
  // kernel has the single-precision path.)
  if (masses == Masses::kSingle && kernels::best_isa() == kernels::Isa::kAvx512) {
    const double max_gap = (kNumBuckets - 1) / static_cast<double>(per_unit_);
    tolerance_ = 2.0 * kernels::single_precision_exp_error(max_gap);
    tolerance_abs_ = 1e-15;
  }
  scratch_.bucket.resize(logits.size());
  scratch_.slot.fill(-1);
  scratch_.used = 0;
  kernels::ExpHistogramParams p;
  p.logits = logits.data();
  p.n = static_cast<int64_t>(logits.size());
  p.temperature = temperature;
  p.max_scaled = max_scaled_;
  p.buckets_per_unit = per_unit_;
  p.num_buckets = kNumBuckets;
  p.bucket = scratch_.bucket.data();
  // With masses, a bucket is occupied when its mass is positive (a token with probability 0
  // is never drawn), so the counts are skipped: they cost the histogram a store per element.
  p.bucket_count = masses == Masses::kNone ? count_.data() : nullptr;
  p.bucket_mass = masses == Masses::kNone ? nullptr : mass_.data();
  p.single_precision = masses == Masses::kSingle;
  has_mass_ = masses != Masses::kNone;
  total_ = kernels::exp_histogram(p);
}

bool BucketedRow::less(double a, double b) {
  if (std::fabs(a - b) <= tolerance_ * std::max(std::fabs(a), std::fabs(b)) + tolerance_abs_) {
    undecided_ = true;
  }
  return a < b;
}

double BucketedRow::slack() const { return kSlack + tolerance_ + tolerance_abs_; }

double BucketedRow::prob(const Candidate& c) const {
  return std::exp(static_cast<double>(c.logit) - static_cast<double>(max_scaled_)) / total_;
}

// An element's float gap g = (max_scaled - scaled) * per_unit rounds twice (relative 2^-24
// each), so its distance below the max is under gap / per_unit * (1 + 1.2e-7); gaps are at
// most kMaxBucketedGap = 48 nats below the last bucket, so the factor 1 - 1e-5 covers that
// rounding (5.7e-6 at 48 nats) and the double exp's.
double BucketedRow::ratio_below_gap(double gap) const {
  return std::exp(-gap / per_unit_) * (1.0 - 1e-5);
}

double BucketedRow::min_ratio(int b) const {
  return b == kNumBuckets - 1 ? 0.0 : ratio_below_gap(b + 1);
}

double BucketedRow::sub_min_ratio(int b, int s) const {
  if (b == kNumBuckets - 1) return 0.0;
  // The last sub-bucket also takes any gap rounded past its edge (see open).
  if (s == kNumSubBuckets - 1) return min_ratio(b);
  return ratio_below_gap(b + static_cast<double>(s + 1) / kNumSubBuckets);
}

std::vector<Candidate>& BucketedRow::gather(int lo, int hi) {
  scratch_.ids.resize(logits_.size());
  const int64_t n = kernels::collect_buckets(
      scratch_.bucket.data(), static_cast<int64_t>(logits_.size()), lo, hi, scratch_.ids.data());
  std::vector<Candidate>& out = scratch_.candidates;
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = scratch_.ids[static_cast<size_t>(i)];
    out[static_cast<size_t>(i)] = {logits_[static_cast<size_t>(id)] / temperature_, id};
  }
  return out;
}

OpenedBucket& BucketedRow::open(int b) {
  RowScratch& sc = scratch_;
  if (sc.slot[b] >= 0) return *sc.pool[static_cast<size_t>(sc.slot[b])];
  if (sc.used == sc.pool.size()) sc.pool.push_back(std::make_unique<OpenedBucket>());
  OpenedBucket& o = *sc.pool[sc.used];
  sc.slot[b] = static_cast<int16_t>(sc.used++);

  // Each candidate's sub-bucket: the histogram's gap by the same float operations (in
  // [b, b + 1) for bucket b; the last bucket's are all clamped to 255, one sub-bucket), its
  // fraction scaled to the sub-buckets (exact: a power of two), truncated and clamped. Each
  // step is monotone in the logit, so a higher logit never lands in a later sub-bucket, and
  // equal logits share one: the sorted sub-buckets laid end to end are the sorted bucket.
  const std::vector<Candidate>& gathered = gather(b, b);
  const size_t n = gathered.size();
  sc.sub.resize(n);
  std::array<uint32_t, kNumSubBuckets> count{};
  const float last = static_cast<float>(kNumBuckets - 1);
  const float bucket_start = static_cast<float>(b);
  for (size_t i = 0; i < n; ++i) {
    const float raw = (max_scaled_ - gathered[i].logit) * per_unit_;
    const float gap = raw < last ? raw : last;  // as the kernel's min: NaN to the last bucket
    const int s =
        std::clamp(static_cast<int>((gap - bucket_start) * kNumSubBuckets), 0, kNumSubBuckets - 1);
    sc.sub[i] = static_cast<uint8_t>(s);
    ++count[static_cast<size_t>(s)];
  }
  o.begin[0] = 0;
  for (int s = 0; s < kNumSubBuckets; ++s) o.begin[s + 1] = o.begin[s] + count[s];
  std::array<uint32_t, kNumSubBuckets> next;
  std::copy(o.begin.begin(), o.begin.end() - 1, next.begin());
  o.items.resize(n);
  for (size_t i = 0; i < n; ++i) o.items[next[sc.sub[i]]++] = gathered[i];
  o.mass.fill(-1.0);
  o.sorted.fill(false);
  return o;
}

size_t BucketedRow::size(int b) { return open(b).items.size(); }
size_t BucketedRow::sub_begin(int b, int s) { return open(b).begin[s]; }
size_t BucketedRow::sub_end(int b, int s) { return open(b).begin[s + 1]; }

double BucketedRow::sub_prob(int b, int s) {
  OpenedBucket& o = open(b);
  if (o.mass[s] < 0.0) {
    // The terms the element walk would add, std::exp in double (only the order differs).
    double mass = 0.0;
    for (uint32_t i = o.begin[s]; i < o.begin[s + 1]; ++i) {
      mass += std::exp(static_cast<double>(o.items[i].logit) - static_cast<double>(max_scaled_));
    }
    o.mass[s] = mass;
  }
  return o.mass[s] / total_;
}

std::span<const Candidate> BucketedRow::sub_sorted(int b, int s) {
  OpenedBucket& o = open(b);
  const auto first = o.items.begin() + o.begin[s];
  const auto end = o.items.begin() + o.begin[s + 1];
  if (!o.sorted[s]) {
    std::sort(first, end, by_logit_desc);
    o.sorted[s] = true;
  }
  return {first, end};
}

const Candidate& BucketedRow::at(int b, size_t position) {
  OpenedBucket& o = open(b);
  // The sub-bucket holding `position`: the last one that begins at or before it.
  const auto it = std::upper_bound(o.begin.begin() + 1, o.begin.end(), position);
  const int s = static_cast<int>(it - o.begin.begin()) - 1;
  return sub_sorted(b, s)[position - o.begin[s]];
}

}  // namespace pagedserve::model::sampling
