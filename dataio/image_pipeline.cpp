// The variable-size image pipeline of image_ops.h, assembled: validation (image_pipeline_build), the per-sample
// draws (image_pipeline_draw), and the per-sample driver (image_pipeline_apply) that decodes, runs the u8 steps on
// views and ping-pong buffers, and writes the fused flip + normalize + erase.
#include "dataio/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace trctl {

// ---- pipeline: validation and draws ----

namespace {

bool is_fixed_size_kind(TransformKind k) {
  return k == TransformKind::Pad || k == TransformKind::RandomCrop || k == TransformKind::RandomRotation ||
         k == TransformKind::RandomScale;
}

bool is_geometric(TransformKind k) {
  return k == TransformKind::RandomResizedCrop || k == TransformKind::Resize || k == TransformKind::CenterCrop;
}

bool positive_range(double lo, double hi) { return std::isfinite(lo) && std::isfinite(hi) && lo > 0 && lo <= hi; }

// Range checks of one step's own fields (as the spec parser's, for lists built in code). Appends messages.
void check_image_step(const TransformSpec& s, int c, std::vector<std::string>* msgs) {
  const bool sized = s.kind == TransformKind::RandomResizedCrop || is_geometric(s.kind);
  if (sized && (s.size < 1 || s.size > kJpegMaxSide)) {
    msgs->push_back("size " + std::to_string(s.size) + " must be in [1, " + std::to_string(kJpegMaxSide) + "]");
  }
  switch (s.kind) {
    case TransformKind::RandomResizedCrop:
      if (!positive_range(s.crop_scale_min, s.crop_scale_max)) msgs->push_back("scale must satisfy 0 < min <= max");
      if (!positive_range(s.crop_ratio_min, s.crop_ratio_max)) msgs->push_back("ratio must satisfy 0 < min <= max");
      break;
    case TransformKind::RandomHorizontalFlip:
      if (!(s.p >= 0 && s.p <= 1)) msgs->push_back("p must be in [0, 1]");
      break;
    case TransformKind::ColorJitter:
      for (double v : {s.brightness, s.contrast, s.saturation}) {
        if (!(v >= 0 && std::isfinite(v))) msgs->push_back("brightness, contrast, saturation must be finite, >= 0");
      }
      if (!(s.hue >= 0 && s.hue <= 0.5)) msgs->push_back("hue must be in [0, 0.5]");
      if (c != 3) msgs->push_back("needs 3-channel (RGB) images, the pipeline has " + std::to_string(c));
      break;
    case TransformKind::RandomErasing:
      if (!(s.p >= 0 && s.p <= 1)) msgs->push_back("p must be in [0, 1]");
      if (!(s.erase_scale_min >= 0 && s.erase_scale_min <= s.erase_scale_max && s.erase_scale_max <= 1)) {
        msgs->push_back("scale range must satisfy 0 <= min <= max <= 1");
      }
      if (!positive_range(s.ratio_min, s.ratio_max)) msgs->push_back("ratio range must satisfy 0 < min <= max");
      if (!std::isfinite(s.value)) msgs->push_back("value must be finite");
      break;
    default:
      break;
  }
}

// Position rules and the output size: errors in step order. The size is tracked once a step fixes it.
void check_image_steps(ImagePipeline* p, const std::string& where, std::vector<Error>* errs) {
  int normalizes = 0, normalize_at = -1;
  for (size_t i = 0; i < p->steps.size(); ++i) {
    if (p->steps[i].kind == TransformKind::Normalize && normalizes++ == 0) normalize_at = int(i);
  }
  if (normalizes == 0) errs->push_back({ErrCode::Missing, where, "transforms: a normalize step is required"});
  if (normalizes > 1) {
    errs->push_back({ErrCode::Invalid, where,
                     "transforms: normalize given " + std::to_string(normalizes) + " times (exactly one is allowed)"});
  }
  bool fixed = false;
  int h = 0, w = 0, last_geo = -1;
  for (size_t i = 0; i < p->steps.size(); ++i) {
    const TransformSpec& s = p->steps[i];
    const std::string head = "transform " + std::to_string(i + 1) + " (" + to_string(s.kind) + "): ";
    const int at = int(i);
    if (is_fixed_size_kind(s.kind)) {
      errs->push_back({ErrCode::NotSupported, where, head + "is not supported for variable-size image datasets yet"});
      continue;
    }
    if ((is_geometric(s.kind) || s.kind == TransformKind::ColorJitter) && normalize_at >= 0 && at > normalize_at) {
      errs->push_back({ErrCode::Invalid, where, head + "must come before normalize (it works on u8 images)"});
    }
    if (s.kind == TransformKind::RandomErasing && normalize_at >= 0 && at < normalize_at) {
      errs->push_back({ErrCode::Invalid, where, head + "must come after normalize (it fills in normalized units)"});
    }
    std::vector<std::string> msgs;
    check_image_step(s, p->c, &msgs);
    for (auto& m : msgs) errs->push_back({ErrCode::OutOfRange, where, head + m});
    const int size = std::min(std::max(s.size, 1), kJpegMaxSide);
    if (s.kind == TransformKind::RandomResizedCrop || s.kind == TransformKind::CenterCrop) {
      fixed = true;
      h = w = size;
    } else if (s.kind == TransformKind::Resize && fixed) {
      resize_shorter_side(h, w, size, &h, &w);
    }
    if (is_geometric(s.kind)) last_geo = at;
  }
  if (!fixed) {
    errs->push_back({ErrCode::Invalid, where,
                     "transforms: the output size would depend on each image's size; end the geometric steps with "
                     "random_resized_crop or center_crop (optionally followed by resize)"});
  }
  p->out_h = h;
  p->out_w = w;
  p->tail_from = last_geo + 1;
}

// mean or std given per channel or once for all; broadcast to c floats.
bool expand_channels(const std::vector<double>& v, int c, std::vector<float>* out) {
  if (v.size() != 1 && v.size() != size_t(c)) return false;
  out->assign(size_t(c), 0.0f);
  for (int i = 0; i < c; ++i) (*out)[size_t(i)] = static_cast<float>(v.size() == 1 ? v[0] : v[size_t(i)]);
  return true;
}

void check_normalization(ImagePipeline* p, const std::vector<double>& mean, const std::vector<double>& std,
                         const std::string& where, std::vector<Error>* errs) {
  const std::string need = " needs 1 or " + std::to_string(p->c) + " values (the images have " +
                            std::to_string(p->c) + " channels)";
  if (!expand_channels(mean, p->c, &p->mean)) errs->push_back({ErrCode::Invalid, where, "normalize: mean" + need});
  if (!expand_channels(std, p->c, &p->std)) errs->push_back({ErrCode::Invalid, where, "normalize: std" + need});
  for (float m : p->mean) {
    if (!std::isfinite(m)) errs->push_back({ErrCode::OutOfRange, where, "normalize: mean must be finite"});
  }
  for (float s : p->std) {
    if (!std::isfinite(s) || s == 0.0f) {
      errs->push_back({ErrCode::OutOfRange, where, "normalize: std must be finite and non-zero (as float)"});
    }
  }
}

}  // namespace

