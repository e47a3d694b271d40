// RunOutputs: metrics.jsonl and summary.csv writers, and run_dir_create.
#include "runtime/train/run_outputs.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace trctl {

RunOutputs::~RunOutputs() {
  if (metrics_) std::fclose(metrics_);
  if (summary_) std::fclose(summary_);
}

Status RunOutputs::open(const std::string& run_dir) {
  dir_ = run_dir;
  metrics_ = std::fopen((run_dir + "/metrics.jsonl").c_str(), "w");
  summary_ = std::fopen((run_dir + "/summary.csv").c_str(), "w");
  if (!metrics_ || !summary_) return Error{ErrCode::Io, run_dir, std::string("cannot write: ") + std::strerror(errno)};
  std::fprintf(summary_,
               "epoch,step,lr,train_loss,train_top1,val_loss,val_top1,images_per_s,epoch_seconds,seconds,val_top5,"
               "skipped_steps\n");
  std::fflush(summary_);
  return ok_status();
}

Status RunOutputs::write_file(const std::string& name, const std::string& text) {
  if (dir_.empty()) return ok_status();
  const std::string path = dir_ + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Error{ErrCode::Io, path, std::string("cannot write: ") + std::strerror(errno)};
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok &= std::fclose(f) == 0;
  if (!ok) return Error{ErrCode::Io, path, "short write"};
  return ok_status();
}

void RunOutputs::step(int epoch, int64_t step, double loss, double lr, double images_per_s, double seconds) {
  if (!metrics_) return;
  std::fprintf(metrics_,
               "{\"kind\":\"step\",\"epoch\":%d,\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"images_per_s\":%.1f,"
               "\"seconds\":%.3f}\n",
               epoch, static_cast<long long>(step), loss, lr, images_per_s, seconds);
  std::fflush(metrics_);
}

// An epoch without validation (train.validate_every) has null val fields in metrics.jsonl and empty ones in CSV.
void RunOutputs::epoch(const EpochRecord& r) {
  if (!metrics_) return;
  char vl[32] = "null", vt[32] = "null", v5[32] = "null", cl[32] = "", ct[32] = "", c5[32] = "";
  if (r.validated) {
    std::snprintf(vl, sizeof vl, "%.9g", r.val_loss);
    std::snprintf(vt, sizeof vt, "%.6f", r.val_top1);
    std::snprintf(v5, sizeof v5, "%.6f", r.val_top5);
    std::snprintf(cl, sizeof cl, "%.9g", r.val_loss);
    std::snprintf(ct, sizeof ct, "%.6f", r.val_top1);
    std::snprintf(c5, sizeof c5, "%.6f", r.val_top5);
  }
  std::fprintf(metrics_,
               "{\"kind\":\"epoch\",\"epoch\":%d,\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"train_loss\":%.9g,"
               "\"train_top1\":%.6f,\"val_loss\":%s,\"val_top1\":%s,\"val_top5\":%s,\"images_per_s\":%.1f,"
               "\"epoch_seconds\":%.3f,\"train_seconds\":%.3f,\"seconds\":%.3f,\"skipped_steps\":%lld,"
               "\"loss_scale\":%.9g",
               r.epoch, static_cast<long long>(r.step), r.train_loss, r.lr, r.train_loss, r.train_top1, vl, vt, v5,
               r.images_per_s, r.epoch_seconds, r.train_seconds, r.seconds, static_cast<long long>(r.skipped_steps),
               r.loss_scale);
  if (std::isfinite(r.energy_j))  // measured (a GPU's board counter): the epoch's training steps' joules and watts
    std::fprintf(metrics_, ",\"energy_j\":%.3f,\"power_w\":%.1f,\"steps\":%lld", r.energy_j, r.power_w(),
                 static_cast<long long>(r.steps));
  std::fprintf(metrics_, "}\n");
  std::fflush(metrics_);
  std::fprintf(summary_, "%d,%lld,%.9g,%.9g,%.6f,%s,%s,%.1f,%.3f,%.3f,%s,%lld\n", r.epoch,
               static_cast<long long>(r.step), r.lr, r.train_loss, r.train_top1, cl, ct, r.images_per_s,
               r.epoch_seconds, r.seconds, c5, static_cast<long long>(r.skipped_steps));
  std::fflush(summary_);
}

Result<std::string> run_dir_create(const std::string& out_dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Error{ErrCode::Io, out_dir, "cannot create the output directory: " + ec.message()};
  for (int i = 1; i < 10000; ++i) {
    std::string path = out_dir + "/" + name + (i == 1 ? "" : "-" + std::to_string(i));
    if (fs::create_directory(path, ec)) return path;
    if (ec) return Error{ErrCode::Io, path, "cannot create the run directory: " + ec.message()};
  }
  return Error{ErrCode::Io, out_dir, "too many runs named '" + name + "'"};
}

}  // namespace trctl
