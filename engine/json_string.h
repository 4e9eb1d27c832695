// A JSON string literal writer, shared by the chat templates (whose tojson
// output must match Python's json.dumps(ensure_ascii=False) byte for byte)
// and the network front end (which writes its per-token frames by hand).
#pragma once

#include <string>
#include <string_view>

namespace specd {

// Appends `s` as a JSON string literal: quotes; \" \\ \n \r \t \b \f;
// other bytes below 0x20 as \u00XX; every other byte as is (`s` must be
// UTF-8, which then stays UTF-8), exactly as json.dumps(ensure_ascii=False).
void append_json_string(std::string& out, std::string_view s);

}  // namespace specd