Result<ImagePipeline> image_pipeline_build(const std::vector<TransformSpec>& steps, const std::vector<double>& mean,
                                           const std::vector<double>& std, int c, const std::string& where) {
  if (c != 1 && c != 3) {
    return Error{ErrCode::OutOfRange, where, "image transforms: channels must be 1 or 3, got " + std::to_string(c)};
  }
  ImagePipeline p;
  p.steps = steps;
  p.c = c;
  std::vector<Error> errs;
  check_image_steps(&p, where, &errs);
  check_normalization(&p, mean, std, where, &errs);
  if (!errs.empty()) return errs;
  p.lut_f32.resize(size_t(c) * 256);
  p.lut_f16.resize(size_t(c) * 256);
  p.lut_bf16.resize(size_t(c) * 256);
  for (int ch = 0; ch < c; ++ch) {
    for (int v = 0; v < 256; ++v) {
      const float f = normalize_u8(uint8_t(v), p.mean[size_t(ch)], p.std[size_t(ch)]);
      p.lut_f32[size_t(ch) * 256 + size_t(v)] = f;
      p.lut_f16[size_t(ch) * 256 + size_t(v)] = float_to_half_bits(f);
      p.lut_bf16[size_t(ch) * 256 + size_t(v)] = float_to_bf16_bits(f);
    }
  }
  return p;
}

