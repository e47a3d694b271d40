// JpegCodec (see jpeg.h): header checks before any allocation, scaled decode into reused buffers, PIL-equivalent
// channel conversions, and deterministic encode; every TurboJPEG failure becomes an ErrCode::Format error.
#include "dataio/jpeg.h"

#include <turbojpeg.h>

#include <cstring>
#include <utility>

namespace trctl {

namespace {

static_assert(sizeof(unsigned long) >= sizeof(size_t), "TurboJPEG takes buffer sizes as unsigned long");

Error format_error(const std::string& where, const std::string& what) { return {ErrCode::Format, where, what}; }

// PIL's MULDIV255: a * b / 255, rounded, for a, b in [0, 255].
inline int muldiv255(int a, int b) {
  int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// PIL's rgb2l (Convert.c, L24): ITU-R 601-2 luma in 16-bit fixed point, rounded.
inline uint8_t rgb_to_l(const uint8_t* p) {
  return static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

// PIL reads a CMYK JPEG as "CMYK;I" (Adobe's inverted storage), so with the stored bytes s: C = 255 - s_c, and
// cmyk2rgb's nk = 255 - K = s_k; R = clip(nk - C * nk / 255).
inline void cmyk_to_rgb(const uint8_t* s, uint8_t* out) {
  const int nk = s[3];
  for (int i = 0; i < 3; ++i) {
    int v = nk - muldiv255(255 - s[i], nk);
    out[i] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
}

int scaled(int dim, const tjscalingfactor& f) { return TJSCALED(dim, f); }

// The largest factor <= 1 giving the same decoded size as `f`: the one tjDecompress2 picks for that size.
JpegScale canonical_scale(int width, int height, tjscalingfactor f) {
  int n = 0;
  const tjscalingfactor* all = tjGetScalingFactors(&n);
  const int sw = scaled(width, f), sh = scaled(height, f);
  JpegScale best{f.num, f.denom};
  for (int i = 0; all && i < n; ++i) {
    const tjscalingfactor& g = all[i];
    if (g.num > g.denom || scaled(width, g) != sw || scaled(height, g) != sh) continue;
    if (int64_t(g.num) * best.denom > int64_t(best.num) * g.denom) best = {g.num, g.denom};
  }
  return best;
}

// Whether s is one of TurboJPEG's factors <= 1 (as a fraction: 2/4 counts as 1/2).
bool is_scaling_factor(JpegScale s) {
  int n = 0;
  const tjscalingfactor* all = tjGetScalingFactors(&n);
  if (s.num < 1 || s.denom < 1 || s.num > s.denom) return false;
  for (int i = 0; all && i < n; ++i) {
    if (int64_t(all[i].num) * s.denom == int64_t(s.num) * all[i].denom) return true;
  }
  return false;
}

// The smallest factor <= 1 for which fits(factor) holds (1/1 when none).
template <class Fits>
JpegScale smallest_scale(int width, int height, Fits fits) {
  int n = 0;
  const tjscalingfactor* all = tjGetScalingFactors(&n);
  tjscalingfactor best{1, 1};
  for (int i = 0; all && i < n; ++i) {
    const tjscalingfactor& g = all[i];
    if (g.num > g.denom || !fits(g)) continue;
    if (int64_t(g.num) * best.denom < int64_t(best.num) * g.denom) best = g;
  }
  return canonical_scale(width, height, best);
}

// Header of a JPEG, checked: SOI marker, TurboJPEG's parse, then sizes before anything is allocated from them.
Status read_header(void* dec, const uint8_t* data, size_t size, const std::string& where, int* w, int* h,
                   int* colorspace) {
  if (!dec) return Error{ErrCode::Internal, where, "TurboJPEG decompressor could not be initialized"};
  if (!data || size < 4 || data[0] != 0xFF || data[1] != 0xD8) {
    return format_error(where, "not a JPEG image (no SOI marker; " + std::to_string(size) + " bytes)");
  }
  int subsamp = 0;
  *w = *h = 0;
  if (tjDecompressHeader3(dec, data, static_cast<unsigned long>(size), w, h, &subsamp, colorspace) != 0) {
    return format_error(where, std::string("corrupt JPEG header: ") + tjGetErrorStr2(dec));
  }
  if (*w < 1 || *h < 1 || *w > kJpegMaxSide || *h > kJpegMaxSide || int64_t(*w) * int64_t(*h) > kJpegMaxPixels) {
    return format_error(where, "JPEG size " + std::to_string(*w) + "x" + std::to_string(*h) +
                                   " is zero or absurd (sides must be in [1, " + std::to_string(kJpegMaxSide) +
                                   "], at most " + std::to_string(kJpegMaxPixels) + " pixels)");
  }
  return ok_status();
}

}  // namespace

JpegScale jpeg_scale_for_region(int width, int height, int region_w, int region_h, int min_w, int min_h) {
  if ((min_w <= 0 && min_h <= 0) || width < 1 || height < 1) return JpegScale{};
  return smallest_scale(width, height, [&](const tjscalingfactor& g) {
    return int64_t(region_w) * g.num >= int64_t(min_w) * g.denom &&
           int64_t(region_h) * g.num >= int64_t(min_h) * g.denom;
  });
}

JpegCodec::JpegCodec() : dec_(tjInitDecompress()), enc_(tjInitCompress()) {}

JpegCodec::~JpegCodec() {
  if (dec_) tjDestroy(dec_);
  if (enc_) tjDestroy(enc_);
}

JpegCodec::JpegCodec(JpegCodec&& other) noexcept
    : dec_(std::exchange(other.dec_, nullptr)), enc_(std::exchange(other.enc_, nullptr)), tmp_(std::move(other.tmp_)) {}

JpegCodec& JpegCodec::operator=(JpegCodec&& other) noexcept {
  if (this != &other) {
    if (dec_) tjDestroy(dec_);
    if (enc_) tjDestroy(enc_);
    dec_ = std::exchange(other.dec_, nullptr);
    enc_ = std::exchange(other.enc_, nullptr);
    tmp_ = std::move(other.tmp_);
  }
  return *this;
}

// TurboJPEG 2.1 leaves a decompressor mid-stream after a failed header read (tjDecompressHeader3 does not abort
// it), so the next image's header parse fails ("Bogus Huffman table definition", found by tests/data/fuzz_test):
// after any failure the handle is replaced by a fresh one.
void JpegCodec::reset_decoder() {
  if (dec_) tjDestroy(dec_);
  dec_ = tjInitDecompress();
}

Result<JpegInfo> JpegCodec::probe(const uint8_t* data, size_t size, const std::string& where) {
  JpegInfo info;
  int colorspace = 0;
  Status st = read_header(dec_, data, size, where, &info.width, &info.height, &colorspace);
  if (!st.ok()) {
    reset_decoder();
    return st.errors();
  }
  info.channels = colorspace == TJCS_GRAY ? 1 : 3;
  return info;
}

Status JpegCodec::decode(const uint8_t* data, size_t size, int channels, int min_w, int min_h, DecodedImage* out,
                         const std::string& where) {
  int w = 0, h = 0, colorspace = 0;
  Status st = read_header(dec_, data, size, where, &w, &h, &colorspace);
  if (!st.ok()) {
    reset_decoder();
    return st;
  }
  JpegScale scale;
  if (min_w > 0 || min_h > 0) {
    scale = smallest_scale(w, h, [&](const tjscalingfactor& g) {
      return scaled(w, g) >= min_w && scaled(h, g) >= min_h;
    });
  }
  return decode_scaled(data, size, channels, scale, out, where);
}

// Stops at the first libjpeg warning (TJFLAG_STOPONWARNING) and caps progressive scans (TJFLAG_LIMITSCANS, a
// guard against crafted files); default ISLOW DCT and fancy upsampling, as PIL decodes.
Status JpegCodec::run_decompress(const uint8_t* data, size_t size, uint8_t* dst, int sw, int sh, int pixel_format,
                                 const std::string& where) {
  const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
  if (tjDecompress2(dec_, data, static_cast<unsigned long>(size), dst, sw, 0, sh, pixel_format, flags) != 0) {
    const bool warning = tjGetErrorCode(dec_) == TJERR_WARNING;
    const Error e = format_error(where, std::string("corrupt JPEG data (") + (warning ? "warning" : "error") +
                                            "): " + tjGetErrorStr2(dec_));
    reset_decoder();
    return e;
  }
  return ok_status();
}

Status JpegCodec::decode_scaled(const uint8_t* data, size_t size, int channels, JpegScale scale, DecodedImage* out,
                                const std::string& where) {
  if (channels != 1 && channels != 3) {
    return Error{ErrCode::Invalid, where, "JPEG decode: channels must be 1 or 3, got " + std::to_string(channels)};
  }
  int w = 0, h = 0, colorspace = 0;
  Status st = read_header(dec_, data, size, where, &w, &h, &colorspace);
  if (!st.ok()) {
    reset_decoder();
    return st;
  }
  if (!is_scaling_factor(scale)) {
    return Error{ErrCode::Invalid, where,
                 "JPEG decode: " + std::to_string(scale.num) + "/" + std::to_string(scale.denom) +
                     " is not a TurboJPEG scaling factor <= 1"};
  }
  scale = canonical_scale(w, h, tjscalingfactor{scale.num, scale.denom});  // what tjDecompress2 will apply
  const tjscalingfactor f{scale.num, scale.denom};
  const int sw = scaled(w, f), sh = scaled(h, f);
  out->scale = scale.value();
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) return decode_cmyk(data, size, channels, sw, sh, out, where);
  const size_t n = size_t(sw) * size_t(sh);
  out->pixels.resize(n * size_t(channels));
  out->w = sw;
  out->h = sh;
  out->c = channels;
  if (channels == 3 || colorspace == TJCS_GRAY) {
    return run_decompress(data, size, out->pixels.data(), sw, sh, channels == 3 ? TJPF_RGB : TJPF_GRAY, where);
  }
  // A color JPEG read as gray: PIL decodes RGB, then convert("L").
  tmp_.resize(n * 3);
  st = run_decompress(data, size, tmp_.data(), sw, sh, TJPF_RGB, where);
  if (!st.ok()) return st;
  for (size_t i = 0; i < n; ++i) out->pixels[i] = rgb_to_l(&tmp_[i * 3]);
  return ok_status();
}

// libjpeg cannot convert CMYK to RGB itself: decode the four stored channels, then convert as PIL does.
Status JpegCodec::decode_cmyk(const uint8_t* data, size_t size, int channels, int sw, int sh, DecodedImage* out,
                              const std::string& where) {
  const size_t n = size_t(sw) * size_t(sh);
  tmp_.resize(n * 4);
  Status st = run_decompress(data, size, tmp_.data(), sw, sh, TJPF_CMYK, where);
  if (!st.ok()) return st;
  out->pixels.resize(n * size_t(channels));
  out->w = sw;
  out->h = sh;
  out->c = channels;
  for (size_t i = 0; i < n; ++i) {
    uint8_t rgb[3];
    cmyk_to_rgb(&tmp_[i * 4], rgb);
    if (channels == 3) {
      std::memcpy(&out->pixels[i * 3], rgb, 3);
    } else {
      out->pixels[i] = rgb_to_l(rgb);
    }
  }
  return ok_status();
}

Result<std::vector<uint8_t>> JpegCodec::encode(const uint8_t* pixels, int w, int h, int c, int quality,
                                               const std::string& where) {
  if (!enc_) return Error{ErrCode::Internal, where, "TurboJPEG compressor could not be initialized"};
  if (!pixels || w < 1 || h < 1 || w > kJpegMaxSide || h > kJpegMaxSide || (c != 1 && c != 3) || quality < 1 ||
      quality > 100) {
    return Error{ErrCode::Invalid, where,
                 "JPEG encode: need pixels, sides in [1, " + std::to_string(kJpegMaxSide) +
                     "], 1 or 3 channels and quality in [1, 100]; got " + std::to_string(w) + "x" +
                     std::to_string(h) + "x" + std::to_string(c) + " at quality " + std::to_string(quality)};
  }
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  const int rc = tjCompress2(enc_, pixels, w, 0, h, c == 3 ? TJPF_RGB : TJPF_GRAY, &buf, &len,
                             c == 3 ? TJSAMP_420 : TJSAMP_GRAY, quality, 0);
  if (rc != 0) {
    if (buf) tjFree(buf);
    return Error{ErrCode::Internal, where, std::string("JPEG encode failed: ") + tjGetErrorStr2(enc_)};
  }
  std::vector<uint8_t> bytes(buf, buf + len);
  tjFree(buf);
  return bytes;
}

}  // namespace trctl
