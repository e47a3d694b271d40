// scheduler_lr: warm-up, cosine (reaching eta_min at the last epoch), step and multistep, per 1-based epoch.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/spec/spec.h"

using namespace trctl;

TEST_CASE("cosine with warm-up rises linearly, then anneals to eta_min at the last epoch") {
  SchedulerSpec s;
  s.kind = SchedulerKind::Cosine;
  s.warmup_epochs = 5;
  s.eta_min = 1e-6;
  const double base = 1e-3;
  const double pi = std::acos(-1.0);
  CHECK(scheduler_lr(s, base, 1, 100) == Approx(2e-4).epsilon(1e-12));
  CHECK(scheduler_lr(s, base, 3, 100) == Approx(6e-4).epsilon(1e-12));
  CHECK(scheduler_lr(s, base, 5, 100) == Approx(1e-3).epsilon(1e-12));
  double e6 = 1e-6 + (1e-3 - 1e-6) * (1 + std::cos(pi * 1 / 95)) / 2;
  CHECK(scheduler_lr(s, base, 6, 100) == Approx(e6).epsilon(1e-12));
  CHECK(scheduler_lr(s, base, 6, 100) < base);
  double mid = 1e-6 + (1e-3 - 1e-6) / 2;  // halfway through the annealing
  SchedulerSpec even = s;
  even.warmup_epochs = 4;
  CHECK(scheduler_lr(even, base, 52, 100) == Approx(mid).epsilon(1e-12));
  CHECK(scheduler_lr(s, base, 100, 100) == Approx(1e-6).epsilon(1e-12));
}

TEST_CASE("cosine without warm-up starts just below base and ends at eta_min") {
  SchedulerSpec s;
  s.kind = SchedulerKind::Cosine;
  CHECK(scheduler_lr(s, 0.1, 10, 10) == Approx(0.0).margin(1e-15));
  CHECK(scheduler_lr(s, 0.1, 1, 10) == Approx(0.1 * (1 + std::cos(std::acos(-1.0) / 10)) / 2));
}

TEST_CASE("cosine with nothing left after the warm-up stays at base") {
  SchedulerSpec s;
  s.kind = SchedulerKind::Cosine;
  s.warmup_epochs = 3;
  CHECK(scheduler_lr(s, 0.1, 3, 3) == Approx(0.1));
}

TEST_CASE("constant is base after an optional warm-up") {
  SchedulerSpec s;
  CHECK(scheduler_lr(s, 0.1, 1, 10) == 0.1);
  CHECK(scheduler_lr(s, 0.1, 10, 10) == 0.1);
  s.warmup_epochs = 4;
  CHECK(scheduler_lr(s, 0.1, 1, 10) == Approx(0.025));
  CHECK(scheduler_lr(s, 0.1, 4, 10) == Approx(0.1));
  CHECK(scheduler_lr(s, 0.1, 5, 10) == 0.1);
}

TEST_CASE("step multiplies by gamma every step_size epochs, as torch StepLR stepped per epoch") {
  SchedulerSpec s;
  s.kind = SchedulerKind::Step;
  s.step_size = 3;
  s.gamma = 0.1;
  // torch: epochs 0,1,2 -> base; 3,4,5 -> base*gamma; ... (0-based epoch = e - 1)
  CHECK(scheduler_lr(s, 1.0, 1, 10) == Approx(1.0));
  CHECK(scheduler_lr(s, 1.0, 3, 10) == Approx(1.0));
  CHECK(scheduler_lr(s, 1.0, 4, 10) == Approx(0.1));
  CHECK(scheduler_lr(s, 1.0, 6, 10) == Approx(0.1));
  CHECK(scheduler_lr(s, 1.0, 7, 10) == Approx(0.01));
}

TEST_CASE("step counts its steps from the end of the warm-up") {
  SchedulerSpec s;
  s.kind = SchedulerKind::Step;
  s.step_size = 2;
  s.gamma = 0.5;
  s.warmup_epochs = 2;
  CHECK(scheduler_lr(s, 1.0, 1, 10) == Approx(0.5));  // warm-up
  CHECK(scheduler_lr(s, 1.0, 2, 10) == Approx(1.0));
  CHECK(scheduler_lr(s, 1.0, 3, 10) == Approx(1.0));
  CHECK(scheduler_lr(s, 1.0, 4, 10) == Approx(1.0));
  CHECK(scheduler_lr(s, 1.0, 5, 10) == Approx(0.5));
}

TEST_CASE("multistep multiplies by gamma from each milestone on, as torch MultiStepLR stepped per epoch") {
  SchedulerSpec s;
  s.kind = SchedulerKind::MultiStep;
  s.gamma = 0.1;
  s.milestones = {2, 5};
  // torch: 0-based epochs 0,1 -> base; 2,3,4 -> base*gamma; 5.. -> base*gamma^2
  CHECK(scheduler_lr(s, 1.0, 1, 10) == Approx(1.0));
  CHECK(scheduler_lr(s, 1.0, 2, 10) == Approx(1.0));
  CHECK(scheduler_lr(s, 1.0, 3, 10) == Approx(0.1));
  CHECK(scheduler_lr(s, 1.0, 5, 10) == Approx(0.1));
  CHECK(scheduler_lr(s, 1.0, 6, 10) == Approx(0.01));
  CHECK(scheduler_lr(s, 1.0, 10, 10) == Approx(0.01));
}
