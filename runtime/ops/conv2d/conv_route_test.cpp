// conv_route / conv_plan_geom (runtime/ops/conv2d/conv_route.h): the ResNet stem (7x7/2, C=3), VGG's stem (3x3/1,
// C=3) and an ordinary conv (3x3/1, C=64) under fp32 and AMP with every conv_im2col / conv_s2d / conv_fewc setting,
// each direction's route and the geometry of its cuDNN plan: the few-channel kernel (conv_fewc) first, then
// space-to-depth, im2col and cuDNN as before when it is off; and the data gradients conv_wgconv routes to wgconv.
#include <catch2/catch.hpp>

#include "runtime/ops/conv2d/conv_route.h"
#include "runtime/ops/conv2d/fewc.h"
#include "runtime/ops/conv2d/s2d.h"
#include "runtime/ops/conv2d/wgconv_rule.h"
#include "tests/support/conv_geom.h"

using namespace trctl;
using trctl::testing::conv_geom;

namespace {

ConvRouteOptions opts(bool lowp, ConvIm2col im2col, ConvS2d s2d, ConvFewc fewc) {
  ConvRouteOptions o;
  o.lowp = lowp;
  o.im2col = im2col;
  o.s2d = s2d;
  o.fewc = fewc;
  return o;
}

const Conv2dGeom kStem = conv_geom(4, 32, 32, 3, 16, 7, 7, 2, 2, 3, 3);
const Conv2dGeom kVgg = conv_geom(4, 16, 16, 3, 16, 3, 3, 1, 1, 1, 1);
const Conv2dGeom kWide = conv_geom(4, 8, 8, 64, 64, 3, 3, 1, 1, 1, 1);
// The full-size stems (K = 64): fewc_conv_eligible and fewc_wgrad_eligible (K = 64, stride 2 and 1).
const Conv2dGeom kResnetStem = conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3);
const Conv2dGeom kVggConv0 = conv_geom(2, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1);
constexpr ConvIm2col kIm2colModes[] = {ConvIm2col::On, ConvIm2col::Forward, ConvIm2col::Off};
constexpr ConvS2d kS2dModes[] = {ConvS2d::On, ConvS2d::Forward, ConvS2d::Off};
constexpr ConvFewc kFewcModes[] = {ConvFewc::On, ConvFewc::Unfolded, ConvFewc::Forward, ConvFewc::Off};
constexpr OpKind kFwd = OpKind::Conv2d, kDgrad = OpKind::Conv2dGradInput, kWgrad = OpKind::Conv2dGradWeight;

}  // namespace

TEST_CASE("conv_route: fp32 and tf32 convs always run on cuDNN with their own geometry", "[conv_route]") {
  for (ConvFewc fewc : kFewcModes) {
    INFO("conv_fewc " << to_string(fewc));
    const ConvRouteOptions o = opts(false, ConvIm2col::On, ConvS2d::On, fewc);
    for (const Conv2dGeom& g : {kStem, kVgg, kWide, kResnetStem, kVggConv0})
      for (OpKind op : {kFwd, kDgrad, kWgrad}) {
        CHECK(conv_route(o, op, g) == ConvRoute::Cudnn);
        CHECK(conv_plan_geom(o, op, g).c == g.c);
      }
  }
}

