// Tool calling over a real socket (issue 35, item 6): a random-weight
// Qwen2-family model with Qwen2.5's real vocabulary and chat template (and a
// Llama-3-family one with Llama 3.1's),
// speculating with its own first layer as the draft. tool_choice
// "required" and a named function give a call whose arguments parse and
// match the schema, streamed and not, and the same greedy reply with
// speculation on and off; the call and its result go back into the next
// turn. Needs llama.cpp's vocabulary files (tools/fetch-llama-cpp-vocab.sh).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>

#include "actors/runtime.h"
#include "net/server.h"
#include "support/family_models.h"
#include "support/http_client.h"
#include "support/tiny_model.h"

using namespace specd;
namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

using Posted = test::HttpReply;

Posted post(uint16_t port, const std::string& target, const std::string& body) { return test::http_call(port, http::verb::post, target, body); }

// A file removed when the test ends.
struct ScratchFile {
    std::string path;
    explicit ScratchFile(std::string p) : path(std::move(p)) {}
    ScratchFile(const ScratchFile&) = delete;
    ~ScratchFile() { std::filesystem::remove(path); }
};

std::string file_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// The streamed reply folded as the openai SDK folds it: content, calls by
// index (their first delta brings id, type and name; arguments append), the finish reason.
json fold_stream(const std::string& body) {
    std::string content;
    json calls = json::array();
    std::string finish;
    for (const std::string& data : test::sse_data(body)) {
        if (data == "[DONE]") break;
        const json c = json::parse(data);
        const json& ch = c["choices"][0];
        if (ch["delta"].contains("content") && ch["delta"]["content"].is_string()) content += ch["delta"]["content"].get<std::string>();
        if (ch["delta"].contains("tool_calls")) {
            for (const json& t : ch["delta"]["tool_calls"]) {
                const size_t i = t["index"].get<size_t>();
                if (i == calls.size()) calls.push_back({{"id", t["id"]}, {"type", t["type"]}, {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
                REQUIRE(i < calls.size());
                calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
            }
        }
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    return {{"content", content.empty() ? json(nullptr) : json(content)}, {"tool_calls", calls}, {"finish_reason", finish}};
}

const std::string kWeatherTools =
    R"([{"type":"function","function":{"name":"get_weather","description":"The weather in a city.","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string","maxLength":8},"unit":{"enum":["c","f"]},"days":{"type":"integer"}},"required":["city","unit"],)"
    R"("additionalProperties":false}}},{"type":"function","function":{"name":"get_time","parameters":{"type":"object",)"
    R"("properties":{"tz":{"enum":["utc","cet"]}},"additionalProperties":false}}}])";

// The arguments of a get_weather call match its schema.
void check_weather_arguments(const std::string& arguments) {
    INFO("arguments " << arguments);
    const json a = json::parse(arguments);
    REQUIRE(a.is_object());
    REQUIRE(a.contains("city"));
    CHECK(a["city"].is_string());
    CHECK(a["city"].get<std::string>().size() <= 8 * 4);  // maxLength counts characters: at most 4 bytes each
    REQUIRE(a.contains("unit"));
    CHECK((a["unit"] == "c" || a["unit"] == "f"));
    if (a.contains("days")) CHECK(a["days"].is_number_integer());
    for (const auto& [key, v] : a.items()) CHECK((key == "city" || key == "unit" || key == "days"));
}

// A call's arguments match its function's schema (either of kWeatherTools').
void check_arguments(const json& call) {
    const std::string name = call["function"]["name"];
    const std::string arguments = call["function"]["arguments"];
    INFO(name << " " << arguments);
    if (name == "get_weather") return check_weather_arguments(arguments);
    REQUIRE(name == "get_time");
    const json a = json::parse(arguments);
    REQUIRE(a.is_object());
    CHECK(a.size() <= 1);
    if (a.contains("tz")) CHECK((a["tz"] == "utc" || a["tz"] == "cet"));
}

// Serves a random-weight model of `family` with llama.cpp's vocabulary
// `vocab_name` and the real chat template `template_name` in its GGUF, and
// runs the tool-calling checks against it.
void check_tool_calling(const std::string& family, const std::string& vocab_name, const std::string& template_name,
                        ChatTemplate::ToolFormat format) {
    const std::string vocab_path = test::llama_cpp_vocab_path(vocab_name);
    const std::string template_path = std::filesystem::path(vocab_path).parent_path().string() + "/templates/" + template_name;
    if (!std::filesystem::exists(vocab_path) || !std::filesystem::exists(template_path)) {
        std::cout << "skipped: llama.cpp vocabulary files not fetched (" << vocab_path << ", " << template_path << ")\n";
        return;
    }
    // The vocabulary with its chat template in the GGUF, as the model files have it.
    const gguf::File base_vocab = gguf::File::open(vocab_path);
    gguf::Writer vw;
    vw.set("general.alignment", gguf::Value::u32(32));
    for (const auto& [key, value] : base_vocab.metadata()) {
        if (key.rfind("tokenizer.", 0) == 0) vw.set(key, value);
    }
    vw.set("tokenizer.chat_template", gguf::Value::str(file_text(template_path)));
    const ScratchFile vocab_file(test::temp_path(family + "-tools-vocab.gguf"));
    vw.write(vocab_file.path);
    const gguf::File vocab = gguf::File::open(vocab_file.path);

    test::FamilyModelSpec target_spec = test::family_preset(family);
    target_spec.layers = 2;
    target_spec.ctx = 2048;  // the tools' system prompt is some 300 tokens
    test::FamilyModelSpec draft_spec = target_spec;
    draft_spec.layers = 1;   // the target's first layer: a draft that agrees often
    const ScratchFile target_file(test::write_family_model(test::temp_path(family + "-tools-target.gguf"), target_spec, vocab));
    const ScratchFile draft_file(test::write_family_model(test::temp_path(family + "-tools-draft.gguf"), draft_spec, vocab));

    RuntimeConfig c;
    c.target_model = target_file.path;
    c.draft_model = draft_file.path;
    c.threads_target = 2;
    c.max_sequences = 4;
    c.memory_budget_bytes = int64_t{1} << 30;
    StandaloneRuntime host(c);
    REQUIRE(host.runtime().chat_template().tool_format() == format);
    net::ServerOptions opt;
    opt.port = 0;
    net::Server server(host.runtime(), opt);
    const uint16_t port = server.start();

    const std::string user = R"({"role":"user","content":"What is the weather in Paris?"})";
    for (const std::string& choice : {std::string(R"("required")"), std::string(R"({"type":"function","function":{"name":"get_weather"}})")}) {
        INFO("tool_choice " << choice);
        json reference;
        for (const bool speculative : {true, false}) {
            INFO("speculative " << speculative);
            const std::string body = R"({"messages":[)" + user + R"(],"tools":)" + kWeatherTools + R"(,"tool_choice":)" + choice +
                                     R"(,"parallel_tool_calls":false,"temperature":0,"max_tokens":120,"speculative":{"enabled":)" +
                                     (speculative ? "true" : "false") + R"(,"draft_max":4}})";
            const Posted whole = post(port, "/v1/chat/completions", body);
            REQUIRE(whole.status == 200);
            const json r = json::parse(whole.body);
            const json& ch = r["choices"][0];
            INFO(whole.body);
            CHECK(r["speculative"]["enabled"] == speculative);
            REQUIRE(ch["finish_reason"] == "tool_calls");
            CHECK(ch["message"]["content"].is_null());
            REQUIRE(ch["message"]["tool_calls"].size() == 1);
            const json& call = ch["message"]["tool_calls"][0];
            CHECK(call["type"] == "function");
            CHECK(call["id"].get<std::string>().rfind("call_", 0) == 0);
            if (choice != R"("required")") CHECK(call["function"]["name"] == "get_weather");  // the named one; "required": the model's pick
            check_arguments(call);
            // Streamed: the same reply, folded from its deltas.
            const Posted streamed = post(port, "/v1/chat/completions", body.substr(0, body.size() - 1) + R"(,"stream":true})");
            REQUIRE(streamed.status == 200);
            const json folded = fold_stream(streamed.body);
            CHECK(folded["finish_reason"] == "tool_calls");
            CHECK(folded["content"].is_null());
            CHECK(folded["tool_calls"] == ch["message"]["tool_calls"]);
            // Greedy: token for token the same with speculation on and off.
            const json same = {ch["message"], r["usage"]["completion_tokens"]};
            if (reference.is_null()) reference = same;
            CHECK(same == reference);
        }
        // The next turn: the call and its result in the history (content null,
        // arguments as a string), answered as plain text with tool_choice none.
        const json& call = reference[0]["tool_calls"][0];
        const std::string next = R"({"messages":[)" + user + R"(,{"role":"assistant","content":null,"tool_calls":[)" + call.dump() +
                                 R"(]},{"role":"tool","tool_call_id":)" + call["id"].dump() + R"(,"content":"18 C, sunny"}],"tools":)" +
                                 kWeatherTools + R"(,"tool_choice":"none","temperature":0,"max_tokens":8})";
        const Posted answer = post(port, "/v1/chat/completions", next);
        INFO(answer.body);
        REQUIRE(answer.status == 200);
        const json a = json::parse(answer.body);
        CHECK(a["choices"][0]["message"]["content"].is_string());
        CHECK_FALSE(a["choices"][0]["message"].contains("tool_calls"));
    }

    // The other function named: its own (optional) arguments.
    const Posted time = post(port, "/v1/chat/completions",
                             R"({"messages":[)" + user + R"(],"tools":)" + kWeatherTools +
                                 R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}},"parallel_tool_calls":false,"temperature":0,"max_tokens":200})");
    REQUIRE(time.status == 200);
    const json t = json::parse(time.body);
    INFO(time.body);
    REQUIRE(t["choices"][0]["finish_reason"] == "tool_calls");
    CHECK(t["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time");
    check_arguments(t["choices"][0]["message"]["tool_calls"][0]);
    server.stop();
}

}  // namespace

TEST_CASE("tool_choice required and named over a real socket with Qwen2.5's template: parseable calls matching the schema, streamed "
          "alike, greedy identical with speculation on and off, the call and its result go into the next turn", "[net][tools][greedy]") {
    check_tool_calling("qwen2", "qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja", ChatTemplate::ToolFormat::QwenHermes);
}

TEST_CASE("tool_choice required and named over a real socket with Llama 3.1's template: the same, its calls bare JSON objects",
          "[net][tools][greedy]") {
    check_tool_calling("llama3", "llama-bpe", "meta-llama-Llama-3.1-8B-Instruct.jinja", ChatTemplate::ToolFormat::Llama3Json);
}
