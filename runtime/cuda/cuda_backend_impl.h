// Internal to the CUDA backend: the CudaBackend class (declared here so that its lowering can live in more than
// one file: cuda_backend.cpp for the MLP ops, data and capture; cuda_lower_cnn.cpp for the CNN ops), the
// per-step device state and the resident split data. Not an API: include only from runtime/cuda/*.cpp.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/memplan/grad_check.h"
#include "core/passes/passes.h"
#include "runtime/backend.h"
#include "runtime/cuda/conv_autotune.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/cudnn_fused_conv.h"
#include "runtime/cuda/im2col_conv.h"
#include "runtime/cuda/lt_gemm.h"
#include "runtime/cuda/s2d_conv.h"
#include "runtime/ops/conv2d/conv_route.h"
#include "runtime/ops/conv2d/conv_bn_stats.h"
#include "runtime/ops/conv2d/fewc_bn_grad.h"
#include "runtime/ops/conv2d/fewc_cuda.h"
#include "runtime/ops/conv2d/wgconv.h"
#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/augment/augment_cuda.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "runtime/ops/optim/optim_extra_cuda.h"
#include "runtime/dist/grad_buckets.h"
#include "runtime/dist/nccl_comm.h"
#include "runtime/power/nvml_meter.h"

namespace trctl::cuda_detail {

// Everything that changes per step, in the plan's Hyper region.
struct DeviceState {
  OptHyper opt;
  GradScalerState scaler;
  uint32_t step;        // optimizer steps; the current one during a step (dropout's key without accumulation)
  uint32_t cursor[2];   // per DataSplit: position in the epoch order
  uint32_t epoch[2];    // per DataSplit: the epoch key of the transforms
  int32_t bad_labels;   // labels outside [0, C) seen by the loss
  uint32_t micro;       // train.accumulate_steps > 1: micro-batches run of the current optimizer step
  uint32_t key;         // ... and the dropout key of the running micro-batch (StepBookkeeping)
  GradClipState clip;   // optimizer.clip_grad_norm: this step's gradient norm and clip factor
};
static_assert(sizeof(DeviceState) <= static_cast<size_t>(kHyperBytes), "DeviceState must fit the Hyper region");

using Launch = std::function<Status()>;

// A conv geometry as a plan-map key: every shape and attribute a plan depends on (runtime/cuda/cuda_lower_cnn.cpp;
// the wgconv plans too, cuda_lower_wgconv.cpp).
std::string conv_key(const Conv2dGeom& g);

OpKind gemm_role(const Node& n);

struct SplitData {
  uint8_t* pixels = nullptr;
  int32_t* labels = nullptr;
  int32_t* order = nullptr;
  int64_t n = 0;
  size_t bytes = 0;  // of pixels
  GpuPipeline pipeline;
  bool uploaded = false;
  std::vector<int32_t> host_order;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Compiled& c, uint64_t seed, const DistEnv& dist = {}) : c_(c), seed_(seed), dist_(dist) {}
  ~CudaBackend() override;

  Status init();
  std::string name() const override { return "cuda"; }
  std::string device_description() const override { return cuda_context_describe(ctx_); }
  Status write_region(Region r, const std::vector<std::byte>& bytes) override;
  std::vector<std::byte> read_region(Region r) override;
  // Host-fed steps (datasets streamed from disk): load_batch copies a pinned batch into input slot A or B on a
  // copy stream while the previous step runs; run() replays that slot's captured graph once the copy is done.
  Status load_batch(int program, int slot, const void* x, const int32_t* y, int64_t n) override;
  OutDType host_input_dtype() const override;
  void* host_alloc(size_t bytes) override;
  void host_free(void* p) override;
  void set_lrs(const std::vector<double>& lrs) override;
  Status swap_ema() override;
  void set_lr(double lr) override;
  int64_t step() const override { return step_; }
  void set_step(int64_t s) override;
  Status run(int program, int slot) override;
  void request_loss(int program) override;
  double take_loss() override;
  double last_loss(int program) override;
  ProgramMetrics metrics(int program) override;
  void reset_metrics() override;
  Status synchronize() override;
  bool resident_data() const override { return true; }
  // Resume: the step counters, the optimizer's update count and the loss scaler live in DeviceState.
  TrainState save_state() override;
  int64_t skipped_steps() override;
  Status restore_state(const TrainState& s) override;
  Status seek_resident(DataSplit split, int64_t position) override;
  std::string memory_report() override;
  bool device_memory(RunMemory* out) const override;
  const ConvAlgoSources* conv_algo_sources() const override { return &conv_sources_; }
  Result<StepProfile> profile(int program, const ProfileOptions& opt) override;
  Result<double> energy_mj() override;  // cuda_profile.cpp, through nvml_meter()
  Status upload_split(DataSplit split, const ImageDataset& data, const TransformPipeline& tf) override;
  Status begin_epoch(DataSplit split, uint32_t epoch, const std::vector<int64_t>& order) override;
  Status run_resident(int program, DataSplit split) override;