TEST_CASE("conv_route: under AMP with conv_fewc off the stride-2 stem takes space-to-depth before im2col, per "
          "direction",
          "[conv_route]") {
  for (ConvIm2col im : kIm2colModes) {
    INFO("conv_im2col " << to_string(im));
    // conv_fewc off: kStem and kVgg (C = 3, K = 16) are fewc_conv_eligible and would take the few-channel forward.
    const ConvRouteOptions fwd_only = opts(true, im, ConvS2d::Forward, ConvFewc::Off),
                           on = opts(true, im, ConvS2d::On, ConvFewc::Off),
                           off = opts(true, im, ConvS2d::Off, ConvFewc::Off);
    CHECK(conv_route(fwd_only, kFwd, kStem) == ConvRoute::S2d);
    CHECK(conv_route(on, kWgrad, kStem) == ConvRoute::S2d);
    const ConvRoute im_fwd = im == ConvIm2col::Off ? ConvRoute::Cudnn : ConvRoute::Im2col;
    const ConvRoute im_wgrad = im == ConvIm2col::On ? ConvRoute::Im2col : ConvRoute::Cudnn;
    CHECK(conv_route(fwd_only, kWgrad, kStem) == im_wgrad);  // s2d forward only: the wgrad falls through
    CHECK(conv_route(off, kFwd, kStem) == im_fwd);
    CHECK(conv_route(off, kWgrad, kStem) == im_wgrad);
    for (const ConvRouteOptions& o : {fwd_only, on, off}) {
      CHECK(conv_route(o, kDgrad, kStem) == ConvRoute::Cudnn);  // a data gradient stays the padded cuDNN dgrad
      CHECK(conv_plan_geom(o, kDgrad, kStem).c == 8);
      CHECK(conv_route(o, kFwd, kVgg) == im_fwd);  // stride 1: never space-to-depth
      CHECK(conv_route(o, kFwd, kWide) == ConvRoute::Cudnn);  // 64 channels: cuDNN
    }
    // The cuDNN plans: s2d's stride-1 geometry, C padded to 8 for forward and dgrad, the real C for wgrad.
    const Conv2dGeom z = s2d_conv_geom(kStem);
    const Conv2dGeom f = conv_plan_geom(fwd_only, kFwd, kStem);
    CHECK((f.c == z.c && f.h == z.h && f.r == z.r && f.stride_h == 1));
    CHECK(conv_plan_geom(off, kFwd, kStem).c == 8);
    CHECK(conv_plan_geom(off, kWgrad, kStem).c == 3);
    CHECK(conv_plan_geom(on, kWgrad, kStem).c == z.c);
    CHECK(conv_plan_geom(on, kFwd, kWide).c == 64);
  }
}

TEST_CASE("conv_route: under AMP the RGB stems' forward takes the few-channel kernel before s2d and im2col, "
          "with no cuDNN plan",
          "[conv_route][fewc]") {
  for (ConvIm2col im : kIm2colModes)
    for (ConvS2d s2d : kS2dModes)
      for (ConvFewc fewc : {ConvFewc::Forward, ConvFewc::On}) {
        INFO("conv_im2col " << to_string(im) << " conv_s2d " << to_string(s2d) << " conv_fewc " << to_string(fewc));
        const ConvRouteOptions o = opts(true, im, s2d, fewc);
        for (const Conv2dGeom& g : {kResnetStem, kVggConv0, kStem, kVgg}) {
          INFO(conv2d_geom_str(g));
          CHECK(conv_route(o, kFwd, g) == ConvRoute::Fewc);
          // No cuDNN plan: the geometry comes back as it is (no s2d geometry, no channels padded to 8).
          const Conv2dGeom p = conv_plan_geom(o, kFwd, g);
          CHECK((p.n == g.n && p.h == g.h && p.w == g.w && p.c == g.c && p.k == g.k && p.r == g.r && p.s == g.s &&
                 p.stride_h == g.stride_h && p.stride_w == g.stride_w && p.pad_h == g.pad_h && p.pad_w == g.pad_w &&
                 p.p == g.p && p.q == g.q));
          // The data gradient is never the few-channel kernel: the padded cuDNN dgrad.
          CHECK(conv_route(o, kDgrad, g) == ConvRoute::Cudnn);
          CHECK(conv_plan_geom(o, kDgrad, g).c == 8);
        }
        CHECK(conv_route(o, kFwd, kWide) == ConvRoute::Cudnn);  // C = 64: never few-channel
        CHECK(conv_route(o, kWgrad, kWide) == ConvRoute::Cudnn);
        CHECK(conv_plan_geom(o, kFwd, kWide).c == 64);
      }
}

