#include "model/band_draw.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/exp_band.h"
#include "model/band_walk.h"

namespace pagedserve::model::sampling {
namespace {

// The subsample: blocks of kBlock elements. The blocks holding the row's heavy tokens (a
// maximum within kHeavyGap of the row's) are taken whole when fewer than kMaxWholeBlocks do,
// else the kWholeBlocks with the highest maxima; every other block's maximum stands for itself.
// A trained model's few likely tokens are those, and a stride alone would miss most of them and
// misjudge the mass. Every kStride-th element of the other blocks stands for the rest of its
// block. (A band's width goes as 1 / sqrt(samples); a denser stride, 16 for a 32k row, measured
// slower on both kinds of row: the subsample then costs more than the narrower band saves.)
constexpr int64_t kBlock = 256;
constexpr int kWholeBlocks = 4;
constexpr int kMaxWholeBlocks = 16;
constexpr float kHeavyGap = 4.0f;  // nats below the maximum: e^-4 of its probability
constexpr int64_t kStride = 64;
// What one strided sample stands for: a block's elements but its maximum, over its samples.
constexpr double kStrideWeight = static_cast<double>(kBlock - 1) / (kBlock / kStride);
// The estimate's resolution: gaps below the max in 256 steps over the row's spread.
constexpr int kEstimateBuckets = 256;
// The band reaches this many standard errors of the estimate past the landing point on each
// side; a draw outside it costs a bucketed draw, rare enough not to matter.
constexpr double kMargin = 3.5;
// Pseudo-samples at an edge's own mass for the elements no sample saw (see choose_band).
constexpr double kUnseen = 3.0;
// Under top-p, in a row shorter than kWideTopPMinVocab, bands expected to hold more than this
// share of the row go to the bucketed draw. From a 64k row on they are taken: narrowed, their
// walks cost less than that row's histogram (a flat 128k row's top-p 0.9 draw 166 -> 128 us,
// the benchmark model's 330 -> 224 us; a 32k one's 40 -> 43 us).
constexpr double kMaxTopPBandShare = 1.0 / 32;
constexpr int64_t kWideTopPMinVocab = 65536;
// The band pass's float exps are not clamped (exp_avx512_in_range holds to 87 nats); past this
// spread the path is not taken.
constexpr float kMaxSpread = 80.0f;
// Min-p's cut band: the tokens whose float gap is this close to -ln(min_p) get the exact test.
constexpr double kMinPBand = 1e-4;

// What the draw keeps: everything, a top-p prefix, or a min-p prefix.
struct Filter {
  float top_p = 1.0f;
  float min_p = 0.0f;
  bool cuts() const { return top_p < 1.0f || min_p > 0.0f; }
};

struct BandScratch {
  std::vector<float> block_max;
  std::vector<int32_t> block_order;
  std::vector<uint8_t> block_taken;  // [block]: taken whole into the subsample
  std::vector<float> sample_logits;
  std::vector<float> sample_exp;
  std::vector<float> sample_weight;  // of the strided samples
  std::vector<int32_t> band_ids;
  std::vector<float> band_scaled;
  std::vector<double> band_mass;  // the band's masses as the walk uses them
};

BandScratch& scratch() {
  thread_local BandScratch s;
  return s;
}

float scaled(float x, float temperature) { return temperature == 1.0f ? x : x / temperature; }

// The estimate of the row from its subsample: per gap bucket, the mass, an upper bound on the
// variance of that mass, and the element count.
struct EstimateBucket {
  double mass = 0.0;
  double variance = 0.0;
  double count = 0.0;
  int open_maxima = 0;  // blocks not taken whole whose maximum lies here
};
using Estimate = std::array<EstimateBucket, kEstimateBuckets>;

Estimate estimate_row(std::span<const float> logits, float temperature, float max_scaled,
                      float per_unit, int64_t heavy_blocks, BandScratch& sc) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const int64_t blocks = static_cast<int64_t>(sc.block_max.size());
  sc.block_order.resize(static_cast<size_t>(blocks));
  std::iota(sc.block_order.begin(), sc.block_order.end(), 0);
  // Whole: the heavy blocks when fewer than kMaxWholeBlocks, else the kWholeBlocks highest
  // (either way the highest maxima: the sort puts the heavy blocks first).
  const int64_t whole =
      heavy_blocks < kMaxWholeBlocks
          ? std::max<int64_t>(heavy_blocks, std::min<int64_t>(kWholeBlocks, blocks))
          : std::min<int64_t>(kWholeBlocks, blocks);
  std::partial_sort(sc.block_order.begin(), sc.block_order.begin() + whole, sc.block_order.end(),
                    [&](int32_t a, int32_t b) { return sc.block_max[a] > sc.block_max[b]; });
  const auto whole_end = sc.block_order.begin() + whole;
  // Weight-1 samples first (whole blocks, block maxima), then the strided ones.
  sc.block_taken.assign(static_cast<size_t>(blocks), 0);
  sc.sample_logits.clear();
  for (auto it = sc.block_order.begin(); it != whole_end; ++it) {
    sc.block_taken[static_cast<size_t>(*it)] = 1;
    const int64_t first = *it * kBlock;
    sc.sample_logits.insert(sc.sample_logits.end(), logits.begin() + first,
                            logits.begin() + std::min(n, first + kBlock));
  }
  for (int64_t b = 0; b < blocks; ++b) {
    if (!sc.block_taken[static_cast<size_t>(b)]) {
      sc.sample_logits.push_back(sc.block_max[static_cast<size_t>(b)]);
    }
  }
  const size_t exact = sc.sample_logits.size();
  const size_t first_open_maximum = exact - static_cast<size_t>(blocks - whole);
  sc.sample_weight.clear();
  // What each sample stands for: the block's elements but its maximum, over its samples
  // (kStrideWeight but in a shorter last block).
  const auto weight_of = [](int64_t size) {
    return static_cast<float>(size - 1) / static_cast<float>((size + kStride - 1) / kStride);
  };
  const float full_weight = weight_of(kBlock);
  for (int64_t b = 0; b < blocks; ++b) {
    if (sc.block_taken[static_cast<size_t>(b)]) continue;
    // The maximum is counted already: a strided position holding it (its first occurrence)
    // takes its neighbour instead. Else every block's maximum would count twice on average,
    // once for itself and once through the 1-in-64 chance of being sampled at weight 64: a
    // bias the size of the standard error in the top of a flat row.
    const int64_t first = b * kBlock;
    const int64_t end = std::min(n, first + kBlock);
    const float top = sc.block_max[static_cast<size_t>(b)];
    const float weight = end - first == kBlock ? full_weight : weight_of(end - first);
    for (int64_t i = first; i < end; i += kStride) {
      const bool is_maximum =
          logits[static_cast<size_t>(i)] == top &&
          std::find(logits.begin() + first, logits.begin() + i, top) == logits.begin() + i;
      const int64_t j = is_maximum && i + 1 < end ? i + 1 : i;
      sc.sample_logits.push_back(logits[static_cast<size_t>(j)]);
      sc.sample_weight.push_back(weight);
    }
  }
  sc.sample_exp.resize(sc.sample_logits.size());
  kernels::scaled_exp_f32(sc.sample_logits.data(), static_cast<int64_t>(sc.sample_logits.size()),
                          temperature, max_scaled, sc.sample_exp.data());
  Estimate est{};
  for (size_t j = 0; j < sc.sample_logits.size(); ++j) {
    const float gap = (max_scaled - scaled(sc.sample_logits[j], temperature)) * per_unit;
    const int b = gap < kEstimateBuckets - 1 ? static_cast<int>(gap) : kEstimateBuckets - 1;
    const double e = sc.sample_exp[j];
    EstimateBucket& bucket = est[static_cast<size_t>(b)];
    if (j < exact) {
      bucket.mass += e;
      bucket.count += 1.0;
      if (j >= first_open_maximum) ++bucket.open_maxima;
    } else {
      // One element standing for w: its block's sum is off by ~w e at most; w (w - 1) e^2
      // bounds that variance (zero for the elements that stand for themselves).
      const double w = sc.sample_weight[j - exact];
      bucket.mass += w * e;
      bucket.variance += w * (w - 1.0) * e * e;
      bucket.count += w;
    }
  }
  return est;
}

// The band [above, below) of gap buckets: before `above` the mass is short of the target by
// kMargin standard errors, from `below` on it is past it by as much (below = kEstimateBuckets:
// the band runs to the end of the row).
struct BandEdges {
  int above = 0;
  int below = kEstimateBuckets;
  double count = 0.0;  // the estimated elements in the band
};

BandEdges choose_band(const Estimate& est, double u, float per_unit) {
  std::array<double, kEstimateBuckets + 1> mass_before{};
  std::array<double, kEstimateBuckets + 1> variance_before{};
  std::array<int, kEstimateBuckets + 1> open_maxima_before{};
  for (int b = 0; b < kEstimateBuckets; ++b) {
    mass_before[b + 1] = mass_before[b] + est[b].mass;
    variance_before[b + 1] = variance_before[b] + est[b].variance;
    open_maxima_before[b + 1] = open_maxima_before[b] + est[b].open_maxima;
  }
  const double total = mass_before[kEstimateBuckets];
  const double variance = variance_before[kEstimateBuckets];
  // How far past the edge before bucket e the target lies, and that difference's standard error:
  // u * total - before = u * after - (1 - u) * before, after and before estimated apart.
  auto lead = [&](int e) { return u * total - mass_before[e]; };
  // With no strided sample near an edge the variance read from the samples is zero, though
  // dozens of unsampled elements may lie there (the top of a flat row: each block's maximum is
  // sampled, its runners-up rarely). kUnseen pseudo-samples at the edge's own mass, on each
  // side, stand for them. An element near the edge lies in a block whose maximum is above the
  // edge or just below it; where every such block was taken whole, none is unseen.
  auto error = [&](int e) {
    const bool open = open_maxima_before[std::min(e + 1, kEstimateBuckets)] > 0;
    const double edge_mass = std::exp(-static_cast<double>(e) / per_unit);
    const double unseen =
        open ? kUnseen * kStrideWeight * (kStrideWeight - 1.0) * edge_mass * edge_mass : 0.0;
    return kMargin * std::sqrt((1.0 - u) * (1.0 - u) * (variance_before[e] + unseen) +
                               u * u * (variance - variance_before[e] + unseen));
  };
  BandEdges edges;
  while (edges.above < kEstimateBuckets && lead(edges.above + 1) > error(edges.above + 1)) {
    ++edges.above;
  }
  edges.below = edges.above + 1;
  while (edges.below < kEstimateBuckets && !(-lead(edges.below) > error(edges.below))) {
    ++edges.below;
  }
  for (int b = edges.above; b < edges.below; ++b) edges.count += est[b].count;
  return edges;
}

// The share of the row's mass before gap bucket position `position` (fractional), by the
// estimate.
double estimated_share_before(const Estimate& est, double position) {
  double before = 0.0;
  double total = 0.0;
  for (int b = 0; b < kEstimateBuckets; ++b) {
    total += est[b].mass;
    if (b < position) before += est[b].mass;
  }
  return total > 0.0 ? before / total : 1.0;
}

// The bands of one draw, and how the pass is to collect them. Band 0 is the draw's; under
// top-p or min-p, band 1 is around the cut. The draw's target is u times the kept mass, which
// only the cut's walk finds: its band is placed for u times the kept share the estimate gives.
struct Plan {
  kernels::ExpBandParams pass;
  std::array<BandRange, kernels::kMaxBands> ranges{};
  double expected = 0.0;  // elements in the bands, by the estimate
};

Plan plan_bands(const Estimate& estimate, double u, const Filter& filter, float per_unit) {
  Plan plan;
  kernels::ExpBandParams& p = plan.pass;
  p.num_bands = filter.cuts() ? 2 : 1;
  std::array<BandEdges, kernels::kMaxBands> edges{};
  if (filter.top_p < 1.0f) {
    edges[0] = choose_band(estimate, u * filter.top_p, per_unit);
    edges[1] = choose_band(estimate, filter.top_p, per_unit);
  } else if (filter.min_p > 0.0f) {
    const double cut_gap = -std::log(static_cast<double>(filter.min_p));
    edges[0] =
        choose_band(estimate, u * estimated_share_before(estimate, cut_gap * per_unit), per_unit);
  } else {
    edges[0] = choose_band(estimate, u, per_unit);
  }
  for (int b = 0; b < p.num_bands; ++b) {
    plan.expected += edges[b].count;
    p.above[b] = static_cast<float>(edges[b].above) / per_unit;
    p.below[b] = edges[b].below >= kEstimateBuckets ? std::numeric_limits<float>::infinity()
                                                    : static_cast<float>(edges[b].below) / per_unit;
  }
  if (filter.min_p > 0.0f) {
    // Min-p's cut is a known gap, -ln(min_p): only the tokens within kMinPBand of it need the
    // exact test (a float gap is within 80 * 2^-23 nats of the exact one).
    const double cut_gap = -std::log(static_cast<double>(filter.min_p));
    p.above[1] = static_cast<float>(cut_gap - kMinPBand);
    p.below[1] = static_cast<float>(cut_gap + kMinPBand);
  }
  for (int b = 0; b < p.num_bands; ++b) {
    plan.ranges[b] = {p.above[b], p.below[b], !filter.cuts()};
  }
  return plan;
}

// Min-p keeps the prefix of tokens at least min_p times as likely as the top one: every token
// before its band and the band's own that pass the test (std::exp in double, as the
// definition; their order does not matter to the sum). The kept share.
double min_p_kept(const Row& row, double mass_above, const Band& band, const BandRange& range,
                  double min_p) {
  double kept = mass_above;
  for (size_t i = 0; i < band.ids.size(); ++i) {
    const float gap = row.max_scaled - band.scaled[i];
    if (!(gap >= range.above && gap < range.below)) continue;
    const double e = std::exp(static_cast<double>(band.scaled[i]) - row.max_scaled);
    if (e >= min_p) kept += e;
  }
  return kept / row.total;
}

// The relative error of a share the walks compare, with float masses: a prefix's mass (the
// mass before a band plus band masses) over the total, or under a cut over the cut's prefix.
// Each is within the pass's mass_error of its exact value (kernels::ExpBandResult), whatever
// the gaps of its terms.
double share_tolerance(const kernels::ExpBandResult& pass) { return 2.0 * pass.mass_error; }

// The cut's walk (top-p) or test (min-p), then the draw's at u times the mass kept.
int32_t decide(const Band& band, const Plan& plan, const kernels::ExpBandResult& sums,
               float max_scaled, double u, const Filter& filter, double tolerance,
               double abs_tolerance) {
  Row cut{max_scaled, sums.total, tolerance, abs_tolerance, filter.top_p, true};
  double kept = 1.0;
  if (filter.top_p < 1.0f) {
    const int32_t at = walk_band(cut, sums.mass_above[1], band, plan.ranges[1]);
    if (at < 0) return at;
    kept = cut.landed_cumulative;
  } else if (filter.min_p > 0.0f) {
    kept = min_p_kept(cut, sums.mass_above[1], band, plan.ranges[1], filter.min_p);
  }
  Row draw{max_scaled, sums.total, tolerance, abs_tolerance, u * kept, false};
  if (filter.top_p < 1.0f) draw.last_kept = &cut.landed;
  draw.min_p = filter.min_p;
  return walk_band(draw, sums.mass_above[0], band, plan.ranges[0]);
}

}  // namespace