void image_pipeline_draw(const ImagePipeline& p, int h, int w, uint64_t seed, uint32_t epoch, uint32_t sample_index,
                         std::vector<ImageStepParams>* out) {
  out->assign(p.steps.size(), ImageStepParams{});
  PhiloxStream rng(seed, static_cast<uint32_t>(RngPurpose::Transform), epoch, sample_index);
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const TransformSpec& s = p.steps[i];
    ImageStepParams& sp = (*out)[i];
    switch (s.kind) {
      case TransformKind::RandomResizedCrop:
        sp.crop = random_resized_crop_params(s, h, w, rng);
        h = w = s.size;
        break;
      case TransformKind::RandomHorizontalFlip: sp.flip = static_cast<double>(rng.uniform()) < s.p; break;
      case TransformKind::ColorJitter: sp.jitter = color_jitter_params(s, rng); break;
      case TransformKind::Resize: resize_shorter_side(h, w, s.size, &h, &w); break;
      case TransformKind::CenterCrop: h = w = s.size; break;
      case TransformKind::RandomErasing: transforms_draw_erasing(s, h, w, rng, sp.erase); break;
      default: break;
    }
  }
}

// ---- pipeline: one sample ----

namespace {

// The image between steps: a view, and `mut` (the same pixels, writable) when it lies in the scratch, so that
// in-place steps (flip, color jitter) need no copy.
struct Current {
  ImageView v;
  uint8_t* mut = nullptr;
};

Current contiguous(uint8_t* data, int h, int w, int c) {
  return Current{ImageView{data, h, w, c, size_t(w) * size_t(c)}, data};
}

bool points_into(const std::vector<uint8_t>& b, const uint8_t* q) {
  return !b.empty() && q >= b.data() && q < b.data() + b.size();
}

// A scratch buffer of at least `bytes` that `cur` does not read from (grown, never shrunk).
uint8_t* spare_buffer(ImageScratch& s, const Current& cur, size_t bytes) {
  std::vector<uint8_t>& b = points_into(s.buf[0], cur.v.data) ? s.buf[1] : s.buf[0];
  if (b.size() < bytes) b.resize(bytes);
  return b.data();
}

void make_writable(ImageScratch& s, Current& cur) {
  if (cur.mut) return;
  const size_t row = size_t(cur.v.w) * size_t(cur.v.c);
  uint8_t* out = spare_buffer(s, cur, row * size_t(cur.v.h));
  for (int y = 0; y < cur.v.h; ++y) std::memcpy(out + size_t(y) * row, cur.v.data + size_t(y) * cur.v.stride, row);
  cur = contiguous(out, cur.v.h, cur.v.w, cur.v.c);
}

void flip_in_place(const Current& cur) {
  const int c = cur.v.c;
  for (int y = 0; y < cur.v.h; ++y) {
    uint8_t* row = cur.mut + size_t(y) * cur.v.stride;
    for (int a = 0, b = cur.v.w - 1; a < b; ++a, --b) std::swap_ranges(row + a * c, row + (a + 1) * c, row + b * c);
  }
}

ImageView sub_view(const ImageView& v, int top, int left, int h, int w) {
  return ImageView{v.data + size_t(top) * v.stride + size_t(left) * size_t(v.c), h, w, v.c, v.stride};
}

// torchvision's crop then resize to size x size. `scale` != 1: the image was decoded at that DCT scale, so the
// crop box (in stored pixels) maps to a fractional box of the decoded image, read from the enclosing view.
Status random_resized_crop_step(ImageScratch& s, Current& cur, const CropBox& b, int size, double scale,
                                const std::string& where) {
  const double fx0 = b.left * scale, fx1 = (b.left + b.w) * scale, fy0 = b.top * scale, fy1 = (b.top + b.h) * scale;
  const int ix0 = int(std::floor(fx0)), iy0 = int(std::floor(fy0));
  const int ix1 = std::min(int(std::ceil(fx1)), cur.v.w), iy1 = std::min(int(std::ceil(fy1)), cur.v.h);
  if (b.h < 1 || b.w < 1 || ix0 < 0 || iy0 < 0 || ix1 <= ix0 || iy1 <= iy0) {
    return Error{ErrCode::Internal, where, "random_resized_crop: crop box outside the decoded image"};
  }
  const ImageView view = sub_view(cur.v, iy0, ix0, iy1 - iy0, ix1 - ix0);
  uint8_t* out = spare_buffer(s, cur, size_t(size) * size_t(size) * size_t(cur.v.c));
  resize_region_u8(view, float(fx0 - ix0), float(fy0 - iy0), float(fx1 - ix0), float(fy1 - iy0), out, size, size,
                   s.resize);
  cur = contiguous(out, size, size, cur.v.c);
  return ok_status();
}

Status resize_step(ImageScratch& s, Current& cur, int size, const std::string& where) {
  int oh = 0, ow = 0;
  resize_shorter_side(cur.v.h, cur.v.w, size, &oh, &ow);
  if (oh == cur.v.h && ow == cur.v.w) return ok_status();  // torchvision returns the image itself
  if (oh > 4 * kJpegMaxSide || ow > 4 * kJpegMaxSide || int64_t(oh) * ow > kJpegMaxPixels) {
    return Error{ErrCode::Invalid, where,
                 "resize: " + std::to_string(cur.v.h) + "x" + std::to_string(cur.v.w) + " would become " +
                     std::to_string(oh) + "x" + std::to_string(ow) + ", too large"};
  }
  uint8_t* out = spare_buffer(s, cur, size_t(oh) * size_t(ow) * size_t(cur.v.c));
  resize_region_u8(cur.v, 0.0f, 0.0f, float(cur.v.w), float(cur.v.h), out, oh, ow, s.resize);
  cur = contiguous(out, oh, ow, cur.v.c);
  return ok_status();
}

// A view when the box lies inside the image; else a copy with torchvision's zero padding.
void center_crop_step(ImageScratch& s, Current& cur, int size) {
  const CropBox b = center_crop_box(cur.v.h, cur.v.w, size);
  const int c = cur.v.c;
  if (b.top >= 0 && b.left >= 0 && b.top + size <= cur.v.h && b.left + size <= cur.v.w) {
    const size_t offset = size_t(b.top) * cur.v.stride + size_t(b.left) * size_t(c);
    cur.v = sub_view(cur.v, b.top, b.left, size, size);
    if (cur.mut) cur.mut += offset;
    return;
  }
  const size_t row = size_t(size) * size_t(c);
  uint8_t* out = spare_buffer(s, cur, row * size_t(size));
  std::memset(out, 0, row * size_t(size));
  const int x0 = std::max(0, -b.left), x1 = std::min(size, cur.v.w - b.left);
  for (int y = std::max(0, -b.top); y < std::min(size, cur.v.h - b.top); ++y) {
    const uint8_t* in = cur.v.data + size_t(y + b.top) * cur.v.stride + size_t(x0 + b.left) * size_t(c);
    if (x1 > x0) std::memcpy(out + size_t(y) * row + size_t(x0) * size_t(c), in, size_t(x1 - x0) * size_t(c));
  }
  cur = contiguous(out, size, size, c);
}

// The u8 steps in order. Flips after the last geometric step only toggle *tail_flip (they commute with color
// jitter, whose contrast mean is flip-invariant); earlier ones are applied in place.
Status run_steps(const ImagePipeline& p, ImageScratch& s, double decode_scale, Current& cur, bool* tail_flip,
                 const std::string& where) {
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const TransformSpec& t = p.steps[i];
    const ImageStepParams& sp = s.params[i];
    Status st = ok_status();
    switch (t.kind) {
      case TransformKind::RandomResizedCrop:
        st = random_resized_crop_step(s, cur, sp.crop, t.size, i == 0 ? decode_scale : 1.0, where);
        break;
      case TransformKind::Resize: st = resize_step(s, cur, t.size, where); break;
      case TransformKind::CenterCrop: center_crop_step(s, cur, t.size); break;
      case TransformKind::RandomHorizontalFlip:
        if (!sp.flip) break;
        if (int(i) >= p.tail_from) {
          *tail_flip = !*tail_flip;
        } else {
          make_writable(s, cur);
          flip_in_place(cur);
        }
        break;
      case TransformKind::ColorJitter:
        make_writable(s, cur);
        color_jitter_apply_u8(sp.jitter, cur.mut, cur.v.h, cur.v.w, cur.v.stride);
        break;
      default: break;
    }
    if (!st.ok()) return st;
  }
  return ok_status();
}