TEST_CASE("conv_route: with conv_fewc off the full-size stems' forward takes s2d, im2col or cuDNN as before",
          "[conv_route][fewc]") {
  for (ConvIm2col im : kIm2colModes)
    for (ConvS2d s2d : kS2dModes) {
      INFO("conv_im2col " << to_string(im) << " conv_s2d " << to_string(s2d));
      const ConvRouteOptions o = opts(true, im, s2d, ConvFewc::Off);
      const ConvRoute im_fwd = im == ConvIm2col::Off ? ConvRoute::Cudnn : ConvRoute::Im2col;
      CHECK(conv_route(o, kFwd, kResnetStem) == (s2d == ConvS2d::Off ? im_fwd : ConvRoute::S2d));
      CHECK(conv_route(o, kFwd, kVggConv0) == im_fwd);  // stride 1: never space-to-depth
      // s2d: its stride-1 geometry over 16 channels; else cuDNN's C padded to 8 (im2col has no plan, the same rule).
      CHECK(conv_plan_geom(o, kFwd, kResnetStem).c == (s2d == ConvS2d::Off ? 8 : s2d_conv_geom(kResnetStem).c));
      CHECK(conv_plan_geom(o, kFwd, kVggConv0).c == 8);
    }
}

TEST_CASE("conv_route: the weight gradient takes the few-channel kernel only with conv_fewc on and only when "
          "fewc_wgrad_eligible",
          "[conv_route][fewc]") {
  REQUIRE(fewc_wgrad_eligible(kResnetStem));
  REQUIRE(fewc_wgrad_eligible(kVggConv0));    // stride 1
  REQUIRE_FALSE(fewc_wgrad_eligible(kStem));  // K = 16
  REQUIRE_FALSE(fewc_wgrad_eligible(kVgg));   // K = 16
  for (ConvIm2col im : kIm2colModes)
    for (ConvS2d s2d : kS2dModes) {
      INFO("conv_im2col " << to_string(im) << " conv_s2d " << to_string(s2d));
      // Without the few-channel wgrad: space-to-depth with conv_s2d on, else im2col with conv_im2col on, else cuDNN.
      const ConvRoute im_wgrad = im == ConvIm2col::On ? ConvRoute::Im2col : ConvRoute::Cudnn;
      const ConvRoute stride2_wgrad = s2d == ConvS2d::On ? ConvRoute::S2d : im_wgrad;
      for (ConvFewc fewc : {ConvFewc::Forward, ConvFewc::Off}) {
        INFO("conv_fewc " << to_string(fewc));
        const ConvRouteOptions o = opts(true, im, s2d, fewc);
        CHECK(conv_route(o, kWgrad, kResnetStem) == stride2_wgrad);
        CHECK(conv_route(o, kWgrad, kVggConv0) == im_wgrad);
        CHECK(conv_route(o, kWgrad, kStem) == stride2_wgrad);
      }
      for (ConvFewc fewc : {ConvFewc::On, ConvFewc::Unfolded}) {  // unfolded: the same routes, no batch-norm fold
        INFO("conv_fewc " << to_string(fewc));
        const ConvRouteOptions on = opts(true, im, s2d, fewc);
        CHECK(conv_route(on, kWgrad, kResnetStem) == ConvRoute::Fewc);
        const Conv2dGeom p = conv_plan_geom(on, kWgrad, kResnetStem);
        CHECK((p.c == 3 && p.h == 224 && p.r == 7 && p.stride_h == 2));  // no cuDNN plan: the real geometry
        CHECK(conv_route(on, kWgrad, kVggConv0) == ConvRoute::Fewc);
        CHECK(conv_route(on, kWgrad, kVgg) == im_wgrad);
        CHECK(conv_route(on, kWgrad, kStem) == stride2_wgrad);
        CHECK(conv_route(on, kWgrad, kWide) == ConvRoute::Cudnn);
      }
    }
}

