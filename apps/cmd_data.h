// The data commands of trctl: pack-dts (and --verify), dts info, bench data.
#pragma once
#include <string>
#include <vector>

namespace trctl {

struct PackArgs {
  std::string source, out, format = "auto", labels, split = "train", verify;
  std::vector<std::string> levels;  // "SHORT:QUALITY"
  int block_kib = 16384;
  int threads = 0;
  bool skip_bad = false, no_decode = false;
};
int cmd_pack_dts(const PackArgs& a);
int cmd_dts_info(const std::string& path);

struct BenchDataArgs {
  std::string source;      // a DTS file or an image folder
  int level = 0;           // DTS level by short side (0 = full size)
  bool memory = false;     // DTS: whole level in RAM
  int workers = 0;         // 0: hardware concurrency
  int io_threads = 2;
  int batch = 256, batches = 100, warmup = 10, size = 224;
  bool fp32 = false;
  std::string json;
};
int cmd_bench_data(const BenchDataArgs& a);

}  // namespace trctl
