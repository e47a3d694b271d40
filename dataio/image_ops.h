// The transform pipeline for variable-size images (JPEG datasets): torchvision.transforms v1 semantics on PIL
// images (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ColorJitter, Normalize, RandomErasing),
// with PIL's bilinear resampling reproduced in fixed point, decoding at a DCT scale chosen from the crop, and one
// fused pass at the end that flips, normalizes, erases and writes (out_h, out_w, c) float32 or fp16.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/spec/spec.h"
#include "core/util/error.h"
#include "core/util/philox.h"
#include "dataio/jpeg.h"
#include "dataio/transforms_map.h"  // StepParams, transforms_draw_erasing

namespace trctl {

enum class OutDType { F32, F16, BF16 };  // BF16: for bf16 AMP input slots

// IEEE binary16 bits of f, rounded to nearest, ties to even; beyond the largest half (65504 + half an ulp) it is
// +-inf; NaN stays a (quiet) NaN with its sign; results below 2^-14 are subnormal, below 2^-25 zero.
uint16_t float_to_half_bits(float f);
// bfloat16 bits of f: the top 16 bits rounded to nearest, ties to even; NaN stays a quiet NaN with its sign.
uint16_t float_to_bf16_bits(float f);
float half_bits_to_float(uint16_t h);  // exact

// A u8 HWC image read in place; rows are `stride` bytes apart, so a crop is a view of its source.
struct ImageView {
  const uint8_t* data = nullptr;
  int h = 0, w = 0, c = 0;
  size_t stride = 0;
};

// Coefficients and the intermediate image of resize_region_u8, kept across calls so that steady state allocates
// nothing.
struct ResizeScratch {
  std::vector<int32_t> kx, ky;  // fixed-point weights, (out size, ksize)
  std::vector<int32_t> bx, by;  // per output pixel: first source pixel, number of taps
  std::vector<double> weights;  // one output pixel's weights before fixed point
  std::vector<uint8_t> rows;    // the horizontal pass's output, (used source rows, dw, c)
  std::vector<int32_t> acc;     // one output row of vertical sums
};

// PIL's Image.resize((dw, dh), BILINEAR, box=(x0, y0, x1, y1)) (ImagingResample): separable, horizontal pass then
// vertical pass, each through u8; a triangle filter whose support grows with the downscale factor
// (antialiasing); per output pixel i: center = x0 + (i + 0.5) * scale, taps [int(center - support + 0.5),
// int(center + support + 0.5)) clipped to the source, weights normalized, then rounded to 22-bit fixed point; a
// pass is skipped when its axis is unchanged. PIL's arithmetic step by step, so the same bits. Source pixels
// outside `src` are never read: a crop passed as a view behaves as PIL's crop-then-resize.
// dst: (dh, dw, src.c) u8, contiguous.
void resize_region_u8(const ImageView& src, float x0, float y0, float x1, float y1, uint8_t* dst, int dh, int dw,
                      ResizeScratch& scratch);

struct CropBox {
  int top = 0, left = 0, h = 0, w = 0;
};

// torchvision RandomResizedCrop.get_params on an h x w image (draws listed at image_pipeline_draw).
CropBox random_resized_crop_params(const TransformSpec& s, int h, int w, PhiloxStream& rng);
// torchvision F.center_crop: top = int(round((h - size) / 2.0)) (half to even), left likewise; a side smaller
// than size is zero-padded by (size - side) // 2 before, so top/left are then negative.
CropBox center_crop_box(int h, int w, int size);
// torchvision Resize(size) with an int: the shorter side becomes size, the longer int(size * long / short).
void resize_shorter_side(int h, int w, int size, int* out_h, int* out_w);

// ColorJitter's per-sample parameters: order is torchvision's fn_idx (0 brightness, 1 contrast, 2 saturation,
// 3 hue); a component given as 0 is off (torchvision's None: nothing drawn, nothing applied).
struct ColorJitterParams {
  int order[4] = {0, 1, 2, 3};
  bool on[4] = {false, false, false, false};
  double factor[4] = {1, 1, 1, 0};  // brightness, contrast, saturation factors; hue shift
};
ColorJitterParams color_jitter_params(const TransformSpec& s, PhiloxStream& rng);

// torchvision's PIL ops, in place on an (h, w, 3) u8 image with rows `stride` bytes apart. The first three are
// PIL's ImageEnhance (Image.blend(degenerate, img, factor): float, truncated, clipped when extrapolating) with
// degenerate = black / the mean of convert("L") as int(mean + 0.5) / convert("L") per pixel; hue shifts the H of
// convert("HSV") by uint8(trunc(shift * 255)) with wraparound and converts back, as PIL does.
void adjust_brightness_u8(uint8_t* img, int h, int w, size_t stride, double factor);
void adjust_contrast_u8(uint8_t* img, int h, int w, size_t stride, double factor);
void adjust_saturation_u8(uint8_t* img, int h, int w, size_t stride, double factor);
void adjust_hue_u8(uint8_t* img, int h, int w, size_t stride, double shift);
void color_jitter_apply_u8(const ColorJitterParams& p, uint8_t* img, int h, int w, size_t stride);

struct ImagePipeline {
  std::vector<TransformSpec> steps;
  std::vector<float> mean, std;  // per channel
  int c = 3;
  int out_h = 0, out_w = 0;      // fixed by the steps, whatever the input size
  int tail_from = 0;             // steps from here on touch no geometry: their flips join the fused tail
  std::vector<float> lut_f32;    // (c, 256): normalize of each u8 value, as torchvision ToTensor + Normalize
  std::vector<uint16_t> lut_f16; // the same as fp16 bits
  std::vector<uint16_t> lut_bf16;  // and as bf16 bits
};

// Validates the list for variable-size inputs, all errors at once naming `where`: the output size must be fixed
// by the steps (random_resized_crop or center_crop, optionally followed by resize); normalize exactly once, after
// the geometric steps and color_jitter; random_erasing after it; color_jitter needs c = 3; the fixed-size kinds
// (pad, random_crop, random_rotation, random_scale) are ErrCode::NotSupported. c is 1 or 3.
Result<ImagePipeline> image_pipeline_build(const std::vector<TransformSpec>& steps, const std::vector<double>& mean,
                                           const std::vector<double>& std, int c, const std::string& where);

struct ImageStepParams {
  CropBox crop;               // random_resized_crop
  bool flip = false;          // random_horizontal_flip
  ColorJitterParams jitter;   // color_jitter
  StepParams erase;           // random_erasing (erase, erase_y/x/h/w)
};

// All random parameters of one sample, given the size of the image as stored (JPEG header or raw h, w): one
// PhiloxStream(seed, RngPurpose::Transform, epoch, sample_index), step by step in pipeline order:
//   random_resized_crop     up to 10 attempts of: area = H*W*uniform_range(scale_min, scale_max), aspect =
//                           exp(uniform_range(log ratio_min, log ratio_max)), w = round(sqrt(area*aspect)),
//                           h = round(sqrt(area/aspect)) (half to even); the first with 0 < w <= W, 0 < h <= H
//                           draws top = below(H-h+1), then left = below(W-w+1); none fits: torchvision's centre
//                           crop with the ratio clamped, no further draws
//   random_horizontal_flip  u = uniform() (float); flip if u < p
//   color_jitter            the order: Fisher-Yates on [0,1,2,3], for i = 3, 2, 1: swap(o[i], o[below(i+1)]);
//                           then, for the components that are non-zero, in the order brightness, contrast,
//                           saturation: uniform_range(max(0, 1-x), 1+x); hue: uniform_range(-hue, hue)
//   random_erasing          as in dataio/transforms.h, on the out_h x out_w image
//   resize, center_crop, normalize: none
// Apart from color_jitter's zero components, every listed draw is taken even when its outcome is certain (p = 0
// or 1, a single-value range). H, W: the size each step receives.
void image_pipeline_draw(const ImagePipeline& p, int h, int w, uint64_t seed, uint32_t epoch, uint32_t sample_index,
                         std::vector<ImageStepParams>* out);

// One worker thread's buffers, reused across samples.
struct ImageScratch {
  JpegCodec jpeg;
  DecodedImage decoded;
  std::vector<uint8_t> buf[2];  // intermediate u8 images (ping-pong)
  ResizeScratch resize;
  std::vector<ImageStepParams> params;
};

// One sample: `encoded` is a JPEG (is_jpeg; h, w, c are then ignored) or raw u8 HWC of (h, w, c) (c 1 or 3,
// converted to p.c as PIL's convert()). Draws the parameters on the stored size, decodes (when the first step is
// random_resized_crop, at the smallest DCT scale that keeps the crop at least size x size, the crop box mapped by
// the exact scale), runs the steps and writes (out_h, out_w, p.c) to dst as `dt`. Errors name `where`.
Status image_pipeline_apply(const ImagePipeline& p, ImageScratch& s, const uint8_t* encoded, size_t size,
                            bool is_jpeg, int h, int w, int c, uint64_t seed, uint32_t epoch, uint32_t sample_index,
                            OutDType dt, void* dst, const std::string& where);

}  // namespace trctl
