// The rule that says which convolutions wgconv (runtime/ops/conv2d/wgconv.h, the Hopper wgmma 3x3 conv) covers and
// the shared memory of its ring kernels: plain C++ (no CUDA), so the route (conv_route.h) and the CPU tests use the
// same arithmetic as the plan on the device.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// True for a finished geometry wgconv covers: 3x3, stride 1, padding 1, dilation 1, one group, C % 64 == 0,
// K % 64 == 0, H and W below 32768, and x and y each below 2^31 elements. *why (may be nullptr) says what is not.
bool wgconv_eligible(const Conv2dGeom& g, std::string* why);

constexpr int64_t kWgconvMaxSmemBytes = 227 * 1024;  // an H100/H200 CTA's opt-in dynamic shared memory
constexpr int kWgconvPxTile = 256;                   // the ring px kernel: positions per tile ...
constexpr int kWgconvPxWindow = 128;                 // ... and per warpgroup (its mirrored rows)

// The ring kernels' own shape rule: C == 64 (a position is one 128-byte row) and W >= 6 (their epilogues step 8
// positions with at most one row wrap).
bool wgconv_ring_fits(const Conv2dGeom& g);

// The data gradient's geometry for a forward geometry g: C and K swapped (the forward kernels run it on flipped,
// transposed filters: wgconv.h).
Conv2dGeom wgconv_dgrad_geom(const Conv2dGeom& g);

// A ring kernel over the padded plane of g with tiles of `tile_len` positions: the ring's rows (a power of two of
// at least two tiles and both halos, 2 (W + 3) rows) and the CTA's dynamic shared memory (`bn` filters x 9 taps,
// the ring and `window` mirror rows of 128 bytes, plus 1 KiB of alignment slack).
int64_t wgconv_ring_rows(const Conv2dGeom& g, int tile_len);
int64_t wgconv_ring_smem_bytes(const Conv2dGeom& g, int bn, int tile_len, int window);

// Whether the data gradient of the forward conv g runs on the ring px kernel (wgconv_dgrad_geom: C and K swapped):
// that geometry wgconv_eligible and wgconv_ring_fits (g's K == 64), and ring + filters within kWgconvMaxSmemBytes.
// train.conv_wgconv: dgrad routes exactly these (conv_route.h).
bool wgconv_dgrad_ring_eligible(const Conv2dGeom& g);

// The ring weight-gradient kernel (wgconv.h's wgconv_wgrad_cuda): positions per tile (a tap's window of a tile runs
// up to a tile past the ring's last row, hence the mirror rows below).
constexpr int kWgconvWgradTile = 128;
// ... and the ring's first rows it repeats after its end: a tile, and the merged taps' N = 192 windows reach two rows
// further (8, keeping the dy buffers after them 1024-byte aligned).
constexpr int kWgconvWgradMirror = kWgconvWgradTile + 8;
// Its software pipeline's depth: tiles whose rows are in shared memory at once (the kernel copies tile t + depth - 1's
// rows while tile t's wgmma read its span): 3 at least, 4 where the shared memory holds it.
constexpr int kWgconvWgradMinDepth = 3;
constexpr int kWgconvWgradMaxDepth = 4;
// Its ring's rows at a depth: a power of two of at least depth tiles and both halos, depth L + 2 (W + 3).
int64_t wgconv_wgrad_ring_rows(const Conv2dGeom& g, int depth);
// With x's batch-norm prologue (WgConvWgradPlan::prologue): its per-channel constants, 64 x (m, scale, shift, 0) f32.
constexpr int64_t kWgconvWgradPrologueBytes = 64 * 16;
// Its CTA's dynamic shared memory at a depth: that ring and its kWgconvWgradMirror mirror rows, depth tile buffers
// of dy rows, 128 bytes each, plus 1 KiB of alignment slack (VGG's conv1_2 at depth 3: 198,656 B; 4: 215,040 B),
// plus kWgconvWgradPrologueBytes with the prologue.
int64_t wgconv_wgrad_smem_bytes(const Conv2dGeom& g, int depth, bool prologue = false);
// Whether depth is one the kernel has (kWgconvWgradMinDepth .. kWgconvWgradMaxDepth) and its shared memory fits
// kWgconvMaxSmemBytes (the plan's check of an asked-for depth).
bool wgconv_wgrad_depth_fits(const Conv2dGeom& g, int depth, bool prologue = false);
// The deepest depth that fits (wgconv_wgrad_depth_fits); 0 when none does.
int wgconv_wgrad_depth(const Conv2dGeom& g, bool prologue = false);
// Whether the weight gradient of conv g runs on that kernel: wgconv_eligible, C and K of 64 or 128 (a CTA takes one
// 64 x 64 block of dw: its rows of x and dy are 128 bytes of a position's channels; the blocks of one position range
// read the same rows, so larger C and K would re-read them more) and a pipeline depth that fits (wgconv_wgrad_depth).
bool wgconv_wgrad_ring_eligible(const Conv2dGeom& g);
// The weight gradients train.conv_wgconv: wgrad / all routes to that kernel (conv_route.h): wgconv_wgrad_ring_eligible
// with C == 64. With C = 128 cuDNN's kernel is faster (VGG's conv2_2: 1.34 vs 1.67 ms, RESULTS.md run 67); with C =
// 64 the ring kernel is ahead (conv1_2: 1.73-1.76 vs 1.96-2.10 ms) or level (conv2_1, K = 128).
bool wgconv_wgrad_route_eligible(const Conv2dGeom& g);

// Whether the forward conv g runs on the ring px kernel: wgconv_eligible, wgconv_ring_fits (C == 64), K == 64 (with
// K = 128 the ring px kernel is slower than cuDNN: VGG's conv2_1, RESULTS.md run 62) and ring + filters within
// kWgconvMaxSmemBytes. train.conv_wgconv: fwd routes exactly these.
bool wgconv_fwd_ring_eligible(const Conv2dGeom& g);

}  // namespace trctl
