// The band draw's walks (band_draw.cpp): from the mass before a band, through the band's
// collected elements in the sorted definition's order (higher scaled logit first, ties by lower
// id), to the element where a draw or a top-p cut lands. A band of thousands of elements (a
// flat row's) is first narrowed: a sample of it estimates where the target falls, and one
// vectorised pass (kernels::split_by_gap) sums what lies before that estimate and keeps the
// elements around it; a few such steps leave a few hundred, which are split by gap into
// groups, stepped over group by group, and the last few sorted and walked one by one with
// exact (double std::exp) shares. Plain functions over spans; scratch space is per thread.
#pragma once

#include <cstdint>
#include <span>

namespace pagedserve::model::sampling {

inline constexpr int32_t kContinue = -1;   // the target lies past these elements
inline constexpr int32_t kUndecided = -2;  // too close to call with float masses

// As BucketedRow: masses summed in another order than the element walk's (kSlack), float
// exps' terms past e^-80 and the double roundings (kAbsTolerance).
inline constexpr double kSlack = 1e-9;
inline constexpr double kAbsTolerance = 1e-15;

struct Member {
  float scaled;  // logit / temperature
  float gap;     // max_scaled - scaled, in float as the band pass has it
  int32_t id;
  double mass;  // its exp: the band pass's float one, or the exact one
};

// One walk over the sorted order: a draw (the first element whose cumulative share passes the
// target) or a top-p cut (the first whose cumulative share reaches it).
struct Row {
  float max_scaled;
  double total;          // from float exps, or double ones
  double tolerance;      // relative, of a comparison of two shares
  double abs_tolerance;  // and absolute
  double target;         // u (times the kept mass, under a cut), or top_p for the cut
  bool is_cut = false;
  const Member* last_kept = nullptr;  // a draw under a top-p cut lands at or before this one
  double min_p = 0.0;                 // and under min-p on a token at least this likely
  bool undecided = false;
  Member landed{};  // where the walk stopped, and the cumulative share through it
  double landed_cumulative = 0.0;

  // a < b, flagging a comparison closer than the masses' error.
  bool less(double a, double b);
  double slack() const { return kSlack + tolerance + abs_tolerance; }
  bool lands_at(double cumulative) {
    return is_cut ? !less(cumulative, target) : less(target, cumulative);
  }
  // Whether a part of the order whose share is `share`, starting at `cumulative`, ends clear of
  // the target (so it can be stepped over whole).
  bool short_of_target(double cumulative, double share) const {
    return cumulative + share < target - slack();
  }
};

// The sorted definition's order: higher scaled logit first, ties by lower id.
inline bool before_in_order(const Member& a, const Member& b) {
  return a.scaled > b.scaled || (a.scaled == b.scaled && a.id < b.id);
}

// The bands as the pass collected them (in id order), with the masses the walk uses (float or
// exact).
struct Band {
  std::span<const int32_t> ids;
  std::span<const float> scaled;
  std::span<const double> mass;
};
// One band's gaps: [above, below).
struct BandRange {
  float above = 0.0f;
  float below = 0.0f;
  bool only = true;  // the pass collected this band alone
};

// The walk from a band's start: the token where the target lands, kContinue when it lies
// before or past the band, kUndecided when the float masses cannot tell.
int32_t walk_band(Row& row, double mass_above, const Band& band, const BandRange& range);

}  // namespace pagedserve::model::sampling