TEST_CASE("conv_route: conv_wgconv dgrad sends exactly the data gradients the ring px kernel takes to wgconv, only "
          "under AMP",
          "[conv_route][wgconv]") {
  const Conv2dGeom conv1_2 = conv_geom(256, 224, 224, 64, 64, 3, 3, 1, 1, 1, 1);  // VGG16-BN's features_3
  const Conv2dGeom conv2_1 = conv_geom(256, 112, 112, 64, 128, 3, 3, 1, 1, 1, 1);  // K = 128: its dgrad has C = 128
  const Conv2dGeom layer1 = conv_geom(256, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1);     // ResNet-50's layer1 3x3
  const Conv2dGeom narrow = conv_geom(4, 8, 5, 64, 64, 3, 3, 1, 1, 1, 1);        // W = 5 < 6
  const Conv2dGeom strided = conv_geom(4, 16, 16, 64, 64, 3, 3, 2, 2, 1, 1);
  const Conv2dGeom wide = conv_geom(1, 8, 600, 64, 64, 3, 3, 1, 1, 1, 1);  // ring + filters over 227 KiB
  CHECK(wgconv_dgrad_ring_eligible(conv1_2));
  CHECK(wgconv_dgrad_ring_eligible(layer1));
  CHECK(wgconv_dgrad_ring_eligible(kWide));
  CHECK_FALSE(wgconv_dgrad_ring_eligible(conv2_1));
  CHECK_FALSE(wgconv_dgrad_ring_eligible(narrow));
  CHECK_FALSE(wgconv_dgrad_ring_eligible(strided));
  CHECK_FALSE(wgconv_dgrad_ring_eligible(wide));
  CHECK_FALSE(wgconv_dgrad_ring_eligible(kVggConv0));  // C = 3
  // The ring at 224^2: 2 tiles of 256 and 2 (W + 3) halo rows = 966 -> 1024 rows; 216 KiB with the filters.
  CHECK(wgconv_ring_rows(conv1_2, kWgconvPxTile) == 1024);
  CHECK(wgconv_ring_smem_bytes(conv1_2, 64, kWgconvPxTile, kWgconvPxWindow) == (576 + 1024 + 128) * 128 + 1024);

  ConvRouteOptions o = opts(true, ConvIm2col::Forward, ConvS2d::Forward, ConvFewc::On);
  for (const Conv2dGeom& g : {conv1_2, layer1, conv2_1, narrow, strided, wide})
    CHECK(conv_route(o, kDgrad, g) == ConvRoute::Cudnn);  // off: the default
  o.wgconv = ConvWgconv::Dgrad;
  for (const Conv2dGeom& g : {conv1_2, layer1, kWide}) {
    CHECK(conv_route(o, kDgrad, g) == ConvRoute::Wgconv);
    CHECK(conv_plan_geom(o, kDgrad, g).c == g.c);  // no cuDNN plan: the real geometry
    CHECK(conv_route(o, kFwd, g) == ConvRoute::Cudnn);   // the forward and the weight gradient stay
    CHECK(conv_route(o, kWgrad, g) == ConvRoute::Cudnn);
  }
  for (const Conv2dGeom& g : {conv2_1, narrow, strided, wide}) CHECK(conv_route(o, kDgrad, g) == ConvRoute::Cudnn);
  o.lowp = false;  // fp32 / tf32: the kernel takes f16 or bf16
  CHECK(conv_route(o, kDgrad, conv1_2) == ConvRoute::Cudnn);
}