 private:
  char* at(ValueId v) const {
    const Placement& p = c_.plan.values[v];
    const int64_t slot = p.region == Region::Inputs ? input_slot_ * c_.plan.input_slot_bytes : 0;
    return region_[static_cast<int>(p.region)] + p.offset + slot;
  }
  GpuDType act_type() const { return amp_ == Precision::Fp16 ? GpuDType::F16 : amp_ == Precision::Bf16 ? GpuDType::BF16 : GpuDType::F32; }
  bool lowp() const { return amp_ == Precision::Fp16 || amp_ == Precision::Bf16; }
  bool scaled() const { return amp_ == Precision::Fp16; }
  const void* weight_ptr(ValueId w) const {
    if (!lowp()) return at(w);
    return static_cast<char*>(lowp_weights_) + c_.plan.values[w].offset / 2;
  }
  DeviceState* state() const { return reinterpret_cast<DeviceState*>(region_[static_cast<int>(Region::Hyper)]); }
  Status refresh_lowp_weights();
  Status copy_to_device(void* dst, const void* src, size_t bytes);
  Status plan_gemms();
  StepBookkeeping step_book(const Program& p) const;
  Result<Launch> batch_fetch(int program);
  Result<std::vector<Launch>> lower(int program);
  Status lower_node(int program, size_t i, std::vector<Launch>& out);
  Status lower_gemm_node(int program, size_t i, std::vector<Launch>& out);
  Status plan_optimizer_extras();
  const GradCheckPlan& grad_check_of(int program);
  double optimizer_bytes(int program);  // the optimizer node's traffic, for the profile's roofline
  Status lower_optimizer(int program, std::vector<Launch>& out);
  // CNN nodes (runtime/cuda/cuda_lower_cnn.cpp): cuDNN plans and workspaces, then one launch list per node.
  Status plan_cnn();
  const CudnnConvPlan* conv_plan(const Node& n) const;
  ConvRoute conv_route_of(const Node& n) const;  // runtime/ops/conv2d/conv_route.h
  Conv2dGeom planned_geom(const Node& n) const;
  Status lower_cnn_node(int program, size_t i, std::vector<Launch>& out);
  Status lower_conv_node(const Node& n, std::vector<Launch>& out);
  // Few-input-channel convs under AMP (im2col_conv_eligible): fwd and wgrad as im2col + GEMM, no cuDNN plan.
  bool im2col_node(const Node& n) const;
  std::string im2col_key(const Node& n) const;
  Status plan_im2col(const Node& n);
  Status lower_im2col_conv_node(const Node& n, std::vector<Launch>& out);
  Status lowp_wgrad_supported(const Node& n) const;  // the AMP conv wgrad's destination is the gradient slot
  // Stride-2 few-channel convs under AMP (s2d_conv_eligible, train.conv_s2d): fwd (and with `on` wgrad) as
  // space-to-depth + a stride-1 cuDNN conv (planned in conv_ on s2d_conv_geom); takes precedence over im2col.
  bool s2d_node(const Node& n) const;
  Status lower_s2d_conv_node(const Node& n, std::vector<Launch>& out);
  // Few-channel convs under AMP (train.conv_fewc): the forward (fewc_conv_eligible) and with `on` or `unfolded` the
  // weight gradient (fewc_wgrad_eligible) as trctl's tensor-core implicit GEMM (runtime/ops/conv2d/fewc_cuda.h), no
  // cuDNN plan; takes precedence over s2d and im2col.
  bool fewc_node(const Node& n) const;
  Status plan_fewc(const Node& n);
  Status lower_fewc_conv_node(const Node& n, std::vector<Launch>& out);
  // Data gradients on trctl's wgmma ring kernel under AMP (train.conv_wgconv: dgrad, wgconv_dgrad_ring_eligible):
  // the filters flipped into conv_ws_, then the forward kernel on dY; forwards (fwd, wgconv_fwd_ring_eligible), with
  // their statistics epilogue for a conv_bn_stats pair and a folded batch norm's apply as their prologue; weight
  // gradients (wgrad, wgconv_wgrad_route_eligible) on the ring weight-gradient kernel, dW in f32 into the gradient
  // (runtime/cuda/cuda_lower_wgconv.cpp).
  bool wgconv_node(const Node& n) const;
  Status plan_wgconv(const Node& n, bool bn_prologue);  // bn_prologue: a weight gradient of a WgFold::unwritten y
  Status lower_wgconv_conv_node(const Node& n, std::vector<Launch>& out);
  // train.conv_dgrad_fwd: the plain cuDNN data gradients that run as cuDNN's forward over flipped filters
  // (runtime/cuda/cuda_lower_dgrad_fwd.cpp; planned after plan_conv_bn_bwd, may grow conv_ws_bytes_) and their
  // launches (the flip into the start of conv_ws_, then the forward).
  Status plan_dgrad_fwd(const AutotuneCache& cache, ConvDesc d);
  Status lower_dgrad_fwd_node(const Node& n, const std::string& fkey, std::vector<Launch>& out);
  // conv_ws_ bytes of a data gradient's flipped filters W' (K x R x S x C of the io type, rounded up to 256), at the
  // start of conv_ws_: a conv_dgrad_fwd forward's workspace follows them, and so do a wgconv data gradient's
  // batch-norm backward partials (cuda_lower_wgconv.cpp).
  size_t dgrad_fwd_filter_bytes(const Conv2dGeom& g) const;
  // train.conv_bn_stats (fused / auto): the conv -> training batch norm pairs whose conv runs cuDNN's conv + genstats
  // graph and whose batch norm finalizes its statistics from the sums; planned at the end of plan_cnn.
  Status plan_conv_bn_stats();
  Status plan_conv_bn_bwd();  // train.conv_bn_backward (after plan_conv_bn_stats; may grow conv_ws_bytes_)
  Status plan_pool_xa();      // pool_xa_ for every fused batch norm + pool backward over tiling windows
  // train.conv_wgrad_overlap (runtime/cuda/cuda_lower_overlap.cpp): the weight gradients with an overlap window
  // that run on ctx_.side_stream (wgrad_side_) and its scratch, planned last in plan_cnn; a forked node's launches
  // (fork event, the node on the side stream, the event `join` the step stream waits for: join_launch).
  Status plan_wgrad_overlap();
  Status lower_forked_wgrad(int program, size_t i, std::vector<Launch>& out, cudaEvent_t* join);
  Launch join_launch(cudaEvent_t done) const;
  struct WgradScratch {  // where a plain cuDNN weight gradient runs: its stream, workspace and AMP io-dtype dW
    cudaStream_t stream;
    void* ws;
    size_t ws_bytes;
    void* dw_io;
  };
  // dY, X -> dW (x: X or its channel-padded copy, cp its channels), under AMP through dw_io cast into the fp32
  // gradient; returns the cuDNN call (for warm_).
  Launch cudnn_wgrad_launches(const Node& n, const CudnnConvPlan& plan, const void* x, int64_t cp,
                              const WgradScratch& on, std::vector<Launch>& out);
  BnSums conv_bn_sums(ValueId conv_out) const;  // the pair's sums, or none
  Status lower_batch_norm_node(const Node& n, std::vector<Launch>& out);
  Status bn_param_grads_supported(const Node& n) const;  // dgamma, dbeta go to the parameters' own gradient slots
  Status lower_batch_norm_pool_node(const Node& n, std::vector<Launch>& out);  // attrs.pool: pass_fuse_bn_pool
  // Activation and Loss nodes (runtime/cuda/cuda_lower_act_loss.cpp): the class weights' device copy, then launches.
  Status plan_losses();
  Status lower_act_loss_node(int program, size_t i, std::vector<Launch>& out);
  Status capture(int program);
  Status capture_into(int program, int slot, cudaGraphExec_t* exec);
  // Data parallelism (runtime/cuda/cuda_dist.cpp): the communicator, then per train program the bucket all-reduces
  // on the communication stream after each bucket's last gradient writer, joined before the optimizer.
  Status dist_init();
  Status dist_before_node(int program, size_t i, std::vector<Launch>& out);
  Status dist_after_node(int program, size_t i, std::vector<Launch>& out);
  void dist_note_launch(int program);
  // A fork/join event of a captured step (data parallelism's buckets, train.conv_wgrad_overlap's forks), owned by
  // the backend until its destructor (step_events_).
  Result<cudaEvent_t> step_event();

