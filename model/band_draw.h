// The sampler's band draw (sampler.cpp): a temperature draw with no top-k (the clients'
// defaults: nothing filtered, or top-p or min-p alone) without the bucketed histogram. The
// draw lands at u times the total mass of the sorted row; a subsample of the row (each block's
// maximum, the blocks holding the heavy tokens whole, every 64th element of the rest) estimates
// where, with its sampling error, and picks a band of the sorted order that holds the landing
// point with a margin of 3.5 standard errors. One vectorised pass (kernels/cpu/exp_band.h) then
// sums the total and the mass before the band and collects the band; only the band's elements
// are narrowed, split and walked (band_walk.h), as the bucketed row walks an opened bucket.
// Under top-p the same pass collects a second band around the cut: the cut's walk finds the
// kept mass, and the draw's walk lands at u times it, at or before the cut's last token. Min-p's
// cut is a known gap below the top; its band holds only the tokens too close to it for their float
// gap to tell. The histogram's per-element scatter (most of a bucketed draw's cost) is gone.
//
// Masses are float exps, each decision checked against their error bound as BucketedRow checks
// its own; a draw they cannot decide is decided again with exact (double) masses from a second
// pass over the same bands. A band the target missed, a top-p row of a vocabulary under 64k
// whose bands would hold thousands of elements (a flat row), and a row this path does not take
// (infinite or NaN elements, a spread past 80 nats) give nullopt: the caller then draws from the
// bucketed row, whose answer is the same token.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace pagedserve::model::sampling {

struct BandDraw {
  int32_t token = -1;
  double total = 0.0;    // sum of exp(scaled - max_scaled), from float exps
  float row_max = 0.0f;  // the raw row's largest element
};

// The sorted definition's draw at u (temperature > 0, no top-k, top_p in (0, 1] or min_p in
// [0, 1), not both), or nullopt.
// next_row: the row the caller samples next (as many elements), or null; its cache lines are
// requested during this row's band pass (kernels::ExpBandParams::prefetch).
std::optional<BandDraw> band_draw(std::span<const float> logits, float temperature, double u,
                                  float top_p = 1.0f, float min_p = 0.0f,
                                  const float* next_row = nullptr);

}  // namespace pagedserve::model::sampling
