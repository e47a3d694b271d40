// Internal to the wgconv ring kernels (wgconv_sm90a.cu: forward and data gradient; wgconv_wgrad_sm90a.cu: weight
// gradient): positions of the zero-padded input plane. Padded plane: Hp = H + 2, Wp = W + 2; position
// f = (n Hp + pp) Wp + qq over N Hp Wp positions; the input at f is x[n][pp - 1][qq - 1] inside, 0 on the border.
#pragma once

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

}  // namespace
}  // namespace trctl
