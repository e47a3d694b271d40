// Data parallelism inside the captured step (CudaBackend::dist_*): every train program averages the Grads region
// over the ranks in buckets (runtime/dist/grad_buckets.h). A bucket's all-reduce is issued on the communication
// stream right after the last node touching its gradients (an event forks it off the step stream), so it overlaps
// the rest of the backward pass; all buckets join the step stream before the OptimizerStep node, which reads the
// averaged gradients (the non-finite check then sees the same sums on every rank, so all ranks skip together).
#include "runtime/cuda/cuda_backend_impl.h"

#include "core/spec/spec.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_backend.h"

namespace trctl::cuda_detail {

// The communicator (rendezvous with the other ranks: same spec, same world size), the bucket plans, and one
// un-captured all-reduce of every bucket so that NCCL sets its connections up before any capture. The Grads region
// is all zeros here (the arena was cleared), so the warm-up changes nothing.
Status CudaBackend::dist_init() {
  const uint64_t hash = dist_job_hash(spec_to_yaml(c_.spec));
  Result<std::unique_ptr<NcclComm>> comm = NcclComm::create(dist_, hash, ctx_.device);
  if (!comm.ok()) return comm.errors();
  comm_ = std::move(comm.value());
  for (size_t pi = 0; pi < c_.graph.programs.size(); ++pi)
    if (c_.graph.programs[pi].kind == ProgramKind::Train) {
      GradBucketPlan bp = grad_buckets_plan(c_, static_cast<int>(pi), dist_.bucket_bytes);
      if (bp.optimizer_node < 0)
        return Error{ErrCode::Internal, "cuda backend", "train program " + c_.graph.programs[pi].name + " has no optimizer"};
      dist_buckets_[static_cast<int>(pi)] = std::move(bp);
    }
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));  // the arena's clearing
  float* g = reinterpret_cast<float*>(region_[static_cast<int>(Region::Grads)]);
  if (!dist_buckets_.empty())
    for (const GradBucket& b : dist_buckets_.begin()->second.buckets)
      if (Status st = comm_->all_reduce_avg(g + b.begin / 4, (b.end - b.begin) / 4); !st.ok()) return st;
  if (Status st = comm_->tick(); !st.ok()) return st;
  comm_->note_enqueued();
  if (Status st = comm_->start_watchdog(); !st.ok()) return st;
  TRCTL_CUDA_TRY(cudaStreamSynchronize(comm_->stream()));
  return ok_status();
}

// Buckets whose gradients are final after node i: fork the communication stream off the step stream and issue them.
Status CudaBackend::dist_after_node(int program, size_t i, std::vector<Launch>& out) {
  auto it = dist_buckets_.find(program);
  if (it == dist_buckets_.end()) return ok_status();
  float* g = reinterpret_cast<float*>(region_[static_cast<int>(Region::Grads)]);
  const cudaStream_t s = ctx_.stream, cs = comm_->stream();
  NcclComm* comm = comm_.get();
  for (const GradBucket& b : it->second.buckets) {
    if (b.issue_after != static_cast<int64_t>(i)) continue;
    Result<cudaEvent_t> ready = step_event();
    if (!ready.ok()) return ready.errors();
    const cudaEvent_t ev = ready.value();
    float* data = g + b.begin / 4;
    const int64_t count = (b.end - b.begin) / 4;
    out.push_back([s, cs, ev, comm, data, count]() -> Status {
      TRCTL_CUDA_TRY(cudaEventRecord(ev, s));
      TRCTL_CUDA_TRY(cudaStreamWaitEvent(cs, ev, 0));
      return comm->all_reduce_avg(data, count);
    });
  }
  return ok_status();
}

// Before the optimizer: buckets no node touched (issued now), the progress tick, and the join of the communication
// stream into the step stream.
Status CudaBackend::dist_before_node(int program, size_t i, std::vector<Launch>& out) {
  auto it = dist_buckets_.find(program);
  if (it == dist_buckets_.end() || it->second.optimizer_node != static_cast<int64_t>(i)) return ok_status();
  float* g = reinterpret_cast<float*>(region_[static_cast<int>(Region::Grads)]);
  const cudaStream_t s = ctx_.stream, cs = comm_->stream();
  NcclComm* comm = comm_.get();
  Result<cudaEvent_t> fork = step_event();
  if (!fork.ok()) return fork.errors();
  Result<cudaEvent_t> join = step_event();
  if (!join.ok()) return join.errors();
  std::vector<std::pair<float*, int64_t>> late;
  for (const GradBucket& b : it->second.buckets)
    if (b.issue_after < 0) late.emplace_back(g + b.begin / 4, (b.end - b.begin) / 4);
  const cudaEvent_t fe = fork.value(), je = join.value();
  out.push_back([s, cs, fe, je, comm, late]() -> Status {
    TRCTL_CUDA_TRY(cudaEventRecord(fe, s));  // also when every bucket was issued: the tick follows the whole step
    TRCTL_CUDA_TRY(cudaStreamWaitEvent(cs, fe, 0));
    for (const auto& [data, count] : late)
      if (Status st = comm->all_reduce_avg(data, count); !st.ok()) return st;
    if (Status st = comm->tick(); !st.ok()) return st;
    TRCTL_CUDA_TRY(cudaEventRecord(je, cs));
    TRCTL_CUDA_TRY(cudaStreamWaitEvent(s, je, 0));
    return ok_status();
  });
  return ok_status();
}

void CudaBackend::dist_note_launch(int program) {
  if (dist_buckets_.count(program)) comm_->note_enqueued();
}

}  // namespace trctl::cuda_detail
