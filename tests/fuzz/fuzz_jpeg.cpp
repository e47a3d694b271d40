// libFuzzer target: JPEG decoding (dataio/jpeg.*) and the variable-size image pipeline (dataio/image_ops.h,
// image_pipeline.cpp). Input: the bytes of one JPEG file. Asserts: probe, decode (RGB and gray, full size and
// DCT-scaled) and image_pipeline_apply return a value or an error, never crash; a decoded image has exactly
// h * w * c bytes and the size the probe announced (scaled); transformed outputs are finite. Images that the
// header says are larger than 4 Mpixel are probed only, to bound time and memory per input (the reader accepts
// them by design, up to kJpegMaxPixels).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dataio/image_ops.h"
#include "dataio/jpeg.h"

using namespace trctl;

namespace {

constexpr int64_t kMaxFuzzPixels = int64_t(1) << 22;
constexpr int kOut = 12;  // output side of both pipelines

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_jpeg: %s\n", what);
  std::abort();
}

TransformSpec step(TransformKind k, int size = 0) {
  TransformSpec s;
  s.kind = k;
  s.size = size;
  return s;
}

// RGB: random_resized_crop 12 + flip + color_jitter + normalize (decodes at a DCT scale); gray: resize 14 +
// center_crop 12 + normalize.
struct Pipelines {
  ImagePipeline rgb, gray;
  Pipelines() {
    TransformSpec jitter = step(TransformKind::ColorJitter);
    jitter.brightness = jitter.contrast = jitter.saturation = 0.4;
    jitter.hue = 0.1;
    Result<ImagePipeline> a = image_pipeline_build(
        {step(TransformKind::RandomResizedCrop, kOut), step(TransformKind::RandomHorizontalFlip), jitter,
         step(TransformKind::Normalize)},
        {0.5, 0.4, 0.3}, {0.2, 0.25, 0.3}, 3, "fuzz");
    Result<ImagePipeline> b = image_pipeline_build(
        {step(TransformKind::Resize, 14), step(TransformKind::CenterCrop, kOut), step(TransformKind::Normalize)},
        {0.5}, {0.25}, 1, "fuzz");
    if (!a.ok() || !b.ok()) fail("the harness's pipelines are invalid");
    rgb = std::move(a.value());
    gray = std::move(b.value());
  }
};

void check_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) fail("non-finite pipeline output");
}

void check_decoded(const DecodedImage& img, int channels) {
  if (img.c != channels || img.w < 1 || img.h < 1) fail("decoded image with bad dimensions");
  if (img.pixels.size() != size_t(img.w) * size_t(img.h) * size_t(img.c)) fail("decoded size != h * w * c");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static JpegCodec codec;
  static const Pipelines pipes;
  static ImageScratch scratch;
  static DecodedImage img;
  std::vector<float> out(size_t(kOut) * kOut * 3);

  Result<JpegInfo> info = codec.probe(data, size, "fuzz");
  if (!info.ok()) return 0;
  const JpegInfo in = info.value();
  if (in.width < 1 || in.height < 1 || (in.channels != 1 && in.channels != 3)) fail("probe accepted bad sizes");
  if (int64_t(in.width) * in.height > kMaxFuzzPixels) return 0;

  const bool rgb_ok = codec.decode(data, size, 3, 0, 0, &img, "fuzz").ok();
  if (rgb_ok) {
    check_decoded(img, 3);
    if (img.w != in.width || img.h != in.height) fail("full-size decode differs from the probed size");
    // The decoded pixels through the pipeline as raw input.
    if (image_pipeline_apply(pipes.rgb, scratch, img.pixels.data(), img.pixels.size(), false, img.h, img.w, 3, 1, 0,
                             7, OutDType::F32, out.data(), "fuzz")
            .ok())
      check_finite(out);
  }
  if (codec.decode(data, size, 1, 5, 3, &img, "fuzz").ok()) check_decoded(img, 1);
  const JpegScale sc = jpeg_scale_for_region(in.width, in.height, in.width, in.height, 1, 1);
  if (codec.decode_scaled(data, size, 3, sc, &img, "fuzz").ok()) check_decoded(img, 3);

  // The pipelines straight from the JPEG bytes (the loader's path: decode inside, at a DCT scale).
  (void)image_pipeline_apply(pipes.rgb, scratch, data, size, true, 0, 0, 0, 3, 1, uint32_t(size), OutDType::F16,
                             out.data(), "fuzz");  // fp16 bits: no finiteness check
  std::vector<float> g(size_t(kOut) * kOut);
  if (image_pipeline_apply(pipes.gray, scratch, data, size, true, 0, 0, 0, 3, 1, 0, OutDType::F32, g.data(), "fuzz")
          .ok())
    check_finite(g);
  return 0;
}
