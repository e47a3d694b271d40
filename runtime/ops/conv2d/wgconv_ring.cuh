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

// The batch norm's apply (+ ReLU when relu) of the staged 16-byte piece of T at shared address at, in place, with
// element i's constants k(i) -- bn_elem.cuh's arithmetic, so bitwise the apply pass's output -- and into the mirror
// row mirror_off bytes further when mirror. Returns the piece as stored.
template <class T, class Consts>
__device__ __forceinline__ uint4 bn_apply_piece(uint32_t at, Consts&& k, bool relu, bool mirror, uint32_t mirror_off) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(at));
  T* e = reinterpret_cast<T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float f = apply_affine(to_f32(e[i]), k(i));
    if (relu) f = apply_relu(f);
    e[i] = from_f32<T>(f);
  }
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
  if (mirror)
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at + mirror_off), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  return v;
}

}  // namespace
}  // namespace trctl
