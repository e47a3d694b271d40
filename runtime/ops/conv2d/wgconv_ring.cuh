// Internal to the wgconv ring kernels (wgconv_sm90a.cu: forward and data gradient; wgconv_wgrad_sm90a.cu: weight
// gradient): positions of the zero-padded input plane, the copy of a ring row by a thread pair, and a staged piece's
// batch-norm apply (the kernels' prologues). Padded plane:
// Hp = H + 2, Wp = W + 2; position f = (n Hp + pp) Wp + qq over N Hp Wp positions; the input at f is
// x[n][pp - 1][qq - 1] inside, 0 on the border.
#pragma once
#include <cstdint>

#include "runtime/cuda/cp_async.cuh"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/batchnorm/bn_elem.cuh"

namespace trctl {
namespace {

// A position of the padded plane as (image, padded row, padded column); pad_advance moves it d positions on.
struct PadPos {
  int n, pp, qq;
};
__device__ __forceinline__ PadPos pad_pos(int pos, int wp, int plane) {
  const int n = pos / plane, rem = pos - n * plane, pp = rem / wp;
  return {n, pp, rem - pp * wp};
}
// The same for d <= W + 2 (at most one row wrap; the ring plans need W >= 6 for d = 8).
__device__ __forceinline__ void pad_step(PadPos& p, int d, int wp, int hp) {
  p.qq += d;
  if (p.qq >= wp) {
    p.qq -= wp;
    if (++p.pp == hp) p.pp = 0, ++p.n;
  }
}
__device__ __forceinline__ void pad_advance(PadPos& p, int d, int wp, int hp) {
  p.qq += d;
  while (p.qq >= wp) {
    p.qq -= wp;
    if (++p.pp == hp) p.pp = 0, ++p.n;
  }
}

// A thread's half of a 128-byte ring row (the kernels copy rows by thread pairs, one position decode per four
// copies): the 16-byte pieces 2 m + h (m = 0..3) of src (a position's 64 two-byte elements; zeros where !in) into
// ring row j at row_addr, the 128-byte swizzle (piece p at (p ^ (j % 8)) * 16) -- the pair covers each 32-byte
// sector with one copy instruction -- and, when mirror, the same into the row mirror_off bytes further.
__device__ __forceinline__ void copy_half_row(uint32_t row_addr, int j, const uint16_t* src, bool in, int h,
                                              bool mirror, uint32_t mirror_off) {
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int piece = 2 * m + h;
    const uint32_t col = static_cast<uint32_t>((piece ^ (j & 7)) << 4);
    cp_async16(row_addr + col, src + piece * 8, in ? 16 : 0);
    if (mirror) cp_async16(row_addr + mirror_off + col, src + piece * 8, in ? 16 : 0);
  }
}

// The W 32-bit words at shared address at into v, and v into at (one ld/st.shared.v2 / .v4).
template <int W>
__device__ __forceinline__ void lds_words(uint32_t at, uint32_t (&v)[W]) {
  static_assert(W == 2 || W == 4, "8- or 16-byte pieces");
  if constexpr (W == 4)
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(at));
  else
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v[0]), "=r"(v[1]) : "r"(at));
}
template <int W>
__device__ __forceinline__ void sts_words(uint32_t at, const uint32_t (&v)[W]) {
  if constexpr (W == 4)
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                 : "memory");
  else
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(at), "r"(v[0]), "r"(v[1]) : "memory");
}
// ... and, when mirror, also into the mirror row mirror_off bytes further.
template <int W>
__device__ __forceinline__ void sts_words(uint32_t at, const uint32_t (&v)[W], bool mirror, uint32_t mirror_off) {
  sts_words(at, v);
  if (mirror) sts_words(at + mirror_off, v);
}

// The batch norm's apply (+ ReLU when relu) of the 2 W elements of T in the words v, in place, with element i's
// constants k(i): bn_elem.cuh's arithmetic, so bitwise the apply pass's output.
template <class T, int W, class Consts>
__device__ __forceinline__ void bn_apply_regs(uint32_t (&v)[W], Consts&& k, bool relu) {
  T* e = reinterpret_cast<T*>(v);
#pragma unroll
  for (int i = 0; i < 2 * W; ++i) {
    float f = apply_affine(to_f32(e[i]), k(i));
    if (relu) f = apply_relu(f);
    e[i] = from_f32<T>(f);
  }
}
// The same of the 16-byte piece staged at shared address at, in place, and into the mirror row mirror_off bytes
// further when mirror. Returns the piece as stored.
template <class T, class Consts>
__device__ __forceinline__ uint4 bn_apply_piece(uint32_t at, Consts&& k, bool relu, bool mirror, uint32_t mirror_off) {
  uint32_t v[4];
  lds_words(at, v);
  bn_apply_regs<T>(v, k, relu);
  sts_words(at, v, mirror, mirror_off);
  return make_uint4(v[0], v[1], v[2], v[3]);
}

}  // namespace
}  // namespace trctl
