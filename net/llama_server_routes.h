// llama-server's own endpoints beside the OpenAI ones, with its request and
// response shapes (llama.cpp tools/server/README.md), so its clients and
// its web UI's model probe work against specd:
//   POST /tokenize   {"content", "add_special" = false, "parse_special" = true,
//                     "with_pieces" = false} -> {"tokens": [id | {"id", "piece"}]}
//   POST /detokenize {"tokens": [id]} -> {"content"}
//   GET  /props      the default generation settings, slots, model path, chat template
//   POST /props      501, as llama-server without --props
//   GET  /slots      501, as llama-server with --no-slots: specd schedules
//                    requests itself and has no fixed slots to show
//   POST /completion llama-server's generation endpoint (net/llama_completion.h);
//                    /completions is its alias
#pragma once

#include <optional>
#include <string>

#include "net/routes.h"

namespace specd::net {

// The result for `path` when it is one of the endpoints above; nullopt otherwise.
std::optional<RouteResult> llama_server_route(const RouteRequest& request, const RouteContext& context, const std::string& path);

}  // namespace specd::net