// Raw u8 input: checked, then used in place (read-only) or converted to p.c channels as PIL's convert().
Status raw_input(const ImagePipeline& p, ImageScratch& s, const uint8_t* data, size_t size, int h, int w, int c,
                 Current& cur, const std::string& where) {
  const bool dims_ok = h >= 1 && w >= 1 && h <= kJpegMaxSide && w <= kJpegMaxSide && (c == 1 || c == 3);
  const size_t expect = dims_ok ? size_t(h) * size_t(w) * size_t(c) : 0;
  if (!data || !dims_ok || size != expect) {
    return Error{ErrCode::Format, where,
                 "raw image of " + std::to_string(size) + " bytes does not hold " + std::to_string(h) + "x" +
                     std::to_string(w) + "x" + std::to_string(c) + " u8 pixels (sides in [1, " +
                     std::to_string(kJpegMaxSide) + "], 1 or 3 channels)"};
  }
  cur = Current{ImageView{data, h, w, c, size_t(w) * size_t(c)}, nullptr};
  if (c == p.c) return ok_status();
  const size_t n = size_t(h) * size_t(w);
  uint8_t* out = spare_buffer(s, cur, n * size_t(p.c));
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* px = data + i * size_t(c);
    if (p.c == 3) {
      out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = px[0];
    } else {
      out[i] = uint8_t((px[0] * 19595 + px[1] * 38470 + px[2] * 7471 + 0x8000) >> 16);  // PIL's convert("L")
    }
  }
  cur = contiguous(out, h, w, p.c);
  return ok_status();
}

