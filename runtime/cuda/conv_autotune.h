// Measured cuDNN convolution algorithms (cudnnFind*Ex, like PyTorch's cudnn.benchmark) and the on-disk cache that
// lets runs plan from them without searching: cudnn_conv_autotune() measures, cudnn_conv_plan_cached() plans.
//
// Cache file (text, one entry a line, written atomically; STYLE.md §11):
//   # trctl conv autotune v2
//   gpu=NVIDIA_H200 cudnn=91900 cc=9.0 dir=fwd io=f16 tf32=0 det=1 n=8 h=56 w=56 c=64 k=64 r=3 s=3 stride=1x1
//       pad=1x1 dil=1x1 groups=1 -> algo=1 math=1 ws=0 ms=0.0123          (one line in the file)
//   gpu=... dir=wgrad ... -> engine=7:2=3,15=1 ws=1048576 ms=0.0101      (a graph-API engine config won)
// The key (left of " -> ") names everything the choice depends on: the GPU (name with every character outside
// [A-Za-z0-9_.-] replaced by '_'), cudnnGetVersion(), the compute capability, the direction, the io dtype, tf32,
// deterministic and the full geometry. The value: either cuDNN's legacy algorithm id for that direction and the
// math type it runs with (cudnnMathType_t as an int), or a graph-API engine config (cudnn_engine_id_str: the
// engine's global index and its knob choices; graph (p) of cudnn_fused_conv.h); then its workspace bytes and
// measured milliseconds (informational). Blank lines and lines starting with '#' after the header are comments.
// Any other line that is not exactly one canonical entry, a duplicate key, or a missing or different header is an
// error naming file:line. Version 1 files (legacy entries only) are read as they are; saving writes version 1 while
// every entry is a legacy one (what older builds read), version 2 once an engine entry is in.
#pragma once
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <map>
#include <string>

#include "core/compiler.h"
#include "core/util/error.h"
#include "runtime/cuda/cudnn_conv.h"

namespace trctl {

struct ConvAlgoChoice {
  int algo = -1;   // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t of the key's direction (engine.engine < 0)
  int math = 0;    // cudnnMathType_t the plan runs it with
  size_t workspace = 0;
  float ms = 0;    // measured time of one call
  CudnnEngineId engine;  // engine >= 0: a graph-API engine config runs the direction instead (algo, math unused)
};
struct AutotuneCache {
  std::map<std::string, ConvAlgoChoice> entries;  // autotune_key -> choice
};

// What a cache key says about the device.
struct AutotuneDevice {
  std::string gpu;  // cudaDeviceProp::name, sanitized as in the file comment
  int cudnn_version = 0;
  int cc_major = 0, cc_minor = 0;
};
// The current CUDA device's identity and cudnnGetVersion().
Result<AutotuneDevice> autotune_device_current();
// The cache key of one direction of d on dev (d.g need not be finished: p, q are not part of it).
std::string autotune_key(const AutotuneDevice& dev, ConvDir dir, const ConvDesc& d);

// $TRCTL_AUTOTUNE_CACHE if set and non-empty, else $HOME/.cache/trctl/conv_autotune.txt, else "" (no HOME: no
// cache; loading "" gives an empty cache, saving to "" is an error).
std::string autotune_cache_path();
// A missing file is an empty cache (ok). Errors: Io (unreadable), Format with where = "path:line".
Result<AutotuneCache> autotune_cache_load(const std::string& path);
// Parses the text of a cache file; `path` only names it in errors.
Result<AutotuneCache> autotune_cache_parse(const std::string& text, const std::string& path);
// The file's text: the header, then one line per entry in key order.
std::string autotune_cache_format(const AutotuneCache& c);
// Atomic replacement of path (its directory is created when missing).
Status autotune_cache_save(const std::string& path, const AutotuneCache& c);

// Measures every algorithm of the three directions of d on the handle's device (cudnnFind*Ex on scratch buffers
// of d's sizes filled with small finite values, and a workspace of up to max_workspace bytes, halved while it cannot
// be allocated) and records, per direction, the fastest that passes cudnn_conv_choose's filters (status, math,
// determinism, workspace), replacing older entries of the same keys. With `engines` (f16/bf16, groups 1 only), each
// direction's graph-API engine configs (conv_graph_candidates: at most kAutotuneMaxPerHeuristic from each of
// heuristics A and B, the same determinism and fp32-accumulation filters, no runtime-compiled engines) are timed
// too on the same buffers (events around kAutotuneReps runs after a warm-up, a config whose first timed run takes
// 1.5x the legacy winner's time stopped there; the best config and the legacy winner then re-timed alternately,
// medians of three), and a config that beats the legacy winner by more than kAutotuneMargin and gives its output
// (1e-2 relative) is recorded instead.
// Synchronizes the device; not capturable.
Status cudnn_conv_autotune(cudnnHandle_t h, const ConvDesc& d, AutotuneCache& cache,
                           size_t max_workspace = size_t{256} << 20, bool engines = true);
constexpr int kAutotuneReps = 5;           // timed runs per candidate in the engine comparison
constexpr int kAutotuneMaxPerHeuristic = 10;  // graph-API configs taken from each of heuristics A and B
constexpr double kAutotuneMargin = 0.02;   // a graph-API config must be this much faster than the legacy winner

// Plan like cudnn_conv_plan, but each direction found in the cache uses the cached choice (validated: cuDNN must
// accept it for these descriptors; an entry cuDNN refuses is an error naming its key); directions not in the
// cache fall back to the heuristics. from_cache (may be nullptr) gets, per direction (ConvDir order), whether the
// cache held its key (the dgrad entry of a desc without need_dgrad included, though that direction is not planned).
Result<CudnnConvPlan> cudnn_conv_plan_cached(cudnnHandle_t h, const ConvDesc& d, const AutotuneCache& cache,
                                             size_t max_workspace = size_t{256} << 20,
                                             std::array<bool, 3>* from_cache = nullptr);

// For `trctl bench CFG --autotune`: every distinct conv geometry of every program of c, with the ConvDesc that
// CudaBackend::plan_cnn builds (io = the AMP dtype of c.spec.train.precision, tf32 when precision is tf32,
// deterministic = c.spec.train.deterministic; under AMP the forward and data gradient of a conv over C % 8 != 0
// channels with C padded to a multiple of 8, and a space-to-depth conv's forward (train.conv_s2d: forward or on)
// and weight gradient (on) on its stride-1 geometry, as the backend plans them), measured on device 0 and merged into the
// cache at `path` (other entries kept); `engines` as cudnn_conv_autotune's. `report` (may be nullptr) gets one line
// per direction and geometry: the chosen algorithm and its time, and the heuristic's algorithm with its measured
// time for comparison (and with engines, a line on the graph-API configs against the legacy winner).
Status conv_autotune_spec(const Compiled& c, const std::string& path, bool engines, std::string* report);

}  // namespace trctl
