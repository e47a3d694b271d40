// GPU test helpers (see gpu_test_util.h).
#include "tests/gpu/gpu_test_util.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace trctl::gputest {

DevBuf::DevBuf(size_t bytes) : bytes_(bytes) {
  if (bytes_ == 0) bytes_ = 16;
  REQUIRE_CUDA(cudaMalloc(&p_, bytes_));
}

DevBuf::~DevBuf() {
  if (p_) cudaFree(p_);
}

DevBuf& DevBuf::operator=(DevBuf&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

CudaContext make_context() {
  auto r = cuda_context_create(0);
  REQUIRE_OK(r);
  return std::move(r.value());
}

void copy_sync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  REQUIRE_CUDA(cudaDeviceSynchronize());  // no kernel on any stream still uses dst or src
  REQUIRE_CUDA(cudaMemcpy(dst, src, bytes, kind));
  REQUIRE_CUDA(cudaDeviceSynchronize());  // the copy has landed before anything launched after it
}

void memset_sync(void* dst, int value, size_t bytes) {
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE_CUDA(cudaMemset(dst, value, bytes));
  REQUIRE_CUDA(cudaDeviceSynchronize());
}

void poison(const DevBuf& b) { memset_sync(b.get(), 0xFF, b.bytes()); }

void check_tail_poisoned(const std::string& what, const DevBuf& b, size_t bytes, size_t tail) {
  const std::vector<uint8_t> t = from_device<uint8_t>(static_cast<const char*>(b.get()) + bytes, tail);
  size_t written = 0;
  for (uint8_t v : t) written += v != 0xFF;
  INFO(what << ": " << written << " of the " << tail << " bytes after the output written");
  CHECK(written == 0);
}

void sync_ok(const CudaContext& ctx) { REQUIRE_CUDA(cudaStreamSynchronize(ctx.stream)); }

// ---- conversions ----

uint16_t f32_to_f16_bits(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7E00;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;  // 65504 + half an ulp rounds (to even) up to 2^16: inf
  if (a < std::ldexp(1.0, -14)) {          // subnormal: multiples of 2^-24
    const double r = std::nearbyint(std::ldexp(a, 24));  // exact scaling; ties to even (default rounding mode)
    return sign | static_cast<uint16_t>(r);              // r == 1024 is the smallest normal, encoded the same way
  }
  int e2 = 0;
  std::frexp(a, &e2);
  int e = e2 - 1;  // a in [2^e, 2^(e+1))
  double r = std::nearbyint(std::ldexp(a, 10 - e));  // in [1024, 2048]
  if (r == 2048.0) {
    r = 1024.0;
    ++e;
  }
  if (e > 15) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(((e + 15) << 10) | (static_cast<int>(r) - 1024));
}

float f16_bits_to_f32(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return m ? std::nanf("") : static_cast<float>(s * INFINITY);
  if (e == 0) return static_cast<float>(s * std::ldexp(m, -24));
  return static_cast<float>(s * std::ldexp(1024 + m, e - 25));
}

uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040);
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;  // round to nearest even on the 16 dropped bits; carries into the exponent (up to inf)
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float round_to(GpuDType t, float f) {
  switch (t) {
    case GpuDType::F16: return f16_bits_to_f32(f32_to_f16_bits(f));
    case GpuDType::BF16: return bf16_bits_to_f32(f32_to_bf16_bits(f));
    case GpuDType::F32: break;
  }
  return f;
}

uint16_t lowp_bits(GpuDType t, float f) { return t == GpuDType::BF16 ? f32_to_bf16_bits(f) : f32_to_f16_bits(f); }
float lowp_value(GpuDType t, uint16_t bits) {
  return t == GpuDType::BF16 ? bf16_bits_to_f32(bits) : f16_bits_to_f32(bits);
}

double unit_roundoff(GpuDType t) {
  switch (t) {
    case GpuDType::F16: return std::ldexp(1.0, -11);
    case GpuDType::BF16: return std::ldexp(1.0, -8);
    case GpuDType::F32: break;
  }
  return std::ldexp(1.0, -24);
}

DevBuf to_device_as(GpuDType t, const std::vector<float>& v) {
  if (t == GpuDType::F32) return to_device(v);
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = lowp_bits(t, v[i]);
  return to_device(bits);
}

