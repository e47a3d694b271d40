// `trctl train CFG --gpus N`: the launcher of a data-parallel job on this host (docs/distributed.md).
#pragma once
#include <string>
#include <vector>

namespace trctl {

// Starts N workers (this binary, the same arguments without --gpus) with RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port) and NCCL_NVLS_ENABLE=0, and waits for them. A worker that fails
// stops the others; the exit status is then the worker's (1 for a signal), with a message naming the rank.
// Exit 2 without starting anything when N exceeds the visible GPUs or the spec trains on the CPU.
int cmd_train_launch(int argc, char** argv, int gpus, const std::string& config,
                     const std::vector<std::string>& overrides);

}  // namespace trctl
