// NcclComm over NCCL: a non-blocking communicator (so that initialisation and collectives can time out), the
// communication stream, the device tick counter and the watchdog thread.
#include "runtime/dist/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/cuda/cuda_check.h"

namespace trctl {

Status dist_tick_cuda(cudaStream_t s, unsigned long long* counter);  // nccl_tick.cu

namespace {

using Clock = std::chrono::steady_clock;

Error nccl_error(ncclResult_t r, const char* call, const char* file, int line, ncclComm_t comm) {
  std::string msg = std::string(call) + ": " + ncclGetErrorString(r);
  if (r == ncclInProgress) msg = std::string(call) + ": not done within TRCTL_DIST_TIMEOUT_S (a peer rank died or hangs)";
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) msg += " (" + std::string(last) + ")";
  }
  return Error{ErrCode::Internal, std::string(file) + ":" + std::to_string(line), msg};
}

}  // namespace

struct NcclComm::Impl {
  DistEnv env;
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr, watch_stream = nullptr;
  unsigned long long* ticks_dev = nullptr;  // steps whose collectives are done (device)
  unsigned long long* ticks_host = nullptr; // pinned copy the watchdog reads
  std::atomic<unsigned long long> enqueued{0};
  std::unique_ptr<Rendezvous> rdv;
  std::thread watchdog;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;

  // Waits until a non-blocking call's work is done (ncclInProgress), up to the deadline.
  ncclResult_t wait_ready(ncclResult_t r) {
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(int64_t(env.timeout_s * 1000));
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) return ncclInProgress;
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    }
    return r;
  }

  [[noreturn]] void fatal(const std::string& why) {
    std::fprintf(stderr, "error: rank %d/%d: %s; stopping this rank\n", env.rank, env.world_size, why.c_str());
    std::fflush(stderr);
    // ncclCommAbort makes this rank's pending NCCL kernels return; give it a few seconds, then exit regardless.
    std::atomic<bool> aborted{false};
    std::thread([this, &aborted] {
      ncclCommAbort(comm);
      aborted = true;
    }).detach();
    for (int i = 0; i < 50 && !aborted; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::_Exit(1);
  }

  void watch() {
    if (cudaSetDevice(device) != cudaSuccess) fatal("watchdog: cudaSetDevice failed");
    unsigned long long last_done = 0;
    Clock::time_point last_progress = Clock::now();
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop; })) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm, &async);
      if (q != ncclSuccess || (async != ncclSuccess && async != ncclInProgress))
        fatal(std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(q != ncclSuccess ? q : async) +
              " (" + ncclGetLastError(comm) + "); a peer rank probably died");
      const unsigned long long queued = enqueued.load();
      if (cudaMemcpyAsync(ticks_host, ticks_dev, sizeof *ticks_host, cudaMemcpyDeviceToHost, watch_stream) !=
              cudaSuccess ||
          cudaStreamSynchronize(watch_stream) != cudaSuccess)
        fatal("watchdog: cannot read the progress counter (CUDA error)");
      const unsigned long long done = *ticks_host;
      if (done != last_done || done >= queued) {
        last_done = done;
        last_progress = Clock::now();
        continue;
      }
      const double stalled = std::chrono::duration<double>(Clock::now() - last_progress).count();
      if (stalled > env.timeout_s)
        fatal("no gradient all-reduce finished for " + std::to_string(static_cast<int>(stalled)) + " s (" +
              std::to_string(queued - done) + " step(s) queued): another rank died or hangs (TRCTL_DIST_TIMEOUT_S=" +
              std::to_string(static_cast<int>(env.timeout_s)) + ")");
    }
  }
};

#define TRCTL_NCCL_TRY(impl, call)                                                              \
  do {                                                                                          \
    const ncclResult_t trctl_nr_ = (impl)->wait_ready(call);                                    \
    if (trctl_nr_ != ncclSuccess) return nccl_error(trctl_nr_, #call, __FILE__, __LINE__, (impl)->comm); \
  } while (0)

NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclComm::~NcclComm() {
  Impl& m = *impl_;
  if (m.watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m.mu);
      m.stop = true;
    }
    m.cv.notify_all();
    m.watchdog.join();
  }
  if (m.stream) TRCTL_CUDA_WARN(cudaStreamSynchronize(m.stream));
  if (m.comm) {
    ncclResult_t r = m.wait_ready(ncclCommFinalize(m.comm));
    if (r == ncclSuccess) r = ncclCommDestroy(m.comm);
    if (r != ncclSuccess) ncclCommAbort(m.comm);
  }
  if (m.watch_stream) TRCTL_CUDA_WARN(cudaStreamDestroy(m.watch_stream));
  if (m.stream) TRCTL_CUDA_WARN(cudaStreamDestroy(m.stream));
  TRCTL_CUDA_WARN(cudaFree(m.ticks_dev));
  if (m.ticks_host) TRCTL_CUDA_WARN(cudaFreeHost(m.ticks_host));
}

