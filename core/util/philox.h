// Philox4x32-10 counter-based RNG (Salmon et al., SC'11). Header-only; the same code runs on the host and, when
// compiled by nvcc, on the device, so CPU and CUDA backends draw identical streams for one (key, counter).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define TRCTL_HD __host__ __device__ __forceinline__
#else
#define TRCTL_HD inline
#endif

namespace trctl {

struct Philox4 {
  uint32_t v[4];
};

TRCTL_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// counter c0..c3, key k0,k1 -> four independent uniform 32-bit words.
TRCTL_HD Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = philox_mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
TRCTL_HD float philox_uniform(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// Uniform in [0, 1) with 53 random bits, from two words.
TRCTL_HD double philox_uniform_double(uint32_t a, uint32_t b) {
  uint64_t m = (static_cast<uint64_t>(a) << 21) ^ static_cast<uint64_t>(b >> 11);
  return static_cast<double>(m & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// A stream of draws for one (seed, purpose, a, b): next() returns successive uniform words. Used where a
// transform needs a handful of random numbers per sample (crop offsets, angles, ...).
struct PhiloxStream {
  uint32_t k0, k1, c1, c2, c3;
  uint32_t c0 = 0;
  Philox4 buf{};
  int used = 4;
  TRCTL_HD PhiloxStream(uint64_t seed, uint32_t purpose, uint32_t a, uint32_t b)
      : k0(static_cast<uint32_t>(seed)), k1(static_cast<uint32_t>(seed >> 32)), c1(purpose), c2(a), c3(b) {}
  TRCTL_HD uint32_t next() {
    if (used == 4) {
      buf = philox4x32(c0++, c1, c2, c3, k0, k1);
      used = 0;
    }
    return buf.v[used++];
  }
  TRCTL_HD float uniform() { return philox_uniform(next()); }              // [0, 1)
  TRCTL_HD double uniform_double() { uint32_t a = next(); return philox_uniform_double(a, next()); }
  TRCTL_HD double uniform_range(double lo, double hi) { return lo + (hi - lo) * uniform_double(); }
  // Integer in [0, n) (n > 0), by 64-bit multiply-shift (bias < 2^-32).
  TRCTL_HD uint32_t below(uint32_t n) {
    return static_cast<uint32_t>((static_cast<uint64_t>(next()) * n) >> 32);
  }
};

// Purposes: distinct streams for distinct uses of one seed.
enum class RngPurpose : uint32_t { Shuffle = 1, Transform = 2, Dropout = 3, Init = 4, Synthetic = 5 };

}  // namespace trctl
