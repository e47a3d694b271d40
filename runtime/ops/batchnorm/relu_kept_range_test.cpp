// kept_range_search (relu_kept_range.h) against every 16-bit input: for F16 and BF16 and constants (m, scale, beta)
// that include zeros of both signs, subnormals, huge values, infinities and NaN, the range it returns holds exactly
// the inputs whose recomputed ReLU mask keeps the gradient -- relu_kept<T> of bn_elem.cuh emulated on the host (F16:
// v > 2^-25, the values that round to a positive half; BF16: v rounded to nearest even bfloat16, then > 0).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dataio/image_ops.h"  // half_bits_to_float (exact), float_to_bf16_bits
#include "runtime/ops/batchnorm/relu_kept_range.h"

using namespace trctl;

namespace {

float bf16_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// float -> bfloat16 -> float, rounding to nearest even (NaN stays NaN): dataio's float_to_bf16_bits.
float round_bf16(float v) { return bf16_to_f32(float_to_bf16_bits(v)); }

struct Consts {
  float m, scale, beta;
};

bool kept_f16(uint16_t x, const Consts& k) {
  return std::fma(half_bits_to_float(x) - k.m, k.scale, k.beta) > 0x1p-25f;
}
bool kept_bf16(uint16_t x, const Consts& k) {
  return round_bf16(std::fma(bf16_to_f32(x) - k.m, k.scale, k.beta)) > 0.0f;
}

// The inputs where the range and the mask disagree (0 expected), over all 65,536 patterns, and whether the range
// is empty (lo above hi: nothing kept).
struct Mismatch {
  int bad = 0;
  bool empty = false;
};
template <class Kept, class ToF32>
Mismatch mismatches(uint16_t inf_bits, const Consts& k, const Kept& kept, const ToF32& to_f32) {
  const KeptRange r = kept_range_search(inf_bits, k.scale, [&](uint16_t b) { return kept(b, k); });
  const float lo = to_f32(r.lo), hi = to_f32(r.hi);
  int bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = to_f32(static_cast<uint16_t>(b));
    const bool in = x >= lo && x <= hi;  // IEEE comparisons, as the kernel's half2 ones: NaN never inside
    if (in != kept(static_cast<uint16_t>(b), k)) ++bad;
  }
  return {bad, lo > hi};
}

std::vector<Consts> constants() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> ms = {0.0f, -0.0f, 0.5f, -1.25f, 3.0e4f, -7.0e4f, 1e-30f, 6e-8f, inf, -inf, nan};
  const std::vector<float> scales = {1.0f, -1.0f, 0.0f, -0.0f, 2.5e-3f, -3.7e2f, 1e30f, 1e-40f, inf, -inf, nan};
  const std::vector<float> betas = {0.0f, -0.0f, 0.1f, -0.2f, 1e-8f, 3e-8f, -5e4f, inf, -inf, nan};
  std::vector<Consts> out;
  for (float m : ms)
    for (float s : scales)
      for (float b : betas) out.push_back({m, s, b});
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int i = 0; i < 200; ++i) out.push_back({nd(rng), nd(rng), nd(rng) * 0.5f});
  return out;
}

}  // namespace

TEST_CASE("relu_kept_range: F16 ranges hold exactly the kept inputs", "[batchnorm][relu_kept_range]") {
  int bad = 0, cases = 0, empty = 0;
  for (const Consts& k : constants()) {
    const Mismatch mm = mismatches(0x7c00, k, kept_f16, half_bits_to_float);
    INFO("m " << k.m << " scale " << k.scale << " beta " << k.beta << ": " << mm.bad << " inputs disagree");
    CHECK(mm.bad == 0);
    bad += mm.bad;
    ++cases;
    empty += mm.empty;
  }
  CHECK(bad == 0);
  CHECK(cases > 1000);
  CHECK(empty > 0);  // the NaN constants (and others) keep nothing
}

TEST_CASE("relu_kept_range: BF16 ranges hold exactly the kept inputs", "[batchnorm][relu_kept_range]") {
  int bad = 0;
  for (const Consts& k : constants()) {
    const int b = mismatches(0x7f80, k, kept_bf16, bf16_to_f32).bad;
    INFO("m " << k.m << " scale " << k.scale << " beta " << k.beta << ": " << b << " inputs disagree");
    CHECK(b == 0);
    bad += b;
  }
  CHECK(bad == 0);
}

TEST_CASE("relu_kept_range: the plain cases", "[batchnorm][relu_kept_range]") {
  // scale 1, m 0, beta 0: kept for x > 2^-25, i.e. from the smallest positive half (0x0001) to +inf.
  Consts k{0.0f, 1.0f, 0.0f};
  KeptRange r = kept_range_search(0x7c00, k.scale, [&](uint16_t x) { return kept_f16(x, k); });
  CHECK(r.lo == 0x0001);
  CHECK(r.hi == 0x7c00);
  // scale -1: kept for x < -2^-25: from -inf to the smallest negative half.
  k = {0.0f, -1.0f, 0.0f};
  r = kept_range_search(0x7c00, k.scale, [&](uint16_t x) { return kept_f16(x, k); });
  CHECK(r.lo == 0xfc00);
  CHECK(r.hi == 0x8001);
  // scale 0, beta 1: every finite x, not +-inf.
  k = {0.0f, 0.0f, 1.0f};
  r = kept_range_search(0x7c00, k.scale, [&](uint16_t x) { return kept_f16(x, k); });
  CHECK(r.lo == 0xfbff);
  CHECK(r.hi == 0x7bff);
}
