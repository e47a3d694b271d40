// Text and JSON forms of a StepProfile (trctl bench CFG --layers): the step's replay time, time per op kind and
// the slowest nodes, each with achieved TFLOP/s or GB/s and its share of the H200 ceilings measured on the card.
#pragma once
#include <string>

#include "runtime/backend.h"

namespace trctl {

// Ceilings measured on the H200 of the device machine (device KINDS.md: a device-to-device copy moved 4.3 TB/s
// counting bytes read and written; a bf16 8192^3 matrix product ran at 769-798 TFLOP/s).
constexpr double kH200CopyGBs = 4300;
constexpr double kH200MatrixTflops = 790;

std::string profile_table(const StepProfile& p, int64_t batch, int top);
std::string profile_json(const StepProfile& p, int64_t batch, const std::string& config);

}  // namespace trctl