Result<std::unique_ptr<NcclComm>> NcclComm::create(const DistEnv& env, uint64_t job_hash, int device) {
  // NVLink multicast (NVLS) stays off: it can take a shared host's GPUs out of service (docs/distributed.md).
  if (const char* v = std::getenv("NCCL_NVLS_ENABLE"); !v || std::strcmp(v, "0") != 0) {
    if (v) std::fprintf(stderr, "rank %d: NCCL_NVLS_ENABLE=%s overridden to 0 (NVLink multicast stays off)\n", env.rank, v);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
  }
  // Connections set up in ncclCommInitRank, not lazily at the first collective, which may be inside a capture.
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->device = device;
  TRCTL_CUDA_TRY(cudaSetDevice(device));
  RendezvousOptions ro;
  ro.addr = env.master_addr;
  ro.port = env.master_port;
  ro.rank = env.rank;
  ro.world_size = env.world_size;
  ro.job_hash = job_hash;
  ro.timeout_s = env.timeout_s;
  std::vector<uint8_t> blob;
  Result<std::unique_ptr<Rendezvous>> rdv = rendezvous_run(
      ro,
      []() -> Result<std::vector<uint8_t>> {
        ncclUniqueId id;
        const ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return nccl_error(r, "ncclGetUniqueId(&id)", __FILE__, __LINE__, nullptr);
        return std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id);
      },
      &blob);
  if (!rdv.ok()) return rdv.errors();
  impl->rdv = std::move(rdv.value());
  ncclUniqueId id;
  if (blob.size() != sizeof id)
    return Error{ErrCode::Internal, "rendezvous", "rank 0 sent " + std::to_string(blob.size()) + " bytes, not an ncclUniqueId"};
  std::memcpy(&id, blob.data(), sizeof id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // initialisation and collectives return at once; wait_ready polls them with a deadline
  Impl* m = impl.get();
  TRCTL_NCCL_TRY(m, ncclCommInitRankConfig(&m->comm, env.world_size, id, env.rank, &cfg));
  TRCTL_CUDA_TRY(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
  TRCTL_CUDA_TRY(cudaStreamCreateWithFlags(&m->watch_stream, cudaStreamNonBlocking));
  TRCTL_CUDA_TRY(cudaMalloc(&m->ticks_dev, sizeof *m->ticks_dev));
  TRCTL_CUDA_TRY(cudaMemset(m->ticks_dev, 0, sizeof *m->ticks_dev));
  TRCTL_CUDA_TRY(cudaHostAlloc(&m->ticks_host, sizeof *m->ticks_host, cudaHostAllocDefault));
  TRCTL_CUDA_TRY(cudaDeviceSynchronize());
  return std::unique_ptr<NcclComm>(new NcclComm(std::move(impl)));
}

int NcclComm::rank() const { return impl_->env.rank; }
int NcclComm::world_size() const { return impl_->env.world_size; }
cudaStream_t NcclComm::stream() const { return impl_->stream; }

Status NcclComm::all_reduce_avg(float* data, int64_t count) {
  Impl* m = impl_.get();
  TRCTL_NCCL_TRY(m, ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclAvg, m->comm, m->stream));
  return ok_status();
}

Status NcclComm::tick() { return dist_tick_cuda(impl_->stream, impl_->ticks_dev); }

void NcclComm::note_enqueued() { impl_->enqueued.fetch_add(1); }

Status NcclComm::start_watchdog() {
  if (!impl_->watchdog.joinable()) impl_->watchdog = std::thread([m = impl_.get()] { m->watch(); });
  return ok_status();
}

Status NcclComm::barrier() { return impl_->rdv->barrier(); }

std::string NcclComm::describe() const {
  int v = 0;
  ncclGetVersion(&v);
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
         ", rank " + std::to_string(impl_->env.rank) + "/" + std::to_string(impl_->env.world_size) + ", device " +
         std::to_string(impl_->device);
}

}  // namespace trctl