std::vector<float> from_device_as(GpuDType t, const void* p, size_t n) {
  if (t == GpuDType::F32) return from_device<float>(p, n);
  const std::vector<uint16_t> bits = from_device<uint16_t>(p, n);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lowp_value(t, bits[i]);
  return v;
}

std::vector<float> Rng::uniform_vec(size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (auto& x : v) x = uniform(lo, hi);
  return v;
}

std::vector<float> Rng::normal_vec(size_t n, float mean, float sd) {
  std::vector<float> v(n);
  for (auto& x : v) x = normal(mean, sd);
  return v;
}

// ---- comparisons ----

namespace {

std::string index_text(size_t i, int64_t cols) {
  if (cols <= 0) return "[" + std::to_string(i) + "]";
  return "[" + std::to_string(i / cols) + "][" + std::to_string(i % cols) + "]";
}

}  // namespace

CompareResult compare_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& ref,
                            const std::vector<double>& bound, int64_t cols) {
  CompareResult r;
  std::ostringstream os;
  os.precision(9);
  if (got.size() != ref.size() || bound.size() != ref.size()) {
    r.ok = false;
    os << what << ": size mismatch got " << got.size() << " ref " << ref.size() << " bound " << bound.size();
    r.text = os.str();
    std::printf("  [FAIL] %s\n", r.text.c_str());
    return r;
  }
  size_t bad = 0, unwritten = 0, first_unwritten = 0, worst = 0;
  double worst_ratio = -1.0, max_abs = 0.0, max_rel = 0.0;
  std::vector<size_t> first_bad;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool ref_nan = std::isnan(ref[i]);
    if (std::isnan(got[i]) && !ref_nan) {
      if (unwritten++ == 0) first_unwritten = i;
      continue;
    }
    if (ref_nan) {
      if (!std::isnan(got[i])) {
        ++bad;
        if (first_bad.size() < 5) first_bad.push_back(i);
      }
      continue;
    }
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      if (got[i] != ref[i]) {
        ++bad;
        if (first_bad.size() < 5) first_bad.push_back(i);
      }
      continue;
    }
    const double d = std::fabs(got[i] - ref[i]);
    max_abs = std::max(max_abs, d);
    if (ref[i] != 0.0) max_rel = std::max(max_rel, d / std::fabs(ref[i]));
    const double ratio = bound[i] > 0 ? d / bound[i] : (d > 0 ? INFINITY : 0.0);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
    if (!(d <= bound[i])) {
      ++bad;
      if (first_bad.size() < 5) first_bad.push_back(i);
    }
  }
  r.ok = bad == 0 && unwritten == 0;
  os << what << ": " << ref.size() << " elements";
  if (!r.ok) os << ", " << bad << " outside tolerance, " << unwritten << " unwritten (NaN)";
  if (unwritten) os << " (first unwritten " << index_text(first_unwritten, cols) << ")";
  if (worst_ratio >= 0) {
    os << "; worst " << index_text(worst, cols) << " got " << got[worst] << " ref " << ref[worst] << " |diff| "
       << std::fabs(got[worst] - ref[worst]) << " bound " << bound[worst] << " (diff/bound " << worst_ratio << ")";
  }
  os << "; max |diff| " << max_abs << ", max rel diff " << max_rel;
  for (size_t i : first_bad) os << "\n    bad " << index_text(i, cols) << ": got " << got[i] << " ref " << ref[i]
                                << " bound " << bound[i];
  r.text = os.str();
  std::printf("  [%s] %s\n", r.ok ? "ok" : "FAIL", r.text.c_str());
  return r;
}

CompareResult compare_bitwise(const std::string& what, const void* a, const void* b, size_t bytes, size_t elem_size) {
  CompareResult r;
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  size_t diff_elems = 0, first = 0;
  for (size_t e = 0; e * elem_size < bytes; ++e) {
    if (std::memcmp(pa + e * elem_size, pb + e * elem_size, std::min(elem_size, bytes - e * elem_size)) != 0) {
      if (diff_elems++ == 0) first = e;
    }
  }
  r.ok = diff_elems == 0;
  std::ostringstream os;
  os << what << ": " << (r.ok ? "bitwise identical" : "NOT bitwise identical") << " (" << bytes / elem_size
     << " elements)";
  if (!r.ok) os << ", " << diff_elems << " differ, first at [" << first << "]";
  r.text = os.str();
  std::printf("  [%s] %s\n", r.ok ? "ok" : "FAIL", r.text.c_str());
  return r;
}

}  // namespace trctl::gputest
