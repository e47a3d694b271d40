// The backend interface: a backend allocates the compiled plan's regions once, then executes programs over
// them. The CPU backend (runtime/cpu) is the reference; the CUDA backend lowers the same plan.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ckpt/checkpoint.h"  // TrainState
#include "core/compiler.h"
#include "core/util/error.h"
#include "dataio/dataset.h"
#include "dataio/image_ops.h"  // OutDType
#include "dataio/transforms.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/pool/pool.h"
#include "runtime/run_facts.h"  // ConvAlgoSources, RunMemory

namespace trctl {

enum class DataSplit { Train = 0, Val = 1 };

// Epoch accumulators of one program (loss summed per sample, correct predictions, samples seen).
struct ProgramMetrics {
  double loss_sum = 0, correct = 0, count = 0;
  double correct5 = 0;  // top-5 (accuracy_topk_cpu's rule)
};

// Per-node device time of one program (trctl bench CFG --layers): each node's launches run on their own,
// `reps` times between events, next to the replay time of the whole captured step.
struct NodeTime {
  std::string name, op;      // node name ("conv1.grad_weight"; "augment" for the batch fetch) and op kind
  std::string shape;         // its first output's shape
  double ms = 0;             // device time per run
  double flops = 0;          // arithmetic of GEMM/convolution nodes (0 for the others)
  double bytes = 0;          // bytes its inputs and outputs take as stored (read once, written once)
  std::vector<double> launch_ms;  // nodes lowered to several launches: each one's device time on its own
  double mj = 0;             // energy per run, mJ (ProfileOptions::energy_s > 0; else 0): the board's counter over
                             // at least energy_s seconds of back-to-back runs, divided by the runs
  double w = 0;              // the board's mean power over those runs, W (mj / w = its time per run under that
                             // load: longer than ms where a power cap lowered the clocks)
};
struct StepProfile {
  std::vector<NodeTime> nodes;
  double graph_ms = 0;       // one replay of the captured step (a burst of reps replays after 3 warm-up ones)
  double sustained_ms = 0;   // one replay after ProfileOptions::sustain_s seconds of back-to-back replays (0: not
                             // measured): a training run's clocks, which a power cap lowers within a second or two
  double sustain_s = 0;      // the replay time before sustained_ms was timed
  int sustained_reps = 0;    // the replays sustained_ms averages
  double launch_host_ms = 0; // host time of one cudaGraphLaunch call onto a drained stream
  double restart_ms = 0;     // a launch onto a drained stream: host wall time to its end, less graph_ms
  int reps = 0;
  double step_mj = 0;        // energy per replay of the step, mJ (energy_s > 0), over energy_s s of replays
  double step_w = 0;         // the board's mean power over those replays, W
  double energy_s = 0;       // the seconds each energy figure was measured over (0: energy not measured)
  double energy_settle_s = 0;  // the seconds of the same runs before each figure's interval (ProfileOptions)
  // The training state the profile left (filled by the trainer after Backend::profile): the loss of the last run
  // and the steps whose update was skipped for non-finite gradients. A diverged state (NaN, inf) times arithmetic
  // on NaN, whose power and so whose clocks under a power cap are not a training step's.
  double end_loss = 0;
  int64_t skipped_steps = -1;  // -1: not read
};

// What Backend::profile measures: each node `reps` times, the captured step in a burst of `reps` replays, and, when
// sustain_s > 0, the step again after sustain_s seconds of back-to-back replays (over at least one more second).
// energy_s > 0: also the energy of the step and of each node, each over energy_s seconds of back-to-back runs (the
// board's counter through NVML, runtime/power/nvml_meter.h; an error where the board has none), counted from
// energy_settle_s seconds after the runs start: the board's counter lags the load (RESULTS.md run 66: without a
// settle, 0.5 s figures of one kernel differed by up to 50 % between two profiles, each carrying part of the node
// before it), so each figure's first runs only bring the board to this load.
struct ProfileOptions {
  int reps = 20;
  double sustain_s = 0;
  double energy_s = 0;
  double energy_settle_s = 1.0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // One line on the device and the libraries it runs with (run.json's "device", the run log): the CUDA backend's
  // GPU, SMs, cuBLASLt and cuDNN versions as loaded; "" where there is nothing beyond name().
  virtual std::string device_description() const { return ""; }

