// End-to-end check of the OpenAI-compatible HTTP API with the official
// `openai` npm client, against a running `specd serve` with stories15M.
//
//   node openai_client.test.mjs http://127.0.0.1:PORT
//
// SPECD_API_KEY, when set, is the client's API key. Exit 0 when every check
// passes, 1 with a one-line summary otherwise, 2 on bad usage.
import OpenAI, { APIError } from "openai";
import { VERSION } from "openai/version";

const CHECK_TIMEOUT_MS = 20000;

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

    const checks = [
        ["models.list", async () => {
            const page = await client.models.list();
            const data = page.data || [];
            assert(data.length >= 1, "no models listed");
            assert(typeof data[0].id === "string" && data[0].id.length > 0, `model without an id: ${JSON.stringify(data[0])}`);
            model = data[0].id;
            return `${data.length} model(s), using ${JSON.stringify(model)}`;
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