// The fused tail: (optionally mirrored) read, normalize through the LUT, then the erasing boxes, each mirrored
// when an odd number of flips comes after it.
template <class T, class Fill>
void write_output(const ImagePipeline& p, const std::vector<ImageStepParams>& params, const ImageView& v, bool flip,
                  const T* lut, Fill fill_value, T* dst) {
  const int c = p.c, w = p.out_w;
  for (int y = 0; y < p.out_h; ++y) {
    const uint8_t* row = v.data + size_t(y) * v.stride;
    T* o = dst + size_t(y) * size_t(w) * size_t(c);
    if (c == 3) {
      for (int x = 0; x < w; ++x) {
        const uint8_t* px = row + 3 * size_t(flip ? w - 1 - x : x);
        o[3 * x] = lut[px[0]];
        o[3 * x + 1] = lut[256 + px[1]];
        o[3 * x + 2] = lut[512 + px[2]];
      }
    } else {
      for (int x = 0; x < w; ++x) o[x] = lut[row[flip ? w - 1 - x : x]];
    }
  }
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepParams& e = params[i].erase;
    if (p.steps[i].kind != TransformKind::RandomErasing || !e.erase) continue;
    bool mirrored = false;
    for (size_t j = i + 1; j < p.steps.size(); ++j) {
      mirrored ^= p.steps[j].kind == TransformKind::RandomHorizontalFlip && params[j].flip;
    }
    const int ex = mirrored ? w - e.erase_x - e.erase_w : e.erase_x;
    const int y0 = std::max(0, e.erase_y), y1 = std::min(p.out_h, e.erase_y + e.erase_h);
    const int x0 = std::max(0, ex), x1 = std::min(w, ex + e.erase_w);
    const T value = fill_value(p.steps[i].value);
    for (int y = y0; y < y1 && x1 > x0; ++y) {
      T* o = dst + (size_t(y) * size_t(w) + size_t(x0)) * size_t(c);
      std::fill(o, o + size_t(x1 - x0) * size_t(c), value);
    }
  }
}

}  // namespace