  // Raw bytes of a whole region (plan layout) <-> backend.
  virtual Status write_region(Region r, const std::vector<std::byte>& bytes) = 0;
  virtual std::vector<std::byte> read_region(Region r) = 0;
  // The Weights region as float (F32 plans).
  Status write_weights(const std::vector<float>& weights);
  std::vector<float> read_weights();

  // Copies one batch into input slot `slot` (0 = A, 1 = B) for `program`: x (n, H, W, C) in host_input_dtype(),
  // y (n,) i32. The caller may reuse x and y when it returns.
  virtual Status load_batch(int program, int slot, const void* x, const int32_t* y, int64_t n) = 0;
  // What load_batch reads: f32 (CPU), or the activation dtype of an AMP plan on a GPU.
  virtual OutDType host_input_dtype() const { return OutDType::F32; }
  // Host buffers for batches (pinned memory on a GPU, so copies overlap the step); nullptr on failure.
  virtual void* host_alloc(size_t bytes);
  virtual void host_free(void* p);

  // Learning rates used by the following train steps, one per optimizer parameter group (Graph::param_groups, in
  // order; the trainer computes them with param_group_lrs), kept in the hyper-parameter block.
  virtual void set_lrs(const std::vector<double>& lrs) = 0;
  // Every group at `lr` (tests; equal to set_lrs when no group overrides the optimizer's lr).
  virtual void set_lr(double lr) = 0;
  // Number of optimizer steps taken so far (the next train step is step() + 1); set_step for resume and tests.
  virtual int64_t step() const = 0;
  virtual void set_step(int64_t step) = 0;

  // Runs one program over the batch in `slot`. A train program increments the step, runs forward, backward and
  // the optimizer; an eval program runs forward and the metrics. With train.accumulate_steps k > 1 a micro-batch
  // program (Program::micro) runs forward and backward and adds its gradients into the accumulators without
  // incrementing the step (step() counts optimizer steps); the train program after it (at most k - 1 of them)
  // adds the accumulators in and steps.
  virtual Status run(int program, int slot) = 0;

  // Loss of the last run of `program`, and its epoch accumulators (reset by reset_metrics). Reading them may
  // wait for the device: the trainer asks at log intervals and epoch ends only.
  virtual double last_loss(int program) = 0;
  // The loss of `program`'s last launched run without draining the device's queue: request_loss starts reading it
  // behind that run; take_loss returns it, waiting for that run only (runs launched since may still be queued, so
  // the device never idles for a log line), and again on a second call. One request at a time; a synchronous
  // backend reads it at the request.
  virtual void request_loss(int program) = 0;
  virtual double take_loss() = 0;
  virtual ProgramMetrics metrics(int program) = 0;
  virtual void reset_metrics() = 0;
  // Whether a run can continue from a checkpoint on this backend (its per-step state restored by restore_state).
  virtual bool supports_resume() const { return true; }
  // The per-step state a checkpoint needs besides the regions: step, loss scaler, optimizer update count (may wait
  // for the device). The trainer fills in the epoch and data position.
  virtual TrainState save_state() {
    TrainState s;
    s.step = step();
    return s;
  }
  virtual Status restore_state(const TrainState& s) {
    set_step(s.step);
    return ok_status();
  }
  // Training steps whose update was skipped because their gradients held inf or NaN (an fp16 loss-scale overflow,
  // or debug.inject_nonfinite_grad_steps), since the backend was made; may wait for the device. A skipped step still
  // counts in step(), not in TrainState::opt_updates.
  virtual int64_t skipped_steps() { return 0; }
  // Waits until all queued work is done (for timing; a no-op on synchronous backends).
  virtual Status synchronize() { return ok_status(); }
  // Exchanges the parameters with their exponential moving average (train.ema_decay > 0): validation with the
  // averaged weights runs between two calls.
  virtual Status swap_ema() {
    return Error{ErrCode::NotSupported, name() + " backend", "train.ema_decay is not supported on this backend yet"};
  }
  // Times every node of `program` (device-resident data already uploaded and an epoch begun).
  virtual Result<StepProfile> profile(int program, const ProfileOptions& opt);
  // The board's energy counter in mJ (a GPU's, through NVML: it grows with everything the card runs, so the
  // trainer reads it at an epoch's start and at its end after synchronize()). NotSupported where there is none
  // (the CPU backend) or the driver's NVML cannot be opened; the counter updates every 20-100 ms, so a difference
  // over an epoch of seconds is good to ~1 %.
  virtual Result<double> energy_mj() {
    return Error{ErrCode::NotSupported, name(), "no board energy counter on this backend"};
  }
  // One line on the device memory the backend holds (empty where there is nothing to say), for the run log.
  virtual std::string memory_report() { return ""; }
  // Where the algorithms of the backend's cuDNN convolution plans came from (autotune cache or heuristics), known
  // once the backend is made; the trainer records it in run.json. nullptr: the backend has no such choice (cpu).
  virtual const ConvAlgoSources* conv_algo_sources() const { return nullptr; }
  // The device memory the backend allocated (plan, AMP weight copy, workspaces, resident data; run.json's
  // device_memory), for a report that compares it with another tool's allocator peak. false: no device memory to
  // speak of (cpu).
  virtual bool device_memory(RunMemory*) const { return false; }

