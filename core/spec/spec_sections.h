// Internal to core/spec: the readers of the spec's sections. Each takes the section's map node (an empty map when
// the section is absent or null), fills the struct it is given (absent keys keep the defaults) and reports errors.
#pragma once
#include "core/spec/spec.h"
#include "core/spec/yaml_tree.h"

namespace trctl::spec_detail {

void parse_data_section(Diagnostics& d, const YamlNode& map, DataSpec& out);            // spec_parse_data.cpp
void parse_model_section(Diagnostics& d, const YamlNode& map, ModelSpec& out);          // spec_parse_model.cpp
void parse_loss_section(Diagnostics& d, const YamlNode& map, LossSpec& out);            // spec_parse.cpp
void parse_optimizer_section(Diagnostics& d, const YamlNode& map, OptimizerSpec& out);  // spec_parse.cpp
void parse_scheduler_section(Diagnostics& d, const YamlNode& map, SchedulerSpec& out);  // spec_parse.cpp
void parse_train_section(Diagnostics& d, const YamlNode& map, TrainSpec& out);          // spec_parse.cpp
void parse_run_section(Diagnostics& d, const YamlNode& map, RunSpec& out);              // spec_parse.cpp
void parse_debug_section(Diagnostics& d, const YamlNode& map, DebugSpec& out);          // spec_parse.cpp

}  // namespace trctl::spec_detail
