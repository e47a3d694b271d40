// trctl pack-dts | pack-dts --verify | dts info | bench data: packing, checking and inspecting DTS files, and the
// data-pipeline throughput benchmark (RandomResizedCrop + flip + normalize, as a training run feeds it).
#include "apps/cmd_data.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "apps/cli_errors.h"
#include "apps/cmd_bench.h"
#include "dataio/cifar.h"
#include "dataio/dts_reader.h"
#include "dataio/pack_sources.h"
#include "dataio/stream_loader.h"
#include "runtime/report/json.h"

namespace trctl {
namespace {


// A progress line on stderr: rewritten in place on a terminal, every 25% otherwise.
struct Progress {
  bool tty = isatty(fileno(stderr));
  std::string last_stage;
  int last_quarter = -1;
  void operator()(const std::string& stage, int64_t done, int64_t total) {
    if (stage != last_stage) {
      if (tty && !last_stage.empty()) std::fprintf(stderr, "\n");
      last_stage = stage;
      last_quarter = -1;
    }
    const double pct = total ? 100.0 * done / total : 100.0;
    if (tty) {
      std::fprintf(stderr, "\r[%s] %lld/%lld (%.0f%%)", stage.c_str(), (long long)done, (long long)total, pct);
      if (done == total) std::fprintf(stderr, "\n"), last_stage.clear();
    } else if (int q = static_cast<int>(pct / 25); q != last_quarter) {
      last_quarter = q;
      std::fprintf(stderr, "[%s] %lld/%lld (%.0f%%)\n", stage.c_str(), (long long)done, (long long)total, pct);
    }
    std::fflush(stderr);
  }
};

Result<PackSource> open_source(const PackArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string format = a.format;
  const bool dir = fs::is_directory(a.source, ec);
  if (format == "auto") {
    if (!dir) format = "idx";
    else if (cifar_split_files(a.source, CifarKind::Cifar10, true).ok()) format = "cifar10";
    else if (cifar_split_files(a.source, CifarKind::Cifar100, true).ok()) format = "cifar100";
    else format = "folder";
  }
  if (format == "idx") {
    if (a.labels.empty()) return Error{ErrCode::Missing, a.source, "an IDX images file needs --labels FILE"};
    return pack_source_idx(a.source, a.labels);
  }
  if (format == "folder") return pack_source_folder(a.source);
  if (format == "cifar10" || format == "cifar100") {
    const CifarKind kind = format == "cifar10" ? CifarKind::Cifar10 : CifarKind::Cifar100;
    if (a.split != "train" && a.split != "test")
      return Error{ErrCode::UnknownEnum, "--split", "'" + a.split + "': expected train or test"};
    Result<std::vector<std::string>> files = cifar_split_files(a.source, kind, a.split == "train");
    if (!files.ok()) return files.errors();
    Result<ImageDataset> ds = cifar_load(files.value(), kind);
    if (!ds.ok()) return ds.errors();
    Result<std::vector<std::string>> names = cifar_class_names(a.source, kind);
    if (!names.ok()) return names.errors();
    PackSource s = pack_source_raw(std::make_shared<const ImageDataset>(std::move(ds.value())), format, names.value());
    s.path = a.source;
    s.params = {{"split", a.split}};
    return s;
  }
  return Error{ErrCode::UnknownEnum, "--format", "'" + format + "': expected auto, idx, cifar10, cifar100 or folder"};
}

Result<std::vector<PackLevelSpec>> parse_levels(const std::vector<std::string>& specs) {
  std::vector<PackLevelSpec> out;
  for (const std::string& s : specs) {
    PackLevelSpec l;
    char extra = 0;
    if (std::sscanf(s.c_str(), "%d:%d%c", &l.short_side, &l.quality, &extra) != 2)
      return Error{ErrCode::WrongType, "--level", "'" + s + "': expected SHORT_SIDE:QUALITY, e.g. 160:90"};
    out.push_back(l);
  }
  return out;
}

int verify(const PackArgs& a) {
  Result<std::shared_ptr<DtsFile>> f = DtsFile::open(a.verify);
  if (!f.ok()) return report_errors(f.errors());
  Progress prog;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = dts_verify(*f.value(), !a.no_decode, a.threads > 0 ? a.threads : std::thread::hardware_concurrency(),
                         [&](int64_t d, int64_t n) { prog("verify", d, n); });
  if (!st.ok()) return report_errors(st.errors());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("ok: %s: %llu samples, %llu blocks checksummed%s in %.1f s\n", a.verify.c_str(),
              (unsigned long long)f.value()->header().sample_count, (unsigned long long)f.value()->header().block_count,
              a.no_decode ? "" : ", every sample decoded or size-checked", s);
  return 0;
}

}  // namespace

int cmd_pack_dts(const PackArgs& a) {
  if (!a.verify.empty()) return verify(a);
  if (a.source.empty() || a.out.empty()) {
    std::fprintf(stderr, "error: trctl pack-dts SOURCE -o OUT.dts (or --verify FILE)\n");
    return kExitBadInput;
  }
  Result<PackSource> src = open_source(a);
  if (!src.ok()) return report_errors(src.errors());
  Result<std::vector<PackLevelSpec>> levels = parse_levels(a.levels);
  if (!levels.ok()) return report_errors(levels.errors());
  PackOptions opt;
  opt.block_size = uint64_t(a.block_kib) * 1024;
  opt.reduced = levels.value();
  opt.threads = a.threads;
  opt.skip_bad = a.skip_bad;
  Progress prog;
  opt.progress = [&](const std::string& s, int64_t d, int64_t n) { prog(s, d, n); };
  const auto t0 = std::chrono::steady_clock::now();
  Result<PackReport> r = dts_pack(src.value(), opt, a.out);
  if (!r.ok()) return report_errors(r.errors());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Error& e : r->skipped) std::fprintf(stderr, "skipped: %s\n", e.str().c_str());
  std::printf("packed %lld samples (%zu skipped) from %s into %s: %llu blocks, %.1f MiB, %.1f s (%.0f samples/s)\n",
              (long long)r->samples, r->skipped.size(), a.source.c_str(), a.out.c_str(), (unsigned long long)r->blocks,
              r->file_bytes / 1048576.0, s, r->samples / s);
  for (size_t l = 0; l < r->level_bytes.size(); ++l)
    std::printf("  level %zu: %.1f MiB, mean %.1f KiB/sample\n", l, r->level_bytes[l] / 1048576.0,
                r->level_bytes[l] / 1024.0 / r->samples);
  return 0;
}

