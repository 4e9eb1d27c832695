// The human summary of a loaded model that `specd info` prints before the
// GGUF metadata and tensor table (model_convert.h describe_model): family,
// size, attention shape, context, RoPE, vocabulary, chat template and the
// mix of tensor types.
#pragma once

#include <string>

#include "engine/context_plan.h"
#include "engine/model.h"

namespace specd {

// One "key: value" line per item, ending with a newline. `default_context`:
// what a runtime on this machine would choose with ctx_size 0
// (context_plan.h), shown with its reason.
std::string summarize_model(const LlamaModel& model, const ContextPlan& default_context);

}  // namespace specd
