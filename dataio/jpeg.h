// JPEG decode and encode through TurboJPEG 2.1 (JpegCodec), with DCT-domain downscaling (scaling factors M/8) so
// that a sample whose crop is small decodes fewer pixels. Every failure is an error value naming the sample.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

constexpr int kJpegMaxSide = 16384;                  // a larger side is rejected as absurd (corrupt header)
constexpr int64_t kJpegMaxPixels = int64_t(1) << 28;  // likewise for width * height

// channels: 1 for a grayscale JPEG, 3 for anything else (YCbCr, RGB, CMYK, YCCK: all decoded as RGB).
struct JpegInfo {
  int width = 0, height = 0, channels = 0;
};

struct DecodedImage {
  int w = 0, h = 0, c = 0;
  std::vector<uint8_t> pixels;  // (h, w, c) u8; size exactly h * w * c
  double scale = 1;             // decoded size / original size: the DCT scaling factor M/8 (w = ceil(W * scale))
};

// A TurboJPEG scaling factor num / denom (TurboJPEG 2.1 offers 1/8 .. 8/8 in eighths, and larger ones unused here).
struct JpegScale {
  int num = 1, denom = 1;
  double value() const { return double(num) / double(denom); }
};

// The smallest factor <= 1 that keeps a region_w x region_h region of the full-size image at least min_w x min_h
// (region * num / denom >= min, exactly); 1/1 when no smaller one does. Among factors giving the same decoded
// size of a width x height image it returns the largest, the one tjDecompress2 actually applies, so that
// DecodedImage::scale is the true factor.
JpegScale jpeg_scale_for_region(int width, int height, int region_w, int region_h, int min_w, int min_h);

// One TurboJPEG decompressor and compressor; not thread-safe (one per worker thread). Movable, not copyable.
class JpegCodec {
 public:
  JpegCodec();
  ~JpegCodec();
  JpegCodec(JpegCodec&& other) noexcept;
  JpegCodec& operator=(JpegCodec&& other) noexcept;
  JpegCodec(const JpegCodec&) = delete;
  JpegCodec& operator=(const JpegCodec&) = delete;

  // Header only. Errors (ErrCode::Format, where = `where`): not a JPEG, truncated header, zero or absurd sizes.
  Result<JpegInfo> probe(const uint8_t* data, size_t size, const std::string& where);

  // Decodes to `channels` (1 or 3) u8 HWC. With min_w/min_h > 0, uses the smallest scaling factor <= 1 whose
  // decoded size is >= (min_w, min_h). `out`'s buffer is reused (no reallocation when big enough). Conversions
  // match PIL's convert(): gray -> RGB replicates; color -> gray is L = (19595 R + 38470 G + 7471 B + 0x8000)
  // >> 16 on the decoded RGB; CMYK/YCCK (Adobe, inverted as PIL assumes) -> RGB is PIL's cmyk2rgb. Corrupt data,
  // including what libjpeg only warns about (premature end of data, extraneous bytes), is ErrCode::Format.
  Status decode(const uint8_t* data, size_t size, int channels, int min_w, int min_h, DecodedImage* out,
                const std::string& where);
  // The same at a given factor (from jpeg_scale_for_region; another factor is ErrCode::Invalid).
  Status decode_scaled(const uint8_t* data, size_t size, int channels, JpegScale scale, DecodedImage* out,
                       const std::string& where);

  // Encodes u8 HWC (c = 1 or 3) at quality 1..100, 4:2:0 chroma subsampling for c = 3; deterministic output.
  Result<std::vector<uint8_t>> encode(const uint8_t* pixels, int w, int h, int c, int quality,
                                      const std::string& where);

 private:
  void reset_decoder();  // a fresh decompressor after a failure (see jpeg.cpp)
  Status decode_cmyk(const uint8_t* data, size_t size, int channels, int sw, int sh, DecodedImage* out,
                     const std::string& where);
  Status run_decompress(const uint8_t* data, size_t size, uint8_t* dst, int sw, int sh, int pixel_format,
                        const std::string& where);
  void* dec_ = nullptr;  // tjhandle (void*), kept opaque so that users need not include turbojpeg.h
  void* enc_ = nullptr;
  std::vector<uint8_t> tmp_;  // CMYK or RGB rows before conversion to the requested channels
};

}  // namespace trctl
