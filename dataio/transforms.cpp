// Transform pipelines (see transforms.h): validation and output size (transforms_build), the per-sample random
// parameters in pipeline order from one Philox stream (transforms_draw), and the backward per-pixel evaluation
// (transforms_apply) whose arithmetic lives in transforms_map.h so that a CUDA kernel can share it.
#include "dataio/transforms.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/util/philox.h"
#include "dataio/transforms_map.h"

namespace trctl {

namespace {

constexpr int kMaxSide = 1 << 14;     // largest image side anywhere in a pipeline
constexpr int kMaxChannels = 4096;

// torchvision's transforms for decoded images of any size: dataio/image_ops.h runs them, not this pipeline (nor
// the GPU kernel that mirrors it), which maps output pixels back to one fixed-size input.
bool is_variable_size_kind(TransformKind k) {
  return k == TransformKind::RandomResizedCrop || k == TransformKind::ColorJitter || k == TransformKind::Resize ||
         k == TransformKind::CenterCrop;
}

bool is_geometric(TransformKind k) {
  return k == TransformKind::Pad || k == TransformKind::RandomCrop || k == TransformKind::RandomRotation ||
         k == TransformKind::RandomScale || k == TransformKind::RandomHorizontalFlip;
}

std::string size_text(int h, int w) { return std::to_string(h) + "x" + std::to_string(w); }

// Range checks of one step's own fields, and its effect on the image size (h, w). Appends messages to *msgs.
void check_step(const TransformSpec& s, int* h, int* w, std::vector<std::string>* msgs) {
  switch (s.kind) {
    case TransformKind::Pad:
      if (s.padding < 0 || 2 * int64_t(s.padding) + std::max(*h, *w) > kMaxSide) {
        msgs->push_back("padding " + std::to_string(s.padding) + " must be >= 0 and keep the image side <= " +
                        std::to_string(kMaxSide));
      } else {
        *h += 2 * s.padding;
        *w += 2 * s.padding;
      }
      break;
    case TransformKind::RandomCrop:
      if (s.size < 1 || s.size > *h || s.size > *w) {
        msgs->push_back("size " + std::to_string(s.size) + " must be in [1, min(H, W)] of the " +
                        size_text(*h, *w) + " image it receives");
      } else {
        *h = *w = s.size;
      }
      break;
    case TransformKind::RandomRotation:
      if (!std::isfinite(s.degrees) || s.degrees < 0) msgs->push_back("degrees must be finite and >= 0");
      break;
    case TransformKind::RandomScale:
      if (!std::isfinite(s.scale_min) || !std::isfinite(s.scale_max) || s.scale_min <= 0 ||
          s.scale_min > s.scale_max) {
        msgs->push_back("scale range [min, max] must satisfy 0 < min <= max");
      }
      break;
    case TransformKind::Normalize:
      break;
    case TransformKind::RandomErasing:
      if (!(s.p >= 0 && s.p <= 1)) msgs->push_back("p must be in [0, 1]");
      if (!(s.erase_scale_min >= 0 && s.erase_scale_min <= s.erase_scale_max && s.erase_scale_max <= 1)) {
        msgs->push_back("scale range must satisfy 0 <= min <= max <= 1");
      }
      if (!(s.ratio_min > 0 && s.ratio_min <= s.ratio_max && std::isfinite(s.ratio_max))) {
        msgs->push_back("ratio range must satisfy 0 < min <= max");
      }
      if (!std::isfinite(s.value)) msgs->push_back("value must be finite");
      break;
    case TransformKind::RandomHorizontalFlip:
      if (!(s.p >= 0 && s.p <= 1)) msgs->push_back("p must be in [0, 1]");
      break;
    case TransformKind::RandomResizedCrop:
    case TransformKind::ColorJitter:
    case TransformKind::Resize:
    case TransformKind::CenterCrop:
      break;  // rejected by check_steps
  }
}

// mean or std given per channel or once for all; broadcast to c floats.
bool expand_channels(const std::vector<double>& v, int c, std::vector<float>* out) {
  if (v.size() != 1 && v.size() != size_t(c)) return false;
  out->assign(size_t(c), 0.0f);
  for (int i = 0; i < c; ++i) (*out)[size_t(i)] = static_cast<float>(v.size() == 1 ? v[0] : v[size_t(i)]);
  return true;
}

// Errors in the order of the steps: position rules (one normalize; geometry before it, erasing after it), then
// each step's own fields and sizes.
void check_steps(TransformPipeline* p, const std::string& where, std::vector<Error>* errs) {
  int normalizes = 0, normalize_at = -1;
  for (size_t i = 0; i < p->steps.size(); ++i) {
    if (p->steps[i].kind != TransformKind::Normalize) continue;
    if (normalizes++ == 0) normalize_at = static_cast<int>(i);
  }
  if (normalizes == 0) errs->push_back({ErrCode::Missing, where, "transforms: a normalize step is required"});
  if (normalizes > 1) {
    errs->push_back({ErrCode::Invalid, where,
                     "transforms: normalize given " + std::to_string(normalizes) + " times (exactly one is allowed)"});
  }
  int h = p->in_h, w = p->in_w;
  for (size_t i = 0; i < p->steps.size(); ++i) {
    const TransformSpec& s = p->steps[i];
    std::string head = "transform " + std::to_string(i + 1) + " (" + to_string(s.kind) + "): ";
    int at = static_cast<int>(i);
    if (is_variable_size_kind(s.kind)) {
      errs->push_back({ErrCode::NotSupported, where,
                       head + "is for variable-size image datasets (JPEG); the fixed-size pipeline supports pad, "
                              "random_crop, random_horizontal_flip, random_rotation, random_scale, normalize and "
                              "random_erasing"});
      continue;
    }
    if (is_geometric(s.kind) && normalize_at >= 0 && at > normalize_at) {
      errs->push_back({ErrCode::Invalid, where, head + "geometric transforms must come before normalize"});
    }
    if (s.kind == TransformKind::RandomErasing && normalize_at >= 0 && at < normalize_at) {
      errs->push_back({ErrCode::Invalid, where, head + "must come after normalize (it fills in normalized units)"});
    }
    std::vector<std::string> msgs;
    check_step(s, &h, &w, &msgs);
    for (auto& m : msgs) errs->push_back({ErrCode::OutOfRange, where, head + m});
  }
  p->out_h = h;
  p->out_w = w;
}

// Fills a box of the (h, w, c) f32 image with v, clipped to the image.
void erase_box(const StepParams& e, int h, int w, int c, float v, float* dst) {
  int y0 = std::max(0, e.erase_y), y1 = std::min(h, e.erase_y + e.erase_h);
  int x0 = std::max(0, e.erase_x), x1 = std::min(w, e.erase_x + e.erase_w);
  if (y1 <= y0 || x1 <= x0) return;
  for (int y = y0; y < y1; ++y) {
    float* row = dst + (size_t(y) * size_t(w) + size_t(x0)) * size_t(c);
    std::fill(row, row + size_t(x1 - x0) * size_t(c), v);
  }
}

}  // namespace

Result<TransformPipeline> transforms_build(const std::vector<TransformSpec>& steps, const std::vector<double>& mean,
                                           const std::vector<double>& std, int in_h, int in_w, int c,
                                           const std::string& where) {
  std::vector<Error> errs;
  if (in_h < 1 || in_w < 1 || in_h > kMaxSide || in_w > kMaxSide || c < 1 || c > kMaxChannels) {
    return Error{ErrCode::OutOfRange, where,
                 "transforms: input image " + size_text(in_h, in_w) + "x" + std::to_string(c) +
                     " must have sides in [1, " + std::to_string(kMaxSide) + "] and 1 to " +
                     std::to_string(kMaxChannels) + " channels"};
  }
  TransformPipeline p;
  p.steps = steps;
  p.in_h = in_h;
  p.in_w = in_w;
  p.c = c;
  check_steps(&p, where, &errs);
  std::string channels = " (the images have " + std::to_string(c) + ")";
  if (!expand_channels(mean, c, &p.mean)) {
    errs.push_back({ErrCode::Invalid, where, "normalize: mean needs 1 or " + std::to_string(c) + " values" + channels});
  }
  if (!expand_channels(std, c, &p.std)) {
    errs.push_back({ErrCode::Invalid, where, "normalize: std needs 1 or " + std::to_string(c) + " values" + channels});
  }
  for (float m : p.mean) {
    if (!std::isfinite(m)) errs.push_back({ErrCode::OutOfRange, where, "normalize: mean must be finite"});
  }
  for (float s : p.std) {
    if (!std::isfinite(s) || s == 0.0f) {
      errs.push_back({ErrCode::OutOfRange, where, "normalize: std must be finite and non-zero (as float)"});
    }
  }
  if (!errs.empty()) return errs;
  return p;
}

SampleParams transforms_draw(const TransformPipeline& p, uint64_t seed, uint32_t epoch, uint32_t sample_index) {
  SampleParams sp;
  sp.steps.resize(p.steps.size());
  PhiloxStream rng(seed, static_cast<uint32_t>(RngPurpose::Transform), epoch, sample_index);
  int h = p.in_h, w = p.in_w;
  for (size_t i = 0; i < p.steps.size(); ++i) sp.steps[i] = transforms_draw_step(p.steps[i], &h, &w, rng);
  return sp;
}

void transforms_apply(const TransformPipeline& p, const SampleParams& params, const uint8_t* src, float* dst) {
  // The geometric steps as backward maps, each knowing the size of the image it receives.
  std::vector<GeoMap> maps;
  maps.reserve(p.steps.size());
  const StepParams none{};
  int h = p.in_h, w = p.in_w;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const TransformSpec& s = p.steps[i];
    const StepParams& sp = i < params.steps.size() ? params.steps[i] : none;
    switch (s.kind) {
      case TransformKind::Pad:
        maps.push_back(geo_shift(h, w, -s.padding, -s.padding));
        h += 2 * s.padding;
        w += 2 * s.padding;
        break;
      case TransformKind::RandomCrop:
        maps.push_back(geo_shift(h, w, sp.crop_y, sp.crop_x));
        h = w = s.size;
        break;
      case TransformKind::RandomRotation: maps.push_back(geo_rotation(h, w, sp.angle_deg)); break;
      case TransformKind::RandomScale: maps.push_back(geo_scale(h, w, sp.scale)); break;
      case TransformKind::RandomHorizontalFlip: maps.push_back(geo_flip(h, w, sp.flip)); break;
      case TransformKind::Normalize:
      case TransformKind::RandomErasing:
      case TransformKind::RandomResizedCrop:  // variable-size kinds: rejected by transforms_build
      case TransformKind::ColorJitter:
      case TransformKind::Resize:
      case TransformKind::CenterCrop: break;
    }
  }
  const int c = p.c, n = static_cast<int>(maps.size());
  for (int y = 0; y < p.out_h; ++y) {
    for (int x = 0; x < p.out_w; ++x) {
      int32_t sy = 0, sx = 0;
      bool inside = geo_source_pixel(maps.data(), n, y, x, &sy, &sx);
      const uint8_t* px = inside ? src + (size_t(sy) * size_t(p.in_w) + size_t(sx)) * size_t(c) : nullptr;
      float* out = dst + (size_t(y) * size_t(p.out_w) + size_t(x)) * size_t(c);
      for (int ch = 0; ch < c; ++ch) out[ch] = normalize_u8(inside ? px[ch] : uint8_t(0), p.mean[ch], p.std[ch]);
    }
  }
  for (size_t i = 0; i < p.steps.size() && i < params.steps.size(); ++i) {
    const StepParams& sp = params.steps[i];
    if (p.steps[i].kind == TransformKind::RandomErasing && sp.erase) {
      erase_box(sp, p.out_h, p.out_w, c, static_cast<float>(p.steps[i].value), dst);
    }
  }
}

}  // namespace trctl
