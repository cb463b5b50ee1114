#include "model/band_walk.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/exp_band.h"

namespace pagedserve::model::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A group of at most this many elements is sorted and walked one by one; a larger one is split
// into kSplit groups by gap, stepped over like the bucketed row's sub-buckets.
constexpr size_t kWalkDirect = 48;
constexpr int kSplit = 64;
constexpr int kMaxDepth = 3;

// A part of a band larger than this is narrowed before it is split into groups (the split's
// per-element scatter costs ~10 cycles an element; a narrowing pass ~1).
constexpr size_t kNarrowed = 256;
// Narrowing: kSamples elements, evenly spaced in id order (random in gap order), estimate
// where the target falls; the part kept reaches kMarginSamples samples past that on each side,
// about three standard errors of the estimate (its binomial spread is at most
// sqrt(kSamples) / 2 samples), so ~3/8 of the part is kept a step and the target is rarely
// outside it (then the walk goes on to the parts before or after: slower, never wrong).
constexpr size_t kSamples = 64;
constexpr size_t kMarginSamples = 12;
constexpr int kMaxNarrowDepth = 12;

// Elements of a band whose gaps fill some range [a, b), in id order.
struct Part {
  std::span<const float> scaled;
  std::span<const double> mass;
  std::span<const int32_t> ids;
  size_t size() const { return ids.size(); }
};

struct PartStore {
  std::vector<float> scaled;
  std::vector<double> mass;
  std::vector<int32_t> ids;

  // The elements of `from` whose gap lies in [lo, hi), with the sums of the masses before and
  // in that range.
  Part collect(const Part& from, float max_scaled, float lo, float hi,
               kernels::GapSplit* sums = nullptr) {
    const size_t room = from.size() + 8;  // whole vectors are stored
    if (scaled.size() < room) {
      scaled.resize(room);
      mass.resize(room);
      ids.resize(room);
    }
    const kernels::GapSplit split = kernels::split_by_gap(
        from.scaled.data(), from.mass.data(), from.ids.data(), static_cast<int64_t>(from.size()),
        max_scaled, lo, hi, scaled.data(), mass.data(), ids.data());
    if (sums != nullptr) *sums = split;
    const size_t n = static_cast<size_t>(split.count);
    return {std::span(scaled).first(n), std::span(mass).first(n), std::span(ids).first(n)};
  }
};

struct WalkScratch {
  std::vector<Member> members;
  std::array<std::vector<Member>, kMaxDepth - 1> split;  // walk_group's, one per depth 1, 2, ...
  std::array<std::array<PartStore, 2>, kMaxNarrowDepth> narrowed;  // per depth: kept, other
  PartStore band;  // one band's elements when the pass collected two
};

WalkScratch& scratch() {
  thread_local WalkScratch s;
  return s;
}

// The sorted definition on the group's elements: sort, add each one's exact share (std::exp in
// double, as the definition), stop where the target falls.
int32_t walk_elements(Row& row, std::span<Member> group, double& cumulative) {
  std::sort(group.begin(), group.end(), before_in_order);
  for (const Member& m : group) {
    cumulative += std::exp(static_cast<double>(m.scaled) - row.max_scaled) / row.total;
    const bool here = row.lands_at(cumulative);
    if (row.undecided) return kUndecided;
    if (!here) continue;
    // Past the cut's last token: only the masses' rounding puts a draw there.
    if (row.last_kept != nullptr && before_in_order(*row.last_kept, m)) return kUndecided;
    if (row.min_p > 0.0 && std::exp(static_cast<double>(m.scaled) - row.max_scaled) < row.min_p) {
      return kUndecided;
    }
    row.landed = m;
    row.landed_cumulative = cumulative;
    return m.id;
  }
  return kContinue;
}

// The kSplit groups of gaps in [lo, lo + kSplit / scale): each step monotone in the scaled
// logit, so the groups laid end to end follow the sorted order and equal logits share one. The
// position is clamped as a float (a gap rounded past the range, or a tiny range's huge scale,
// must not overflow the conversion).
int group_of(float gap, float lo, float scale) {
  return static_cast<int>(std::clamp((gap - lo) * scale, 0.0f, static_cast<float>(kSplit - 1)));
}

