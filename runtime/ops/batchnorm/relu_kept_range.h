// KeptRange, kept_range_search: a batch norm + ReLU's recomputed mask of one channel (bn_elem.cuh's relu_kept<T>,
// "does relu(bn(x)) keep x's gradient") as a range of its 16-bit input x, so that a kernel tests a packed pair of
// inputs with two half2 comparisons instead of converting, normalising and comparing each (the wgconv data
// gradient's batch-norm backward epilogue, wgconv_sm90a.cu). Pure C++ (host and device): the CPU test checks the
// search against every 16-bit input.
//
// Why a range: kept(x) = round_T(fmaf(x - m, scale, beta)) > 0 is monotone in x whenever scale != 0 -- x - m, the
// fmaf and the rounding to T are each monotone -- non-decreasing for scale > 0 and non-increasing for scale < 0,
// including the non-finite cases (an infinite m, scale or beta; a NaN anywhere makes kept false for every x, and
// NaN arises only at an end of the order: x = +-inf against an infinite m, or a product 0 * inf). For scale == 0 it
// is beta's verdict for every finite x and false at +-inf (0 * inf is NaN). And kept(-0) == kept(+0) (they differ in
// x - m only by a zero's sign, which no later step turns into a nonzero). So over T's non-NaN values in order
// (-inf .. -0, +0 .. +inf) the kept x form an interval, found by a binary search of 16 evaluations of kept itself:
// exact for every constant, bitwise the mask the batch norm recomputes. A NaN x is never kept, and no comparison
// with a NaN holds.
#pragma once
#include <cstdint>

namespace trctl {

// The kept inputs: lo <= x <= hi in T's order (bit patterns of T; nothing when lo > hi: then lo = +inf and
// hi = -inf).
struct KeptRange {
  uint16_t lo, hi;
};

// kept(bits) -> bool: relu_kept<T> of the T with those bits and the channel's constants; inf_bits: T's +inf (F16
// 0x7C00, BF16 0x7F80); scale: the constant whose sign orders kept (gamma * invstd).
template <class Kept>
#if defined(__CUDACC__)
__host__ __device__
#endif
inline KeptRange kept_range_search(uint16_t inf_bits, float scale, const Kept& kept) {
  // Keys 0 .. 2p - 1 over the non-NaN patterns in order: key k < p is the negative of pattern p - 1 - k (key 0 =
  // -inf, key p - 1 = -0), key k >= p the pattern k - p (key p = +0, key 2p - 1 = +inf).
  const int p = static_cast<int>(inf_bits) + 1, n = 2 * p;
  auto bits = [p](int k) {
    return static_cast<uint16_t>(k < p ? 0x8000 | (p - 1 - k) : k - p);
  };
  const KeptRange none{inf_bits, static_cast<uint16_t>(0x8000 | inf_bits)};
  if (scale == 0.0f)  // every finite x (all give beta) or none; never +-inf
    return kept(static_cast<uint16_t>(0)) ? KeptRange{bits(1), bits(n - 2)} : none;
  // The first key where kept == up (up: kept rises from false to true; else falls from true to false). A NaN scale
  // keeps nothing: the search then ends past the last key, or at key 0 going down.
  const bool up = !(scale < 0.0f);
  int a = 0, b = n;
  while (a < b) {
    const int mid = (a + b) / 2;
    if (kept(bits(mid)) == up)
      b = mid;
    else
      a = mid + 1;
  }
  if (up) return a == n ? none : KeptRange{bits(a), inf_bits};
  return a == 0 ? none : KeptRange{static_cast<uint16_t>(0x8000 | inf_bits), bits(a - 1)};
}

}  // namespace trctl