TEST_CASE("conv_route: conv_wgconv fwd sends exactly the forwards the ring px kernel takes (C = K = 64) to wgconv, "
          "both adds the data gradients, only under AMP",
          "[conv_route][wgconv]") {
  const Conv2dGeom conv1_2 = conv_geom(256, 224, 224, 64, 64, 3, 3, 1, 1, 1, 1);  // VGG16-BN's features_3
  const Conv2dGeom conv2_1 = conv_geom(256, 112, 112, 64, 128, 3, 3, 1, 1, 1, 1);  // K = 128: cuDNN is faster
  const Conv2dGeom conv2_2 = conv_geom(256, 112, 112, 128, 128, 3, 3, 1, 1, 1, 1);  // C = 128: no ring
  const Conv2dGeom layer1 = conv_geom(256, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dGeom narrow = conv_geom(4, 8, 5, 64, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dGeom strided = conv_geom(4, 16, 16, 64, 64, 3, 3, 2, 2, 1, 1);
  const Conv2dGeom wide = conv_geom(1, 8, 600, 64, 64, 3, 3, 1, 1, 1, 1);
  for (const Conv2dGeom& g : {conv1_2, layer1}) CHECK(wgconv_fwd_ring_eligible(g));
  for (const Conv2dGeom& g : {conv2_1, conv2_2, narrow, strided, wide}) CHECK_FALSE(wgconv_fwd_ring_eligible(g));
  ConvRouteOptions o = opts(true, ConvIm2col::Forward, ConvS2d::Forward, ConvFewc::On);
  o.wgconv = ConvWgconv::Fwd;
  for (const Conv2dGeom& g : {conv1_2, layer1}) {
    CHECK(conv_route(o, kFwd, g) == ConvRoute::Wgconv);
    CHECK(conv_plan_geom(o, kFwd, g).c == g.c);  // no cuDNN plan
    CHECK(conv_route(o, kDgrad, g) == ConvRoute::Cudnn);  // fwd alone: the data gradient stays
    CHECK(conv_route(o, kWgrad, g) == ConvRoute::Cudnn);
  }
  for (const Conv2dGeom& g : {conv2_1, conv2_2, narrow, strided, wide})
    CHECK(conv_route(o, kFwd, g) == ConvRoute::Cudnn);
  o.wgconv = ConvWgconv::Both;
  CHECK(conv_route(o, kFwd, conv1_2) == ConvRoute::Wgconv);
  CHECK(conv_route(o, kDgrad, conv1_2) == ConvRoute::Wgconv);
  CHECK(conv_route(o, kWgrad, conv1_2) == ConvRoute::Cudnn);
  o.wgconv = ConvWgconv::Dgrad;
  CHECK(conv_route(o, kFwd, conv1_2) == ConvRoute::Cudnn);
  o.wgconv = ConvWgconv::Fwd;
  o.lowp = false;
  CHECK(conv_route(o, kFwd, conv1_2) == ConvRoute::Cudnn);
}

TEST_CASE("wgconv's ring weight gradient takes 3x3 convs with C and K of 64 or 128 whose ring fits shared memory",
          "[wgconv]") {
  const Conv2dGeom conv1_2 = conv_geom(256, 224, 224, 64, 64, 3, 3, 1, 1, 1, 1);  // VGG16-BN's features_3
  const Conv2dGeom layer1 = conv_geom(256, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1);    // ResNet-18's layer1
  const Conv2dGeom narrow = conv_geom(4, 8, 5, 64, 64, 3, 3, 1, 1, 1, 1);        // W < 6 is fine: no 8-step epilogue
  const Conv2dGeom conv2_1 = conv_geom(256, 112, 112, 64, 128, 3, 3, 1, 1, 1, 1);  // K = 128: two filter blocks
  const Conv2dGeom conv2_2 = conv_geom(256, 112, 112, 128, 128, 3, 3, 1, 1, 1, 1);  // C = K = 128: four blocks
  const Conv2dGeom conv3_1 = conv_geom(256, 56, 56, 128, 256, 3, 3, 1, 1, 1, 1);   // K = 256: not taken
  const Conv2dGeom strided = conv_geom(4, 16, 16, 64, 64, 3, 3, 2, 2, 1, 1);
  const Conv2dGeom w300 = conv_geom(1, 8, 300, 64, 64, 3, 3, 1, 1, 1, 1);  // 4 tiles + 606 halo rows: 2048 rows
  const Conv2dGeom wide = conv_geom(1, 8, 600, 64, 64, 3, 3, 1, 1, 1, 1);  // its ring: 2048 rows, 321 KiB
  // conv1_2: 3 tiles of 128 and 2 (W + 3) halo rows = 838 -> 1024 ring rows, + 136 mirrored + 3 x 128 dy rows; four
  // tiles: 966 -> 1024 too, + 4 x 128 dy rows
  CHECK(wgconv_wgrad_ring_rows(conv1_2, 3) == 1024);
  CHECK(wgconv_wgrad_ring_rows(conv1_2, 4) == 1024);
  CHECK(wgconv_wgrad_ring_rows(conv2_2, 3) == 1024);  // 614 rows needed (512 would hold two tiles, not three)
  CHECK(wgconv_wgrad_ring_rows(narrow, 3) == 512);    // 3 x 128 + 16
  CHECK(wgconv_wgrad_ring_rows(narrow, 4) == 1024);   // 4 x 128 + 16
  CHECK(wgconv_wgrad_smem_bytes(conv1_2, 3) == (1024 + 136 + 3 * 128) * 128 + 1024);
  CHECK(wgconv_wgrad_smem_bytes(conv1_2, 4) == (1024 + 136 + 4 * 128) * 128 + 1024);
  CHECK(wgconv_wgrad_smem_bytes(wide, 3) == (2048 + 136 + 3 * 128) * 128 + 1024);
  // The deepest pipeline that fits: 4 at VGG's and ResNet's layers, 3 where four tiles' ring would need 2048 rows.
  for (const Conv2dGeom& g : {conv1_2, layer1, narrow, conv2_1, conv2_2}) CHECK(wgconv_wgrad_depth(g) == 4);
  CHECK(wgconv_wgrad_ring_rows(w300, 3) == 1024);
  CHECK(wgconv_wgrad_depth(w300) == 3);
  CHECK(wgconv_wgrad_depth_fits(w300, 3));
  CHECK_FALSE(wgconv_wgrad_depth_fits(w300, 4));  // 2048 ring rows
  for (int d : {2, 5}) CHECK_FALSE(wgconv_wgrad_depth_fits(conv1_2, d));  // depths the kernel does not have
  CHECK(wgconv_wgrad_depth(wide) == 0);
  // x's batch-norm prologue adds its constants (64 x 16 bytes); VGG's and ResNet's layers keep depth 4 with it.
  CHECK(wgconv_wgrad_smem_bytes(conv1_2, 4, true) == wgconv_wgrad_smem_bytes(conv1_2, 4) + 1024);
  for (const Conv2dGeom& g : {conv1_2, layer1, narrow, conv2_1, conv2_2}) CHECK(wgconv_wgrad_depth(g, true) == 4);
  CHECK(wgconv_wgrad_depth(w300, true) == 3);
  CHECK(wgconv_wgrad_ring_eligible(w300));
  for (const Conv2dGeom& g : {conv1_2, layer1, narrow, conv2_1, conv2_2}) CHECK(wgconv_wgrad_ring_eligible(g));
  for (const Conv2dGeom& g : {conv3_1, strided, wide}) CHECK_FALSE(wgconv_wgrad_ring_eligible(g));
}

TEST_CASE("conv_route: conv_wgconv wgrad sends the weight gradients the ring weight-gradient kernel takes with C = 64 "
          "to wgconv, all adds the forwards and data gradients, only under AMP",
          "[conv_route][wgconv]") {
  const Conv2dGeom conv1_2 = conv_geom(256, 224, 224, 64, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dGeom conv2_1 = conv_geom(256, 112, 112, 64, 128, 3, 3, 1, 1, 1, 1);
  const Conv2dGeom conv2_2 = conv_geom(256, 112, 112, 128, 128, 3, 3, 1, 1, 1, 1);
  const Conv2dGeom conv3_2 = conv_geom(256, 56, 56, 256, 256, 3, 3, 1, 1, 1, 1);
  ConvRouteOptions o = opts(true, ConvIm2col::Forward, ConvS2d::Forward, ConvFewc::On);
  o.wgconv = ConvWgconv::Wgrad;
  CHECK(conv_route(o, kWgrad, conv1_2) == ConvRoute::Wgconv);
  CHECK(conv_plan_geom(o, kWgrad, conv1_2).c == conv1_2.c);  // no cuDNN plan
  CHECK(conv_route(o, kFwd, conv1_2) == ConvRoute::Cudnn);
  CHECK(conv_route(o, kDgrad, conv1_2) == ConvRoute::Cudnn);
  CHECK(conv_route(o, kWgrad, conv2_1) == ConvRoute::Wgconv);  // K = 128: two filter blocks
  CHECK(conv_route(o, kWgrad, conv2_2) == ConvRoute::Cudnn);   // C = 128: the kernel takes it, cuDNN's is faster
  CHECK(conv_route(o, kWgrad, conv3_2) == ConvRoute::Cudnn);   // 256 channels: not the kernel's
  CHECK(conv_route(o, kWgrad, kVggConv0) == ConvRoute::Fewc);  // the RGB stem stays on the few-channel kernel
  o.wgconv = ConvWgconv::All;
  for (OpKind op : {kFwd, kDgrad, kWgrad}) CHECK(conv_route(o, op, conv1_2) == ConvRoute::Wgconv);
  o.wgconv = ConvWgconv::Both;
  CHECK(conv_route(o, kWgrad, conv1_2) == ConvRoute::Cudnn);
  o.wgconv = ConvWgconv::Wgrad;
  o.lowp = false;  // fp32 / tf32: the kernel takes f16 or bf16
  CHECK(conv_route(o, kWgrad, conv1_2) == ConvRoute::Cudnn);
}