// Splits a group by gap, steps over whole sub-groups that end clear of the target and walks
// into the one where it falls.
int32_t walk_group(Row& row, std::span<Member> group, double& cumulative, int depth) {
  if (group.empty()) return kContinue;
  float lo = kInf;
  float hi = -kInf;
  for (const Member& m : group) {
    lo = std::min(lo, m.gap);
    hi = std::max(hi, m.gap);
  }
  if (group.size() <= kWalkDirect || depth == kMaxDepth || !(hi > lo)) {
    return walk_elements(row, group, cumulative);
  }
  const float scale = static_cast<float>(kSplit) / (hi - lo);
  std::array<uint32_t, kSplit + 1> begin{};
  std::array<double, kSplit> mass{};
  for (const Member& m : group) {
    const int k = group_of(m.gap, lo, scale);
    ++begin[static_cast<size_t>(k) + 1];
    mass[static_cast<size_t>(k)] += m.mass;
  }
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  std::vector<Member>& sorted = scratch().split[static_cast<size_t>(depth) - 1];
  sorted.resize(group.size());
  std::array<uint32_t, kSplit> next;
  std::copy(begin.begin(), begin.end() - 1, next.begin());
  for (const Member& m : group) sorted[next[static_cast<size_t>(group_of(m.gap, lo, scale))]++] = m;

  for (int k = 0; k < kSplit; ++k) {
    const uint32_t first = begin[static_cast<size_t>(k)];
    const uint32_t end = begin[static_cast<size_t>(k) + 1];
    if (first == end) continue;
    const double share = mass[static_cast<size_t>(k)] / row.total;
    if (row.short_of_target(cumulative, share)) {
      cumulative += share;
      continue;
    }
    const int32_t token =
        walk_group(row, std::span(sorted).subspan(first, end - first), cumulative, depth + 1);
    if (token != kContinue) return token;
  }
  return kContinue;
}

int32_t walk_members(Row& row, const Part& part, double& cumulative) {
  std::vector<Member>& members = scratch().members;
  members.resize(part.size());
  for (size_t i = 0; i < part.size(); ++i) {
    members[i] = {part.scaled[i], row.max_scaled - part.scaled[i], part.ids[i], part.mass[i]};
  }
  return walk_group(row, members, cumulative, 1);
}

// The gaps [from, to) around the sample's estimate of where the target falls in `part`.
struct Narrowing {
  float from = -kInf;
  float to = kInf;
};
Narrowing narrowing(const Row& row, const Part& part, double cumulative) {
  std::array<std::pair<float, double>, kSamples> sample;  // (gap, mass)
  const size_t n = part.size();
  for (size_t j = 0; j < kSamples; ++j) {
    const size_t i = j * n / kSamples;
    sample[j] = {row.max_scaled - part.scaled[i], part.mass[i]};
  }
  std::sort(sample.begin(), sample.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Each sample stands for n / kSamples elements.
  const double needed = (row.target - cumulative) * row.total * static_cast<double>(kSamples) /
                        static_cast<double>(n);
  size_t landing = 0;
  for (double sum = 0.0; landing < kSamples && sum + sample[landing].second < needed; ++landing) {
    sum += sample[landing].second;
  }
  Narrowing out;
  if (landing >= kMarginSamples) out.from = sample[landing - kMarginSamples].first;
  if (landing + kMarginSamples < kSamples) out.to = sample[landing + kMarginSamples].first;
  return out;
}

// Walks a part of a band: narrowed while it is large, then split into groups.
int32_t walk_part(Row& row, const Part& part, double& cumulative, int depth) {
  if (part.size() <= kNarrowed || depth == kMaxNarrowDepth) {
    return walk_members(row, part, cumulative);
  }
  const Narrowing range = narrowing(row, part, cumulative);
  std::array<PartStore, 2>& store = scratch().narrowed[static_cast<size_t>(depth)];
  kernels::GapSplit sums;
  const Part kept = store[0].collect(part, row.max_scaled, range.from, range.to, &sums);
  // No narrower (the sample's gaps tie across the margin): split it into groups as it is.
  if (kept.size() == part.size()) return walk_members(row, part, cumulative);
  // Every part is walked in gap order: before the kept range, the range, after it. Each is
  // stepped over when it ends clear of the target, else walked into (and left again, its
  // elements' exact shares added, when the target lies just past it).
  const double before = sums.mass_before / row.total;
  if (row.short_of_target(cumulative, before)) {
    cumulative += before;
  } else {
    const Part first = store[1].collect(part, row.max_scaled, -kInf, range.from);
    const int32_t token = walk_part(row, first, cumulative, depth + 1);
    if (token != kContinue) return token;
  }
  const double between = sums.mass_between / row.total;
  if (row.short_of_target(cumulative, between)) {
    cumulative += between;
  } else {
    const int32_t token = walk_part(row, kept, cumulative, depth + 1);
    if (token != kContinue) return token;
  }
  if (range.to == kInf) return kContinue;
  const Part last = store[1].collect(part, row.max_scaled, range.to, kInf);
  return walk_part(row, last, cumulative, depth + 1);
}

}  // namespace

bool Row::less(double a, double b) {
  if (std::fabs(a - b) <= tolerance * std::max(std::fabs(a), std::fabs(b)) + abs_tolerance) {
    undecided = true;
  }
  return a < b;
}

int32_t walk_band(Row& row, double mass_above, const Band& band, const BandRange& range) {
  double cumulative = mass_above / row.total;
  // (Nothing before the band: a target of 0 lands on its first element.)
  if (mass_above > 0.0 && !(cumulative < row.target - row.slack())) return kContinue;
  Part part{band.scaled, band.mass, band.ids};
  // The pass collected two bands (interleaved): this one's elements.
  if (!range.only) part = scratch().band.collect(part, row.max_scaled, range.above, range.below);
  return walk_part(row, part, cumulative, 0);
}

}  // namespace pagedserve::model::sampling
