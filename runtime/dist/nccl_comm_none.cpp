// NcclComm in a CUDA build without NCCL (nccl.h or libnccl not found at configure time): distributed training is
// refused with a clear "not supported" error; nothing else can be called (create never succeeds).
#include "runtime/dist/nccl_comm.h"

namespace trctl {

struct NcclComm::Impl {};

NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclComm::~NcclComm() = default;

Result<std::unique_ptr<NcclComm>> NcclComm::create(const DistEnv&, uint64_t, int) {
  return Error{ErrCode::NotSupported, "distributed training",
               "this trctl was built without NCCL (nccl.h / libnccl not found when it was configured): not supported"};
}

int NcclComm::rank() const { return 0; }
int NcclComm::world_size() const { return 1; }
cudaStream_t NcclComm::stream() const { return nullptr; }
Status NcclComm::all_reduce_avg(float*, int64_t) { return create({}, 0, 0).errors(); }
Status NcclComm::tick() { return create({}, 0, 0).errors(); }
void NcclComm::note_enqueued() {}
Status NcclComm::start_watchdog() { return create({}, 0, 0).errors(); }
Status NcclComm::barrier() { return create({}, 0, 0).errors(); }
std::string NcclComm::describe() const { return "no NCCL"; }

}  // namespace trctl
