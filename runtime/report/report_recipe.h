// The fairness-table vocabulary (docs/report.md): each recipe item's key, its label and whether a difference in
// it matters, and trctl's side of every item, derived from a run's config.resolved.yaml, plan.txt and run.json.
#pragma once
#include <string>
#include <vector>

#include "runtime/report/report_data.h"
#include "runtime/run_facts.h"

namespace trctl {

struct RecipeKey {
  const char* key;
  const char* label;
  bool compared;  // false: informational (the framework, the device, the seed), never marked as a difference
};

// Every documented item in table order; a source's other items follow them in the table, compared.
const std::vector<RecipeKey>& recipe_keys();
const RecipeKey* recipe_key(const std::string& key);  // nullptr for an undocumented key

// A number as recipe values write it: an integer in full (200, 1462538), any other through printf's %g (1e-08,
// 0.001), as Python's str(int(x)) and f"{x:g}" write them.
std::string recipe_number(double v);

// trctl's recipe items from the resolved config (YAML text of config.resolved.yaml, named `config_path` in
// errors), plan.txt's text (empty when the run dir has none: parameter counts are then left out) and run.json's
// facts (nullptr when the run dir has none, as older ones: the convolution algorithms' source is then not stated).
Result<std::vector<RecipeItem>> recipe_from_trctl(const std::string& config_text, const std::string& config_path,
                                                  const std::string& plan_text, const RunFacts* facts = nullptr);

}  // namespace trctl