Status image_pipeline_apply(const ImagePipeline& p, ImageScratch& s, const uint8_t* encoded, size_t size,
                            bool is_jpeg, int h, int w, int c, uint64_t seed, uint32_t epoch, uint32_t sample_index,
                            OutDType dt, void* dst, const std::string& where) {
  if (!dst || p.steps.empty() || p.out_h < 1 || p.lut_f32.size() != size_t(p.c) * 256) {
    return Error{ErrCode::Invalid, where,
                 "image transforms: no output buffer, or a pipeline not made by image_pipeline_build"};
  }
  Current cur;
  int stored_h = h, stored_w = w;
  if (is_jpeg) {
    Result<JpegInfo> info = s.jpeg.probe(encoded, size, where);
    if (!info.ok()) return info.errors();
    stored_h = info->height;
    stored_w = info->width;
  } else {
    Status st = raw_input(p, s, encoded, size, h, w, c, cur, where);
    if (!st.ok()) return st;
  }
  image_pipeline_draw(p, stored_h, stored_w, seed, epoch, sample_index, &s.params);
  double decode_scale = 1.0;
  if (is_jpeg) {
    JpegScale scale;  // 1/1 unless the first step crops: then the smallest keeping the crop >= size x size
    if (p.steps[0].kind == TransformKind::RandomResizedCrop) {
      const CropBox& b = s.params[0].crop;
      scale = jpeg_scale_for_region(stored_w, stored_h, b.w, b.h, p.steps[0].size, p.steps[0].size);
    }
    Status st = s.jpeg.decode_scaled(encoded, size, p.c, scale, &s.decoded, where);
    if (!st.ok()) return st;
    decode_scale = s.decoded.scale;
    cur = contiguous(s.decoded.pixels.data(), s.decoded.h, s.decoded.w, s.decoded.c);
  }
  bool tail_flip = false;
  Status st = run_steps(p, s, decode_scale, cur, &tail_flip, where);
  if (!st.ok()) return st;
  if (cur.v.h != p.out_h || cur.v.w != p.out_w || cur.v.c != p.c) {
    return Error{ErrCode::Internal, where, "image transforms: the steps produced an image of an unexpected size"};
  }
  if (dt == OutDType::F32) {
    write_output<float>(p, s.params, cur.v, tail_flip, p.lut_f32.data(), [](double v) { return float(v); },
                        static_cast<float*>(dst));
  } else if (dt == OutDType::F16) {
    write_output<uint16_t>(p, s.params, cur.v, tail_flip, p.lut_f16.data(),
                           [](double v) { return float_to_half_bits(float(v)); }, static_cast<uint16_t*>(dst));
  } else {
    write_output<uint16_t>(p, s.params, cur.v, tail_flip, p.lut_bf16.data(),
                           [](double v) { return float_to_bf16_bits(float(v)); }, static_cast<uint16_t*>(dst));
  }
  return ok_status();
}

}  // namespace trctl
