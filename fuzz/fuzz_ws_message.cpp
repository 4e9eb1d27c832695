// libFuzzer target for the WebSocket message handler: one client text
// frame (arbitrary bytes) through net::interpret_ws_message, as a serving
// and as a draining server, with a plain and a ChatML chat template.
//
// Properties checked on every input:
//  1. interpret_ws_message never throws (an exception is uncaught here and
//     libFuzzer reports it).
//  2. Reply: the frame is valid UTF-8 and a documented error frame
//     ({"type":"error","id":null|string,"code","message"}) whose message is
//     one line in specd's words; an echoed id is at most kMaxWsIdBytes.
//  3. Cancel: names a non-empty id of at most kMaxWsIdBytes.
//  4. Generate: only while not draining; a non-empty id of at most
//     kMaxWsIdBytes, equal to parsed.request.id; the request in range
//     (fuzz/request_checks.h).
// Built by tools/fuzz.sh (clang-14, ASan + UBSan); seeds in fuzz/corpus/ws_message/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/reply_checks.h"
#include "fuzz/request_checks.h"
#include "net/ws_protocol.h"

namespace {

using specd::fuzz::fail;
using specd::net::kMaxWsIdBytes;
using specd::net::WsAction;

constexpr const char* kTarget = "fuzz_ws_message";

void check_id(const std::string& id, const char* action) {
    if (id.empty()) fail(kTarget, std::string(action) + " without an id");
    if (id.size() > kMaxWsIdBytes) fail(kTarget, std::string(action) + " with an id of " + std::to_string(id.size()) + " bytes");
}

void interpret(std::string_view text, bool draining, const specd::ChatTemplate& chat_template) {
    specd::net::WsContext ctx;
    ctx.limits = &specd::fuzz::fuzz_limits();
    ctx.draining = draining;
    ctx.render_chat = specd::fuzz::render_with_template;
    ctx.render_ctx = &chat_template;
    const WsAction action = specd::net::interpret_ws_message(text, ctx);
    switch (action.kind) {
        case WsAction::Kind::Reply: {
            const nlohmann::json f = specd::fuzz::check_ws_error_frame(kTarget, action.frame, text);
            if (f["id"].is_string() && f["id"].get<std::string>().size() > kMaxWsIdBytes)
                fail(kTarget, "an error frame echoes an id of " + std::to_string(f["id"].get<std::string>().size()) + " bytes");
            break;
        }
        case WsAction::Kind::Cancel:
            check_id(action.id, "Cancel");
            break;
        case WsAction::Kind::Generate:
            if (draining) fail(kTarget, "Generate while draining");
            check_id(action.id, "Generate");
            if (action.parsed.request.id != action.id) fail(kTarget, "Generate: parsed.request.id differs from the action's id");
            specd::fuzz::check_parsed(kTarget, action.parsed, specd::net::ApiKind::WebSocket);
            break;
        default:
            fail(kTarget, "an action of no documented kind");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);  // libFuzzer's exact-size buffer: ASan sees any overread
    for (const specd::ChatTemplate& t : specd::fuzz::fuzz_templates()) interpret(text, false, t);
    interpret(text, true, specd::fuzz::fuzz_templates()[0]);
    return 0;
}
