// Per-sample image transforms with torchvision semantics, split into two phases so that a GPU kernel can mirror
// them exactly: transforms_draw (the random parameters of one sample, from a Philox stream keyed by
// (seed, epoch, sample index)) and transforms_apply (deterministic given those parameters).
#pragma once
#include <cstdint>
#include <vector>

#include "core/spec/spec.h"
#include "core/util/error.h"
#include "dataio/transforms_map.h"  // StepParams, transforms_draw_step

namespace trctl {

struct TransformPipeline {
  std::vector<TransformSpec> steps;
  std::vector<float> mean, std;  // per channel
  int in_h = 0, in_w = 0, c = 1;
  int out_h = 0, out_w = 0;      // after all steps
};

// Checks the list against the input size (e.g. crop larger than the padded image, normalize missing or given
// twice, erasing before normalize); errors carry `where` (the spec file).
Result<TransformPipeline> transforms_build(const std::vector<TransformSpec>& steps, const std::vector<double>& mean,
                                           const std::vector<double>& std, int in_h, int in_w, int c,
                                           const std::string& where);

struct SampleParams {
  std::vector<StepParams> steps;  // one per pipeline step
};

// All draws come from one PhiloxStream(seed, RngPurpose::Transform, epoch, sample_index), step by step in
// pipeline order (every draw is taken even when its range is a single value):
//   random_crop     top = below(H - size + 1), then left = below(W - size + 1)     (H, W: the image it receives)
//   random_rotation angle = uniform_range(-degrees, degrees)
//   random_scale    scale = uniform_range(min, max)
//   random_horizontal_flip  flip = uniform() (float) < p
//   random_erasing  u = uniform() (float); erase only if u < p; then up to 10 attempts of
//                   area = H*W*uniform_range(scale_min, scale_max), aspect = exp(uniform_range(log rmin, log rmax)),
//                   h = nearbyint(sqrt(area*aspect)), w = nearbyint(sqrt(area/aspect)) (Python round: half even);
//                   the first with h < H and w < W draws top = below(H-h+1), then left = below(W-w+1)
SampleParams transforms_draw(const TransformPipeline& p, uint64_t seed, uint32_t epoch, uint32_t sample_index);

// src (in_h, in_w, c) u8 -> dst (out_h, out_w, c) f32. Each output pixel is traced back through the geometric
// steps to one source pixel or to outside (value 0), with no intermediate images (dataio/transforms_map.h has
// the per-pixel maps and their torchvision conventions); then normalized; then the erasing boxes are filled.
void transforms_apply(const TransformPipeline& p, const SampleParams& params, const uint8_t* src, float* dst);

}  // namespace trctl
