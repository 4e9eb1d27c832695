// End-to-end check of the OpenAI-compatible HTTP API with the official
// `openai` npm client, against a running `specd serve` with stories15M.
//
//   node openai_client.test.mjs http://127.0.0.1:PORT
//
// SPECD_API_KEY, when set, is the client's API key. Exit 0 when every check
// passes, 1 with a one-line summary otherwise, 2 on bad usage.
import OpenAI, { APIError } from "openai";
import { VERSION } from "openai/version";

// A hang guard, not a speed check: CI runs this beside the heaviest C++
// tests on 2 cores, where a check of a dozen requests has taken > 20 s.
const CHECK_TIMEOUT_MS = 90000;

function withTimeout(promise, ms, what) {
    let t;
    return Promise.race([promise, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`timed out after ${ms / 1000} s waiting for ${what}`)), ms); })])
        .finally(() => clearTimeout(t));
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
// "Connection error." alone says little: add the cause (ECONNREFUSED, ...).
const why = (e) => { const c = e && e.cause && (e.cause.cause || e.cause); return `${e.message}${c && c.message ? ` (${c.message})` : ""}`; };
const show = (s) => JSON.stringify(typeof s === "string" && s.length > 60 ? s.slice(0, 60) + "…" : s);

async function main() {
    if (process.argv.length < 3) {
        console.error("usage: node openai_client.test.mjs http://HOST:PORT");
        process.exit(2);
    }
    const base = process.argv[2].replace(/\/+$/, "").replace(/\/v1$/, "");
    const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.env.SPECD_API_KEY || "none", maxRetries: 0, timeout: CHECK_TIMEOUT_MS });
    console.log(`specd OpenAI API checks against ${base}/v1 (openai-node ${VERSION})`);

    let model = null, completion = null, chat = null;
    const COMPLETION = { prompt: "Once upon a time", max_tokens: 30, temperature: 0 };
    const CHAT = { messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 20, temperature: 0 };
    // A schema stories15M can finish: bounded strings, an enum, an integer, an array of at most 3.
    const CHILD_SCHEMA = { type: "object", additionalProperties: false, required: ["name", "age", "pet", "friends"],
                           properties: { name: { type: "string", minLength: 1, maxLength: 12 }, age: { type: "integer" },
                                         pet: { enum: ["dog", "cat", "bird"] },
                                         friends: { type: "array", items: { type: "string", maxLength: 10 }, maxItems: 3 } } };

    const checks = [
        ["models.list", async () => {
            const page = await client.models.list();
            const data = page.data || [];
            assert(data.length >= 1, "no models listed");
            assert(typeof data[0].id === "string" && data[0].id.length > 0, `model without an id: ${JSON.stringify(data[0])}`);
            model = data[0].id;
            return `${data.length} model(s), using ${JSON.stringify(model)}`;
        }],
        ["models.retrieve: the listed model; another id is a 404 NotFoundError", async () => {
            assert(model, "needs models.list");
            const m = await client.models.retrieve(model);
            assert(m.id === model && m.object === "model", `retrieve gave ${JSON.stringify(m)}`);
            try {
                await client.models.retrieve("gpt-4o");
                throw new Error("an unknown model id was found");
            } catch (e) {
                if (!(e instanceof APIError) || e.status !== 404) throw e;
            }
            return `${JSON.stringify(m.id)}; gpt-4o 404`;
        }],
        ["completions.create", async () => {
            assert(model, "needs models.list");
            const r = await client.completions.create({ model, ...COMPLETION });
            const ch = r.choices && r.choices[0];
            assert(ch && typeof ch.text === "string", `no choices[0].text in ${JSON.stringify(r).slice(0, 200)}`);
            assert(ch.text.startsWith(","), `text should start with "," (", there was a little girl…"), got ${show(ch.text)}`);
            assert(r.usage && r.usage.completion_tokens > 0, `usage.completion_tokens should be > 0: ${JSON.stringify(r.usage)}`);
            assert(["stop", "length"].includes(ch.finish_reason), `bad finish_reason ${JSON.stringify(ch.finish_reason)}`);
            completion = ch.text;
            return `${r.usage.completion_tokens} tokens, finish ${ch.finish_reason}, text ${show(ch.text)}`;
        }],
        ["completions.create stream", async () => {
            assert(completion !== null, "needs completions.create");
            const stream = await client.completions.create({ model, ...COMPLETION, stream: true });
            let text = "", chunks = 0, finish = null;
            for await (const chunk of stream) {
                chunks++;
                const ch = chunk.choices && chunk.choices[0];
                if (!ch) continue;
                text += ch.text || "";
                if (ch.finish_reason) finish = ch.finish_reason;
            }
            assert(chunks > 0, "empty stream");
            assert(finish, "no chunk carried a finish_reason");
            assert(text === completion, `streamed text differs: ${show(text)} vs ${show(completion)}`);
            return `${chunks} chunks, same text, finish ${finish}`;
        }],
        ["completions.create with stop, streamed and not, speculation on and off: the text ends before the first stop string", async () => {
            assert(completion !== null, "needs completions.create");
            // " girl" spans a token boundary in ", there was a little girl named Lily".
            const stop = [" girl", "zzzz"];
            const want = completion.slice(0, completion.indexOf(" girl"));
            assert(completion.includes(" girl"), `the reference text has no " girl": ${show(completion)}`);
            const texts = [];
            for (const enabled of [true, false]) {
                const r = await client.completions.create({ model, ...COMPLETION, stop, speculative: { enabled } });
                assert(r.choices[0].text === want && r.choices[0].finish_reason === "stop",
                       `speculative ${enabled}: ${show(r.choices[0].text)} finish ${r.choices[0].finish_reason}, want ${show(want)} stop`);
                const stream = await client.completions.create({ model, ...COMPLETION, stop: " girl", stream: true, speculative: { enabled } });
                let text = "", finish = null;
                for await (const chunk of stream) {
                    const ch = chunk.choices && chunk.choices[0];
                    if (!ch) continue;
                    text += ch.text || "";
                    if (ch.finish_reason) finish = ch.finish_reason;
                }
                assert(text === want && finish === "stop", `streamed, speculative ${enabled}: ${show(text)} finish ${finish}`);
                texts.push(text);
            }
            return `${show(want)}, finish stop, 4 ways alike`;
        }],
        ["n = 3: three choices, seeded each its own, the same again on a rerun; streamed as indexed chunks; n = 0 and best_of != n are 400s naming them", async () => {
            assert(model, "needs models.list");
            const body = { model, ...CHAT, temperature: 1.0, seed: 31, n: 3 };
            const a = await client.chat.completions.create(body), b = await client.chat.completions.create(body);
            assert(a.choices.length === 3 && a.choices.every((c, i) => c.index === i), `choices ${JSON.stringify(a.choices.map((c) => c.index))}`);
            const texts = a.choices.map((c) => c.message.content);
            assert(new Set(texts).size === 3, `seeded choices alike: ${texts.map(show).join(" | ")}`);
            assert(b.choices.every((c, i) => c.message.content === texts[i]), "a rerun with the same seed gave other choices");
            assert(a.usage.completion_tokens > CHAT.max_tokens && a.usage.completion_tokens <= 3 * CHAT.max_tokens, `usage counts every choice: ${JSON.stringify(a.usage)}`);
            const stream = await client.chat.completions.create({ ...body, stream: true });
            const streamed = ["", "", ""];
            for await (const chunk of stream) for (const c of chunk.choices) streamed[c.index] += (c.delta && c.delta.content) || "";
            assert(streamed.every((t, i) => t === texts[i]), `streamed choices differ: ${streamed.map(show).join(" | ")}`);
            for (const [params, param] of [[{ n: 0 }, "n"], [{ n: 2, best_of: 3 }, "best_of"]]) {
                try {
                    await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 4, ...params });
                    throw new Error(`${JSON.stringify(params)} was accepted`);
                } catch (e) {
                    assert(e instanceof APIError && e.status === 400 && e.param === param, `${JSON.stringify(params)}: ${e.status} param ${e.param}`);
                }
            }
            return `3 choices ${texts.map(show).join(" | ")}, streamed alike`;
        }],
        ["chat stream with stream_options.include_usage: a last chunk with no choices carries the usage; system_fingerprint set", async () => {
            assert(model, "needs models.list");
            const stream = await client.chat.completions.create({ model, ...CHAT, stream: true, stream_options: { include_usage: true } });
            const chunks = [];
            for await (const chunk of stream) chunks.push(chunk);
            const last = chunks.at(-1);
            assert(last && Array.isArray(last.choices) && last.choices.length === 0, `last chunk has choices: ${JSON.stringify(last).slice(0, 200)}`);
            assert(last.usage && last.usage.completion_tokens === CHAT.max_tokens, `usage ${JSON.stringify(last.usage)}`);
            assert(chunks.every((c) => typeof c.system_fingerprint === "string"), "a chunk without system_fingerprint");
            return `${chunks.length} chunks, usage ${JSON.stringify(last.usage)}`;
        }],
        ["presence_penalty, frequency_penalty and logit_bias are honoured: greedy text changes, alike with speculation on and off, streamed and not", async () => {
            assert(completion !== null, "needs completions.create");
            const headers = { "content-type": "application/json", authorization: `Bearer ${process.env.SPECD_API_KEY || "none"}` };
            const tok = await fetch(base + "/tokenize", { method: "POST", headers, body: JSON.stringify({ content: " there" }) });
            const ids = (await tok.json()).tokens;
            assert(Array.isArray(ids) && ids.length > 0, `/tokenize gave ${JSON.stringify(ids)}`);
            const banned = ids.at(-1);
            const variants = [["logit_bias", { logit_bias: { [String(banned)]: -100 } }],
                              ["presence_penalty + frequency_penalty", { presence_penalty: 2, frequency_penalty: 2 }],
                              ["frequency_penalty", { frequency_penalty: 1.5 }]];
            const seen = [];
            for (const [name, params] of variants) {
                let reference = null;
                for (const enabled of [true, false]) {
                    const r = await client.completions.create({ model, ...COMPLETION, ...params, speculative: { enabled } });
                    const text = r.choices[0].text;
                    const stream = await client.completions.create({ model, ...COMPLETION, ...params, stream: true, speculative: { enabled } });
                    let streamed = "";
                    for await (const chunk of stream) streamed += (chunk.choices && chunk.choices[0] && chunk.choices[0].text) || "";
                    assert(streamed === text, `${name}, speculative ${enabled}: streamed ${show(streamed)} vs ${show(text)}`);
                    if (reference === null) reference = text;
                    assert(text === reference, `${name}: speculation on gave ${show(reference)}, off ${show(text)}`);
                }
                assert(reference !== completion, `${name} was ignored: the text is the unpenalised one, ${show(reference)}`);
                seen.push(`${name}: ${show(reference)}`);
            }
            const r = await client.chat.completions.create({ model, ...CHAT, presence_penalty: 1, frequency_penalty: 1, logit_bias: { [String(banned)]: -100 } });
            assert(r.choices[0].message.content.length > 0, "chat with penalties gave no content");
            for (const [param, value] of [["presence_penalty", 2.5], ["frequency_penalty", 99], ["frequency_penalty", -3], ["logit_bias", { "99999999": 1 }],
                                          ["logit_bias", { "1": 200 }], ["logit_bias", { hello: 1 }]]) {
                try {
                    await client.chat.completions.create({ model, ...CHAT, [param]: value });
                    throw new Error(`${param} ${JSON.stringify(value)} was accepted`);
                } catch (e) {
                    if (!(e instanceof APIError) || e.status !== 400) throw e;
                    assert(e.param === param || (e.error && e.error.param === param), `${param}: the error names ${e.param}`);
                }
            }
            return seen.join("; ");
        }],
        ...[["json_schema", { type: "json_schema", json_schema: { name: "child", strict: true, schema: CHILD_SCHEMA } }, 160],
            ["json_object", { type: "json_object" }, 60]].map(([name, response_format, max_tokens]) =>
            [`response_format ${name}: ${name === "json_schema" ? "the answer parses and matches the schema" : "an object, parsed when complete"}, alike with speculation on and off, streamed and not, chat and completions`, async () => {
                assert(model, "needs models.list");
                const seen = [];
                for (const [kind, create] of [["chat", (extra) => client.chat.completions.create({ model, messages: [{ role: "user", content: "Describe Lily as JSON." }], max_tokens, temperature: 0, response_format, ...extra })],
                                              ["completion", (extra) => client.completions.create({ model, prompt: "Lily's card:", max_tokens, temperature: 0, response_format, ...extra })]]) {
                    let reference = null;
                    for (const enabled of [true, false]) {
                        const r = await create({ speculative: { enabled } });
                        const ch = r.choices[0];
                        const text = kind === "chat" ? ch.message.content : ch.text;
                        let streamed = "", finish = null;
                        for await (const chunk of await create({ speculative: { enabled }, stream: true })) {
                            const c = chunk.choices && chunk.choices[0];
                            if (!c) continue;
                            streamed += (kind === "chat" ? c.delta && c.delta.content : c.text) || "";
                            if (c.finish_reason) finish = c.finish_reason;
                        }
                        assert(streamed === text, `${kind}, speculative ${enabled}: streamed ${show(streamed)} vs ${show(text)}`);
                        if (reference === null) reference = text;
                        assert(text === reference, `${kind}: speculation on gave ${show(reference)}, off ${show(text)}`);
                        if (name === "json_schema" || ch.finish_reason === "stop") {
                            assert(ch.finish_reason === "stop" && finish === "stop", `${kind}: finish ${ch.finish_reason} / ${finish}, text ${show(text)}`);
                            let value;
                            try { value = JSON.parse(text); } catch (e) { throw new Error(`${kind}: JSON.parse failed (${e.message}) on ${show(text)}`); }
                            assert(value !== null && typeof value === "object" && !Array.isArray(value), `${kind}: not an object: ${show(text)}`);
                            if (name === "json_schema") {
                                assert(JSON.stringify(Object.keys(value)) === JSON.stringify(["name", "age", "pet", "friends"]), `keys ${JSON.stringify(Object.keys(value))}`);
                                assert(typeof value.name === "string" && value.name.length >= 1 && value.name.length <= 12, `name ${JSON.stringify(value.name)}`);
                                assert(Number.isInteger(value.age), `age ${JSON.stringify(value.age)}`);
                                assert(["dog", "cat", "bird"].includes(value.pet), `pet ${JSON.stringify(value.pet)}`);
                                assert(Array.isArray(value.friends) && value.friends.length <= 3 && value.friends.every((f) => typeof f === "string" && f.length <= 10),
                                       `friends ${JSON.stringify(value.friends)}`);
                            }
                        } else {
                            // json_object: a story model may still be inside a string when max_tokens ends; then only the opening can be checked.
                            assert(ch.finish_reason === "length" && /^\s*\{/.test(text), `${kind}: finish ${ch.finish_reason}, text ${show(text)}`);
                        }
                    }
                    seen.push(`${kind}: ${show(reference)}`);
                }
                return seen.join("; ");
            }]),
        ["a bad response_format, grammar or json_schema is a 400 naming it with the parser's message", async () => {
            assert(model, "needs models.list");
            for (const [param, value, says] of [["response_format", { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "^a" } } }, "pattern"],
                                                ["response_format", { type: "xml" }, "xml"],
                                                ["grammar", "root ::= (", "line 1"], ["json_schema", { type: "strin" }, "unknown type"]]) {
                try {
                    await client.chat.completions.create({ model, ...CHAT, [param]: value });
                    throw new Error(`${param} ${JSON.stringify(value)} was accepted`);
                } catch (e) {
                    if (!(e instanceof APIError) || e.status !== 400) throw e;
                    assert(e.param === param || (e.error && e.error.param === param), `${param}: the error names ${e.param}`);
                    assert(e.message.includes(says), `${param}: the message ${JSON.stringify(e.message)} does not say ${JSON.stringify(says)}`);
                }
            }
            return "4 refused";
        }],
        ["tools, tool_choice, parallel_tool_calls: honoured where the template has a tool format; on this plain one a 400 names tools and the template, tool_choice none drops them", async () => {
            assert(model, "needs models.list");
            // The tool-calling path itself (Qwen2.5's template, calls parsed and
            // streamed, required enforced) is tests/net/test_server_tools.cpp.
            const tools = [{ type: "function", function: { name: "get_weather", description: "The weather in a city.",
                                                           parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
            const refusedWith = async (params, param, says) => {
                try {
                    await client.chat.completions.create({ model, ...CHAT, ...params });
                } catch (e) {
                    if (!(e instanceof APIError) || e.status !== 400) throw e;
                    assert(e.param === param || (e.error && e.error.param === param), `${JSON.stringify(params).slice(0, 80)}: the error names ${e.param}, want ${param}`);
                    assert(e.message.includes(says), `the message ${JSON.stringify(e.message)} does not say ${JSON.stringify(says)}`);
                    return;
                }
                throw new Error(`${JSON.stringify(params).slice(0, 80)} was accepted`);
            };
            await refusedWith({ tools }, "tools", "template is plain");
            await refusedWith({ tools, tool_choice: "required" }, "tools", "tool format");
            await refusedWith({ tools, tool_choice: { type: "function", function: { name: "get_time" } } }, "tool_choice", "not in tools");
            await refusedWith({ tools, tool_choice: "always" }, "tool_choice", "tool_choice");
            await refusedWith({ tool_choice: "required" }, "tool_choice", "needs tools");
            await refusedWith({ tools, parallel_tool_calls: "no" }, "parallel_tool_calls", "true or false");
            await refusedWith({ functions: [{ name: "f", parameters: {} }] }, "functions", "deprecated");
            await refusedWith({ messages: [{ role: "user", content: "x" }, { role: "tool", tool_call_id: "call_0", content: "42" }] }, "messages", "tool format");
            // tool_choice "none": the tools are left out of a template without a tool format; the reply is the plain chat's.
            const plain = await client.chat.completions.create({ model, ...CHAT });
            const none = await client.chat.completions.create({ model, ...CHAT, tools, tool_choice: "none", parallel_tool_calls: false });
            assert(none.choices[0].message.content === plain.choices[0].message.content && !none.choices[0].message.tool_calls,
                   `tool_choice none: ${show(none.choices[0].message.content)} vs ${show(plain.choices[0].message.content)}`);
            assert(none.choices[0].finish_reason === plain.choices[0].finish_reason, `finish ${none.choices[0].finish_reason}`);
            return `8 refused naming their field; tool_choice none answers as plain chat (${show(none.choices[0].message.content)})`;
        }],
        ["chat.completions.create", async () => {
            assert(model, "needs models.list");
            const r = await client.chat.completions.create({ model, ...CHAT });
            const m = r.choices && r.choices[0] && r.choices[0].message;
            assert(m && typeof m.content === "string" && m.content.length > 0, `no choices[0].message.content in ${JSON.stringify(r).slice(0, 200)}`);
            assert(m.role === "assistant", `role should be assistant, got ${JSON.stringify(m.role)}`);
            assert(r.usage && r.usage.completion_tokens > 0, `usage.completion_tokens should be > 0: ${JSON.stringify(r.usage)}`);
            chat = m.content;
            return `${r.usage.completion_tokens} tokens, content ${show(m.content)}`;
        }],
        ["chat.completions.create stream", async () => {
            assert(chat !== null, "needs chat.completions.create");
            const stream = await client.chat.completions.create({ model, ...CHAT, stream: true });
            let text = "", chunks = 0, finish = null;
            for await (const chunk of stream) {
                chunks++;
                const ch = chunk.choices && chunk.choices[0];
                if (!ch) continue;
                text += (ch.delta && ch.delta.content) || "";
                if (ch.finish_reason) finish = ch.finish_reason;
            }
            assert(chunks > 0, "empty stream");
            assert(finish, "no chunk carried a finish_reason");
            assert(text === chat, `streamed content differs: ${show(text)} vs ${show(chat)}`);
            return `${chunks} chunks, same content, finish ${finish}`;
        }],
        ["logprobs: chat and completions, streamed and not, speculation on: one entry per token, OpenAI's shapes, top alternatives sorted", async () => {
            assert(model, "needs models.list");
            const spec = { speculative: { enabled: true, draft_max: 4, adaptive: false } };
            // One token's chat entry: token, logprob <= 0, bytes, and n sorted alternatives of mass <= 1.
            const entry = (e, n, greedy, where) => {
                assert(typeof e.token === "string" && typeof e.logprob === "number" && e.logprob <= 0 && Array.isArray(e.bytes),
                       `${where}: bad entry ${JSON.stringify(e).slice(0, 160)}`);
                assert(Array.isArray(e.top_logprobs) && e.top_logprobs.length === n, `${where}: ${e.top_logprobs && e.top_logprobs.length} alternatives, want ${n}`);
                let mass = 0;
                for (let i = 0; i < n; ++i) {
                    const t = e.top_logprobs[i];
                    assert(typeof t.token === "string" && typeof t.logprob === "number" && Array.isArray(t.bytes), `${where}: bad alternative ${JSON.stringify(t)}`);
                    if (i > 0) assert(t.logprob <= e.top_logprobs[i - 1].logprob, `${where}: alternatives not sorted`);
                    mass += Math.exp(t.logprob);
                }
                assert(mass <= 1 + 1e-5, `${where}: alternatives' mass ${mass} > 1`);
                if (greedy && n > 0) assert(e.logprob === e.top_logprobs[0].logprob, `${where}: greedy took a token less likely than the first alternative`);
            };
            const bytesText = (list) => Buffer.from(list.flatMap((e) => e.bytes)).toString("utf8");

            const r = await client.chat.completions.create({ model, ...CHAT, max_tokens: 24, logprobs: true, top_logprobs: 3, ...spec });
            const content = r.choices[0].logprobs && r.choices[0].logprobs.content;
            assert(Array.isArray(content), `chat: choices[0].logprobs is ${JSON.stringify(r.choices[0].logprobs)}`);
            assert(content.length === r.usage.completion_tokens, `chat: ${content.length} entries for ${r.usage.completion_tokens} tokens`);
            content.forEach((e, i) => entry(e, 3, true, `chat token ${i}`));
            assert(bytesText(content) === r.choices[0].message.content, `chat: the entries' bytes ${show(bytesText(content))} are not the content ${show(r.choices[0].message.content)}`);
            assert(r.speculative && r.speculative.accepted > 0, `chat: no drafted token was accepted: ${JSON.stringify(r.speculative)}`);

            const stream = await client.chat.completions.create({ model, ...CHAT, max_tokens: 24, logprobs: true, top_logprobs: 3, stream: true,
                                                                  stream_options: { include_usage: true }, ...spec });
            const streamed = [];
            let text = "", usage = null;
            for await (const chunk of stream) {
                if (chunk.usage) usage = chunk.usage;
                const ch = chunk.choices && chunk.choices[0];
                if (!ch) continue;
                text += (ch.delta && ch.delta.content) || "";
                if (ch.logprobs && ch.logprobs.content) streamed.push(...ch.logprobs.content);
            }
            assert(text === r.choices[0].message.content, `chat streamed: ${show(text)} vs ${show(r.choices[0].message.content)}`);
            assert(usage && streamed.length === usage.completion_tokens, `chat streamed: ${streamed.length} entries for ${usage && usage.completion_tokens} tokens`);
            streamed.forEach((e, i) => { entry(e, 3, true, `chat streamed token ${i}`); assert(e.token === content[i].token, `chat streamed token ${i} differs`); });

            const c = await client.completions.create({ model, ...COMPLETION, logprobs: 2, ...spec });
            const lp = c.choices[0].logprobs;
            assert(lp && Array.isArray(lp.tokens) && Array.isArray(lp.token_logprobs) && Array.isArray(lp.top_logprobs) && Array.isArray(lp.text_offset),
                   `completions: logprobs is ${JSON.stringify(lp).slice(0, 200)}`);
            const n = c.usage.completion_tokens;
            assert(lp.tokens.length === n && lp.token_logprobs.length === n && lp.top_logprobs.length === n && lp.text_offset.length === n,
                   `completions: list lengths ${lp.tokens.length}/${lp.token_logprobs.length}/${lp.top_logprobs.length}/${lp.text_offset.length} for ${n} tokens`);
            assert(lp.tokens.join("") === c.choices[0].text, `completions: tokens join to ${show(lp.tokens.join(""))}`);
            for (let i = 0; i < n; ++i) {
                const alts = Object.values(lp.top_logprobs[i]);
                assert(alts.length >= 1 && alts.length <= 2 && alts.every((v) => v <= 0), `completions: top_logprobs[${i}] ${JSON.stringify(lp.top_logprobs[i])}`);
                assert(lp.token_logprobs[i] <= 0 && lp.token_logprobs[i] === Math.max(...alts), `completions: greedy token ${i} is not the likeliest`);
                assert(lp.text_offset[i] === lp.tokens.slice(0, i).join("").length, `completions: text_offset[${i}] ${lp.text_offset[i]}`);
            }
            const cs = await client.completions.create({ model, ...COMPLETION, logprobs: 2, stream: true, ...spec });
            const tokens = [];
            for await (const chunk of cs) {
                const ch = chunk.choices && chunk.choices[0];
                if (ch && ch.logprobs) tokens.push(...ch.logprobs.tokens);
            }
            assert(tokens.join("") === c.choices[0].text && tokens.length === n, `completions streamed: ${tokens.length} tokens ${show(tokens.join(""))}`);

            // Not asked: null, as before.
            const plain = await client.chat.completions.create({ model, ...CHAT, max_tokens: 4 });
            assert(plain.choices[0].logprobs === null, `logprobs not asked, got ${JSON.stringify(plain.choices[0].logprobs)}`);
            for (const [param, body] of [["top_logprobs", { logprobs: true, top_logprobs: 21 }], ["top_logprobs", { top_logprobs: 2 }], ["logprobs", { logprobs: "yes" }]]) {
                try {
                    await client.chat.completions.create({ model, ...CHAT, ...body });
                    throw new Error(`${JSON.stringify(body)} was accepted`);
                } catch (e) {
                    if (!(e instanceof APIError) || e.status !== 400) throw e;
                    assert(e.param === param || (e.error && e.error.param === param), `${JSON.stringify(body)}: the error names ${e.param}`);
                }
            }
            try {
                await client.completions.create({ model, ...COMPLETION, logprobs: 21 });
                throw new Error("completions logprobs 21 was accepted");
            } catch (e) {
                if (!(e instanceof APIError) || e.status !== 400) throw e;
                assert(e.param === "logprobs" || (e.error && e.error.param === "logprobs"), `logprobs 21: the error names ${e.param}`);
            }
            return `chat ${content.length} entries (${r.speculative.accepted} drafted tokens accepted), streamed alike; completions ${n} tokens, streamed alike; 400s name the field`;
        }],
        ["seed: the same text with speculation off, k 1, k 8 fixed, adaptive, streamed, and batched with other requests", async () => {
            assert(model, "needs models.list");
            const SEEDED = { prompt: "Once upon a time", max_tokens: 40, temperature: 1.0, seed: 4242 };
            const settings = [{ enabled: false }, { enabled: true, draft_max: 1, adaptive: false }, { enabled: true, draft_max: 8, adaptive: false }, { enabled: true }];
            const texts = [];
            let accepted = 0;
            for (const speculative of settings) {
                const r = await client.completions.create({ model, ...SEEDED, speculative });
                texts.push(r.choices[0].text);
                accepted += (r.speculative && r.speculative.accepted) || 0;
                const stream = await client.completions.create({ model, ...SEEDED, speculative, stream: true });
                let streamed = "";
                for await (const chunk of stream) streamed += (chunk.choices && chunk.choices[0] && chunk.choices[0].text) || "";
                texts.push(streamed);
            }
            // Batched: the seeded request four times at once, among requests with other seeds.
            const together = await Promise.all([...settings.map((speculative) => client.completions.create({ model, ...SEEDED, speculative })),
                                                client.completions.create({ model, ...SEEDED, seed: 7 }), client.completions.create({ model, ...SEEDED, seed: 8 })]);
            texts.push(...together.slice(0, settings.length).map((r) => r.choices[0].text));
            assert(texts.every((t) => t === texts[0]), `texts differ: ${texts.map(show).join(" | ")}`);
            assert(accepted > 0, "no drafted token was accepted: speculation did not happen");
            assert(together[settings.length].choices[0].text !== texts[0], "seed 7 gave seed 4242's text");
            return `${texts.length} runs alike (${accepted} drafted tokens accepted): ${show(texts[0])}`;
        }],
        ["temperature -1 is a 400 APIError", async () => {
            try {
                const r = await client.completions.create({ model: model || "default", prompt: "Once upon a time", max_tokens: 5, temperature: -1 });
                throw new Error(`expected an error, got a response: ${JSON.stringify(r).slice(0, 120)}`);
            } catch (e) {
                if (!(e instanceof APIError)) throw e;
                assert(e.status === 400, `expected status 400, got ${e.status}: ${why(e)}`);
                return `400: ${e.message}`;
            }
        }],
    ];

    const failed = [];
    for (const [name, fn] of checks) {
        try {
            console.log(`ok   ${name}: ${await withTimeout(fn(), CHECK_TIMEOUT_MS, name)}`);
        } catch (e) {
            console.log(`FAIL ${name}: ${why(e)}`);
            failed.push(name);
        }
    }
    if (failed.length) {
        console.log(`FAIL: ${failed.length} of ${checks.length} checks failed: ${failed.join(", ")}`);
        process.exit(1);
    }
    console.log(`PASS: all ${checks.length} checks`);
    process.exit(0);
}

main().catch((e) => { console.log(`FAIL: ${e.stack || e}`); process.exit(1); });