std::optional<BandDraw> band_draw(std::span<const float> logits, float temperature, double u,
                                  float top_p, float min_p, const float* next_row) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const Filter filter{top_p, min_p};
  if (n == 0 || !(temperature > 0.0f) || !(top_p > 0.0f && top_p <= 1.0f) ||
      !(min_p >= 0.0f && min_p < 1.0f) || (top_p < 1.0f && min_p > 0.0f)) {
    return std::nullopt;
  }
  BandScratch& sc = scratch();
  sc.block_max.resize(static_cast<size_t>((n + kBlock - 1) / kBlock));
  const kernels::BlockedRange blocked =
      kernels::row_block_max(logits.data(), n, kBlock, sc.block_max.data());
  const kernels::RowRange range = blocked.range;
  if (blocked.has_nan || !std::isfinite(range.min) || !std::isfinite(range.max)) {
    return std::nullopt;
  }
  const float max_scaled = range.max / temperature;
  const float spread = max_scaled - range.min / temperature;
  if (!std::isfinite(max_scaled) || !(spread <= kMaxSpread)) return std::nullopt;
  const float per_unit = static_cast<float>(kEstimateBuckets - 1) / std::max(spread, 1e-3f);

  // Below kWideTopPMinVocab a flat row's top-p bands (thousands of elements each, two walks
  // over them with twice the share of draws the float masses leave undecided) cost more than
  // the bucketed draw: such a row goes there, before the subsample is paid for when its heavy
  // tokens (within kHeavyGap of the top) fill more blocks than are taken whole.
  const bool hands_back_wide_top_p = top_p < 1.0f && n < kWideTopPMinVocab;
  int64_t heavy_blocks = 0;
  for (float block_max : sc.block_max) {
    heavy_blocks += static_cast<int64_t>(scaled(block_max, temperature) >= max_scaled - kHeavyGap);
  }
  if (hands_back_wide_top_p && heavy_blocks >= kMaxWholeBlocks) return std::nullopt;
  Plan plan = plan_bands(estimate_row(logits, temperature, max_scaled, per_unit, heavy_blocks, sc),
                         u, filter, per_unit);
  if (hands_back_wide_top_p && plan.expected > static_cast<double>(n) * kMaxTopPBandShare) {
    return std::nullopt;
  }

  const int64_t capacity = std::min<int64_t>(
      n, std::max<int64_t>(2048, static_cast<int64_t>(2.0 * plan.expected) + 256));
  sc.band_scaled.resize(static_cast<size_t>(capacity) + 16);
  sc.band_mass.resize(static_cast<size_t>(capacity) + 16);
  sc.band_ids.resize(static_cast<size_t>(capacity) + 16);
  kernels::ExpBandParams& p = plan.pass;
  p.logits = logits.data();
  p.n = n;
  p.temperature = temperature;
  p.max_scaled = max_scaled;
  p.band_ids = sc.band_ids.data();
  p.band_scaled = sc.band_scaled.data();
  p.band_mass = sc.band_mass.data();
  p.capacity = capacity;
  p.prefetch = next_row;
  const kernels::ExpBandResult pass = kernels::exp_band(p);
  if (pass.overflow || !std::isfinite(pass.total) || !(pass.total > 0.0)) return std::nullopt;

  const size_t count = static_cast<size_t>(pass.band_count);
  const Band band{std::span(sc.band_ids).first(count), std::span(sc.band_scaled).first(count),
                  std::span(sc.band_mass).first(count)};
  int32_t token =
      decide(band, plan, pass, max_scaled, u, filter, share_tolerance(pass), kAbsTolerance);
  if (token == kUndecided) {
    // Too close to call in float: the same bands with exact masses, the total and the masses
    // before the bands from a double pass (still no histogram), which always decides.
    p.exact = true;
    p.prefetch = nullptr;  // requested already
    const kernels::ExpBandResult exact = kernels::exp_band(p);
    kernels::shifted_exp_f64(sc.band_scaled.data(), static_cast<int64_t>(count), max_scaled,
                             sc.band_mass.data());
    token = decide(band, plan, exact, max_scaled, u, filter, 0.0, 0.0);
  }
  if (token < 0) return std::nullopt;
  return BandDraw{token, pass.total, range.max};
}

}  // namespace pagedserve::model::sampling
