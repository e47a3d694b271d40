// conv_route / conv_plan_geom (runtime/ops/conv2d/conv_route.h): the ResNet stem (7x7/2, C=3), VGG's stem (3x3/1,
// C=3) and an ordinary conv (3x3/1, C=64) under fp32 and AMP with every conv_im2col / conv_s2d setting, each
// direction's route and the geometry of its cuDNN plan.
#include <catch2/catch.hpp>

#include "runtime/ops/conv2d/conv_route.h"
#include "runtime/ops/conv2d/s2d.h"
#include "tests/support/conv_geom.h"

using namespace trctl;
using trctl::testing::conv_geom;

namespace {

ConvRouteOptions opts(bool lowp, ConvIm2col im2col, ConvS2d s2d) {
  ConvRouteOptions o;
  o.lowp = lowp;
  o.im2col = im2col;
  o.s2d = s2d;
  return o;
}

const Conv2dGeom kStem = conv_geom(4, 32, 32, 3, 16, 7, 7, 2, 2, 3, 3);
const Conv2dGeom kVgg = conv_geom(4, 16, 16, 3, 16, 3, 3, 1, 1, 1, 1);
const Conv2dGeom kWide = conv_geom(4, 8, 8, 64, 64, 3, 3, 1, 1, 1, 1);
constexpr OpKind kFwd = OpKind::Conv2d, kDgrad = OpKind::Conv2dGradInput, kWgrad = OpKind::Conv2dGradWeight;

}  // namespace

TEST_CASE("conv_route: fp32 and tf32 convs always run on cuDNN with their own geometry", "[conv_route]") {
  const ConvRouteOptions o = opts(false, ConvIm2col::On, ConvS2d::On);
  for (const Conv2dGeom& g : {kStem, kVgg, kWide})
    for (OpKind op : {kFwd, kDgrad, kWgrad}) {
      CHECK(conv_route(o, op, g) == ConvRoute::Cudnn);
      CHECK(conv_plan_geom(o, op, g).c == g.c);
    }
}

TEST_CASE("conv_route: under AMP the stride-2 stem takes space-to-depth before im2col, per direction",
          "[conv_route]") {
  for (ConvIm2col im : {ConvIm2col::On, ConvIm2col::Forward, ConvIm2col::Off}) {
    INFO("conv_im2col " << to_string(im));
    const ConvRouteOptions fwd_only = opts(true, im, ConvS2d::Forward), on = opts(true, im, ConvS2d::On),
                           off = opts(true, im, ConvS2d::Off);
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
