// Text and trctl-bench/1 forms of a StepProfile (trctl bench CFG --layers): the step's replay time next to the sum
// of its nodes run one by one (what the graph saves), time per op kind and the slowest nodes, each with achieved
// TFLOP/s or GB/s and its share of the H200 ceilings measured on the card.
#pragma once
#include <string>

#include "runtime/backend.h"
#include "runtime/report/bench_result.h"

namespace trctl {

// Ceilings measured on the H200 of the device machine (device KINDS.md: a device-to-device copy moved 4.3 TB/s
// counting bytes read and written; a bf16 8192^3 matrix product ran at 769-798 TFLOP/s).
constexpr double kH200CopyGBs = 4300;
constexpr double kH200MatrixTflops = 790;

std::string profile_table(const StepProfile& p, int64_t batch, int top);
// Adds step_ms (the captured replay), images_per_s, nodes_ms (the nodes run one by one) and op/<kind>_ms per op
// kind; every node (name, op, shape, ms, flops, bytes) goes into the details as "nodes".
void profile_metrics(const StepProfile& p, int64_t batch, BenchResult* out);

}  // namespace trctl
