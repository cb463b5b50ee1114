// The sampler's band draw (sampler.cpp): a temperature draw with no top-k, top-p or min-p, the
// clients' default, without the bucketed histogram. The draw lands at u times the total mass of
// the sorted row; a subsample of the row (its few blocks with the highest maxima whole, every
// 32nd element of the rest) estimates where, with its sampling error, and picks a band of the
// sorted order that holds the landing point with a wide margin. One vectorised pass
// (kernels/cpu/exp_band.h) then sums the total and the mass before the band and collects the
// band; only the band's few elements are split and walked, as the bucketed row walks an opened
// bucket. The histogram's per-element scatter (most of a draw's cost) is gone.
//
// Masses are float exps, each decision checked against their error bound as BucketedRow checks
// its own. A draw the float masses cannot decide, a band the draw missed and a row this path
// does not take (infinite or NaN elements, a spread past 80 nats) give nullopt: the caller then
// draws from the bucketed row, whose answer is the same token.
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

// The sorted definition's draw at u (temperature > 0, nothing filtered), or nullopt.
std::optional<BandDraw> band_draw(std::span<const float> logits, float temperature, double u);

}  // namespace pagedserve::model::sampling