  const Compiled& c_;
  uint64_t seed_;
  // The board's energy counter for energy_mj and profile's energy loops: one NVML session, opened at the first
  // call (cuda_profile.cpp) and closed by the destructor, or the errors of that one attempt.
  Result<const NvmlMeter*> nvml_meter();
  NvmlMeter nvml_{};
  std::optional<std::vector<Error>> nvml_failed_;
  Precision amp_ = Precision::Fp32;
  CudaContext ctx_;
  char* arena_ = nullptr;
  std::array<char*, kRegionCount> region_{};
  void* lowp_weights_ = nullptr;
  std::vector<void*> scratch_;                         // per program: the fused loss kernel's workspace
  std::vector<size_t> ce_ws_bytes_;
  float* class_weights_ = nullptr;                     // weighted cross-entropy's class weights (C), device
  std::map<std::pair<int, size_t>, LtGemmPlan> gemm_;  // (program, node) -> plan
  std::map<std::pair<int, size_t>, size_t> bias_into_gemm_;  // (program, LinearGradBias node) -> its dW GEMM node
  struct ReluFusion {
    int program;
    size_t forward, dgrad, relu_grad;  // node indices: Linear+ReLU, the next layer's LinearGradInput, the ReluGrad
    void* mask;                        // (N, round_up(M, 128) bits) written by the forward, read by the dX GEMM
  };
  std::vector<ReluFusion> relu_fusions_;
  void find_relu_fusions();
  bool early_write_safe(int program, ValueId v, size_t at) const;
  const ReluFusion* relu_fusion(int program, size_t node) const {
    for (const ReluFusion& rf : relu_fusions_)
      if (rf.program == program && (rf.forward == node || rf.dgrad == node || rf.relu_grad == node)) return &rf;
    return nullptr;
  }
  std::map<std::string, CudnnConvPlan> conv_;  // by geometry key (cudnn_conv_describe's input part)
  std::map<std::string, std::string> dgrad_fwd_;  // train.conv_dgrad_fwd: a data gradient's conv_key -> its forward's
  ConvAlgoSources conv_sources_;                // where conv_'s algorithms came from (plan_cnn)
  void* conv_ws_ = nullptr;                     // one cuDNN workspace: the step's launches run one after another
  size_t conv_ws_bytes_ = 0;
  void* bn_ws_ = nullptr;                       // batch norm's per-channel partial sums
  size_t bn_ws_bytes_ = 0;
  void* bias_ws_ = nullptr;                     // two-pass bias gradients of convolutions (many rows)
  size_t bias_ws_bytes_ = 0;
  void* lowp_dw_ = nullptr;
  void *pad_x_ = nullptr, *pad_dx_ = nullptr, *pad_w_ = nullptr;  // channel-padded conv scratch (AMP, C % 8 != 0)
  int64_t pad_x_elems_ = 0, pad_w_elems_ = 0;                     // AMP: a conv weight gradient in the activation dtype, before its cast
  std::map<std::string, Im2colConvPlan> im2col_;  // by im2col_key; their cols and Wc live in conv_ws_
  std::map<std::string, FewcConvPlan> fewc_;          // forwards, by geometry key (conv_key)
  std::map<std::string, FewcWgradPlan> fewc_wgrad_;   // weight gradients (partials in conv_ws_), likewise
  std::map<std::string, WgConvPlan> wgconv_;          // data gradients, by the forward's conv_key (flip in conv_ws_);
                                                      // forwards by "fwd " + conv_key
  std::map<std::string, WgConvWgradPlan> wgconv_wgrad_;  // weight gradients by conv_key (partials in conv_ws_)
  struct WgFold {  // a batch norm whose apply + ReLU its consumer wgconv forward runs (wgconv_bn_apply_choose)
    ValueId x = kNoValue, gamma = kNoValue, beta = kNoValue, mean = kNoValue, invstd = kNoValue;
    bool unwritten = false;  // y's other readers are ring weight gradients applying it to x themselves: the conv
                             // writes no y (their plans: wgconv_wgrad_'s "bn " + conv_key entries)
  };
  std::map<ValueId, WgFold> wg_fold_;                 // by the batch norm's output y (the conv writes it)
  WgConvPrologue wg_prologue(const WgFold& f);        // its apply as a ring kernel's prologue (cuda_lower_wgconv.cpp)
  // The batch norms whose backward dx the few-channel weight gradient computes (fewc_bn_grad_choose), by dx;
  // their weight gradients' plans are fewc_wgrad_'s "bn " + conv_key entries.
  std::map<ValueId, FewcBnGradFold> fewc_bn_grad_;
  std::map<std::string, FusedConvPlan> fused_conv_;   // conv + genstats graphs (train.conv_bn_stats), by conv_key;
                                                      // with the BN-apply prologue by "prologue " + conv_key
  std::map<std::string, FusedWgradPlan> fused_wgrad_; // wgrad on relu(x * scale + shift) (train.conv_bn_apply)
  struct BnFold {                                     // a batch norm whose apply its consumer conv does
    ValueId x = kNoValue;                             // the batch norm's input, which the consumer reads instead
    void* consts = nullptr;                           // (2, C) f16: scale (row 0), shift (row 1)
    int64_t c = 0;
    const void* scale() const { return consts; }
    const void* shift() const { return static_cast<const char*>(consts) + c * 2; }
  };
  std::map<ValueId, BnFold> bn_fold_;                 // by the batch norm's (never written) output y
  std::map<ValueId, float*> conv_bn_sums_;            // fused conv's output -> its (2, K) f32 sums: sum, sqsum
  // train.conv_bn_backward: fused: graph (d) plans by conv_key, the pairs by the data gradient's output (the batch
  // norm's g), and one (3, max C) f32 scratch for the graph's dx coefficients (unused, but cuDNN writes them).
  std::map<std::string, FusedDgradPlan> fused_dgrad_;
  std::map<ValueId, ConvBnBwdPair> conv_bn_bwd_;
  float* bn_bwd_eq_ = nullptr;
  float* conv_bn_sums_mem_ = nullptr;                 // one allocation for all of them
  // Fused batch norm + ReLU + max pool over tiling windows: the x element at each window's argmax (pooled shape,
  // act dtype), written by the training forward and read by the backward's pooled statistics
  // (batchnorm_bwd_pool_cuda's x_at_max), by the batch norm's input X; one allocation (pool_xa_mem_).
  std::map<ValueId, void*> pool_xa_;
  void* pool_xa_mem_ = nullptr;
  size_t pool_xa_bytes_ = 0;  // counted in device_memory's workspaces
  void *s2d_z_ = nullptr, *s2d_w_ = nullptr;      // space-to-depth scratch: z (N, Hz, Wz, Cz), w2 (K, R2, S2, Cz)
  size_t s2d_z_bytes_ = 0, s2d_w_bytes_ = 0;      // (io dtype; the largest of all s2d convs)
  std::vector<Launch> warm_;                    // cuDNN calls run once before capture (module loading)
  std::vector<cudaGraphExec_t> exec_;
  // Host-fed steps: one graph per (program, input slot), a copy stream and its events.
  bool fed_ = false;
  int input_slot_ = 0;  // the Inputs slot at() resolves to (0 except while a host-fed slot is lowered)
  std::vector<std::array<cudaGraphExec_t, 2>> fed_exec_;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copy_done_[2] = {}, step_done_[2] = {};
  std::vector<int64_t> runs_;
  int64_t* inject_steps_ = nullptr;  // debug.inject_nonfinite_grad_steps on the device
  void* clip_ws_ = nullptr;          // optimizer.clip_grad_norm: the norm's per-block partials
  void* lars_mem_ = nullptr;         // optimizer.type lars: tensor and chunk tables, norm workspace (one block)
  LarsDevice lars_;                  // ... pointers into lars_mem_
  int32_t inject_count_ = 0;
  // Per program (grad_check_of): what the non-finite check before the optimizer reads, and the linear weight
  // gradients checked through their operands right after their GEMM (train.grad_check; core/memplan/grad_check.h).
  std::map<int, GradCheckPlan> grad_check_;
  SplitData split_[2];
  int64_t step_ = 0;
  std::vector<double> host_lrs_;  // set_lrs: the source of its async copies
  uint32_t host_u32_[4] = {};
  float* loss_host_ = nullptr;      // request_loss's pinned copy of a loss, and its event
  cudaEvent_t loss_event_ = nullptr;
  bool loss_requested_ = false;
  double loss_fallback_ = 0;  // the last loss taken, or request_loss's synchronous read (no pinned copy)
  DistEnv dist_;                               // enabled: one rank of a data-parallel job (world size 1 included)
  std::unique_ptr<NcclComm> comm_;
  std::map<int, GradBucketPlan> dist_buckets_;  // per train program
  std::vector<cudaEvent_t> step_events_;        // fork/join events of the captured steps (step_event)
  std::set<std::pair<int, size_t>> wgrad_side_;  // train.conv_wgrad_overlap: (program, node) on the side stream
  void* side_ws_ = nullptr;                       // ... their cuDNN workspace and AMP dW (largest of them)
  size_t side_ws_bytes_ = 0;
  void* side_dw_ = nullptr;
  size_t side_dw_bytes_ = 0;
};

}  // namespace trctl::cuda_detail