  // ---- Device-resident data (small datasets): the backend keeps the uint8 images and labels of a split and
  // runs the split's transform pipeline itself, as the first step of every program run, so that no batch crosses
  // from the host. A backend without it feeds batches through load_batch.
  virtual bool resident_data() const { return false; }
  virtual Status upload_split(DataSplit split, const ImageDataset& data, const TransformPipeline& tf);
  // Uploads the epoch's sample order (a permutation of the split, or its prefix for train_subset) and rewinds.
  virtual Status begin_epoch(DataSplit split, uint32_t epoch, const std::vector<int64_t>& order);
  // Gathers and transforms the next `batch` samples of the order into the program's input, then runs it.
  virtual Status run_resident(int program, DataSplit split);
  // Moves the split's position in the current epoch's order (a resumed run skipping the batches it trained).
  virtual Status seek_resident(DataSplit split, int64_t position);
};

// Kaiming-uniform (fan_in, ReLU gain): W ~ U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)); biases and norm shifts zero,
// norm scales one. Drawn from
// Philox(seed, Init, parameter index) so the result depends on the seed and the parameter only.
// Returns the Weights region's bytes in the plan's compute dtype.
std::vector<std::byte> params_init(const Compiled& c, uint64_t seed);
// The Buffers region at its initial values (running means 0, running variances 1), in the compute dtype.
std::vector<std::byte> buffers_init(const Compiled& c);

// Geometry of a Conv2d (or its gradient) node: x the (N,H,W,C) input value, w the (K,R,S,C/g) weight value. A
// node whose geometry the compiler accepted always has one (else: std::logic_error, an internal invariant).
Conv2dGeom conv2d_geom_of(const Graph& g, const Node& n, ValueId x, ValueId w);
// Whether k is a convolution or one of its gradients, and the (x, w) conv2d_geom_of takes for such a node:
// Conv2d (X, W), Conv2dGradInput (dY, W) -> dX, Conv2dGradWeight (dY, X) -> dW.
bool is_conv_op(OpKind k);
std::pair<ValueId, ValueId> conv_operands(const Node& n);
// Geometry of a pooling node over the (N,H,W,C) input value x.
Pool2dGeom pool2d_geom_of(const Graph& g, const Node& n, ValueId x);
// The beta a training batch norm's backward (BatchNormGrad: dY, X, gamma, save_mean, ...) recomputes its fused
// ReLU's mask from x with: in[2] of the BatchNorm that wrote its save_mean, when that forward fused the ReLU without a
// residual (the mask is then a function of x alone); kNoValue otherwise.
ValueId bn_grad_relu_beta(const Graph& g, const Node& bn_grad);
// Whether node `node` of p reads v as its input `slot` and no node of p reads v otherwise.
bool read_only_at(const Program& p, ValueId v, size_t node, size_t slot);

std::unique_ptr<Backend> make_cpu_backend(const Compiled& c, uint64_t seed, int threads);

}  // namespace trctl
