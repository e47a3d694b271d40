// Run-directory outputs: metrics.jsonl (one JSON object per logged step and per epoch) and summary.csv (one row
// per epoch), flushed as they are written so a killed run keeps what it logged.
#pragma once
#include <cstdio>
#include <string>

#include "core/util/error.h"
#include "runtime/train/trainer.h"

namespace trctl {

class RunOutputs {
 public:
  RunOutputs() = default;
  ~RunOutputs();
  RunOutputs(const RunOutputs&) = delete;
  RunOutputs& operator=(const RunOutputs&) = delete;

  Status open(const std::string& run_dir);  // no-op object when never opened
  Status write_file(const std::string& name, const std::string& text);
  void step(int epoch, int64_t step, double loss, double lr, double images_per_s, double seconds);
  void epoch(const EpochRecord& r);

 private:
  std::string dir_;
  std::FILE* metrics_ = nullptr;
  std::FILE* summary_ = nullptr;
};

}  // namespace trctl