int cmd_dts_info(const std::string& path) {
  Result<std::shared_ptr<DtsFile>> f = DtsFile::open(path);
  if (!f.ok()) return report_errors(f.errors());
  std::cout << dts_info(*f.value());
  return 0;
}

int cmd_bench_data(const BenchDataArgs& a) {
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(a.source, ec);
  const int workers = a.workers > 0 ? a.workers : static_cast<int>(std::thread::hardware_concurrency());
  Result<std::shared_ptr<StreamSource>> src = folder ? stream_source_folder(a.source)
                                                     : stream_source_dts(a.source, a.level, a.memory, workers);
  if (!src.ok()) return report_errors(src.errors());
  TransformSpec rrc, flip, norm;
  rrc.kind = TransformKind::RandomResizedCrop;
  rrc.size = a.size;
  flip.kind = TransformKind::RandomHorizontalFlip;
  norm.kind = TransformKind::Normalize;
  Result<ImagePipeline> pipe = image_pipeline_build({rrc, flip, norm}, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, 3,
                                                    "bench data");
  if (!pipe.ok()) return report_errors(pipe.errors());
  StreamLoaderOptions lo;
  lo.batch_size = a.batch;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.workers = workers;
  lo.io_threads = a.io_threads;
  lo.dtype = a.fp32 ? OutDType::F32 : OutDType::F16;
  Result<std::unique_ptr<StreamLoader>> ld = StreamLoader::create(src.value(), pipe.value(), lo);
  if (!ld.ok()) return report_errors(ld.errors());
  StreamLoader& loader = *ld.value();
  // Batches run over as many epochs as needed; the clock starts after the warm-up batches.
  int64_t done = 0, images = 0;
  uint32_t epoch = 1;
  loader.start_epoch(epoch);
  auto t0 = std::chrono::steady_clock::now();
  StreamStats s0;
  for (int64_t b = 0; b < a.warmup + a.batches; ++b) {
    if (b == a.warmup) {
      t0 = std::chrono::steady_clock::now();
      s0 = loader.stats();
    }
    StreamBatch batch;
    Result<bool> more = loader.next(&batch);
    if (!more.ok()) return report_errors(more.errors());
    if (!more.value()) {
      loader.start_epoch(++epoch);
      --b;
      continue;
    }
    if (b >= a.warmup) images += batch.size;
    ++done;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const StreamStats s1 = loader.stats();
  const double n = static_cast<double>(s1.samples - s0.samples);
  const char* mode = folder ? "folder" : a.memory ? "dts-memory" : "dts-stream";
  std::printf("bench data: %s (%s, level %d): %.0f images/s, %d workers, batch %d, %lld batches, %s out\n",
              a.source.c_str(), mode, a.level, images / secs, workers, a.batch, (long long)a.batches,
              a.fp32 ? "fp32" : "fp16");
  std::printf("  per image: read %.3f ms, decode+transform %.3f ms (thread time); %.1f MB/s read\n",
              1000 * (s1.read_s - s0.read_s) / n, 1000 * (s1.decode_s - s0.decode_s) / n,
              (s1.bytes_read - s0.bytes_read) / secs / 1e6);
  if (a.json.empty()) return 0;
  BenchResult r = bench_begin("data", {a.source}, "host");
  r.add("images_per_s", images / secs, "img/s", true);
  r.add("read_ms_per_image", 1000 * (s1.read_s - s0.read_s) / n, "ms", false);
  r.add("decode_ms_per_image", 1000 * (s1.decode_s - s0.decode_s) / n, "ms", false);
  r.details.emplace_back("params", "{\"mode\": " + json_quote(mode) + ", \"level\": " + std::to_string(a.level) +
                                       ", \"workers\": " + std::to_string(workers) + ", \"batch\": " +
                                       std::to_string(a.batch) + ", \"batches\": " + std::to_string(a.batches) +
                                       ", \"size\": " + std::to_string(a.size) + ", \"dtype\": \"" +
                                       (a.fp32 ? "fp32" : "fp16") + "\"}");
  return bench_write_json(a.json, r);
}

}  // namespace trctl
