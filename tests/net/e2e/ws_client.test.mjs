// End-to-end check of the WebSocket protocol (docs/websocket-protocol.md)
// against a running `specd serve` with stories15M.
//
//   node ws_client.test.mjs ws://127.0.0.1:PORT      (or http://..., /v1/ws is added)
//
// SPECD_API_KEY, when set, goes in the Authorization header. Exit 0 when every
// check passes, 1 with a one-line summary otherwise, 2 on bad usage.
import WebSocket from "ws";

// A hang guard, not a speed check: CI runs this beside the heaviest C++
// tests on 2 cores, where a check of a dozen requests has taken > 20 s.
const CHECK_TIMEOUT_MS = 90000;
const FINISH_REASONS = ["stop", "length", "context", "cancelled"];

function wsUrl(arg) {
    const u = new URL(arg);
    if (u.protocol === "http:") u.protocol = "ws:";
    if (u.protocol === "https:") u.protocol = "wss:";
    if (u.pathname === "/" || u.pathname === "") u.pathname = "/v1/ws";
    return u.toString();
}

// One connection: frames are routed by id to the generation waiting for them;
// frames with a null id queue up in `unattributed`.
class Client {
    static open(url) {
        const headers = process.env.SPECD_API_KEY ? { Authorization: `Bearer ${process.env.SPECD_API_KEY}` } : {};
        const ws = new WebSocket(url, { headers, maxPayload: 64 << 20 });
        const c = new Client(ws);
        return new Promise((resolve, reject) => {
            ws.once("open", () => resolve(c));
            ws.once("error", (e) => reject(new Error(`cannot connect to ${url}: ${e.message}`)));
            ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
        });
    }

    constructor(ws) {
        this.ws = ws;
        this.gens = new Map();       // id -> {frames, resolve}
        this.finished = new Set();   // ids whose done/error arrived
        this.unattributed = [];
        this.waiters = [];
        this.problems = [];          // protocol violations seen by the router
        this.error = null;
        this.closed = new Promise((resolve) => ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })));
        ws.on("error", (e) => { this.error = e; });
        ws.on("message", (data, isBinary) => this.route(data, isBinary));
    }

    route(data, isBinary) {
        if (isBinary) { this.problems.push("server sent a binary frame"); return; }
        let f;
        try { f = JSON.parse(data.toString()); } catch { this.problems.push(`server sent invalid JSON: ${data.toString().slice(0, 80)}`); return; }
        if (f.id === null || f.id === undefined) {
            this.unattributed.push(f);
            this.waiters.splice(0).forEach((w) => w());
            return;
        }
        if (this.finished.has(f.id)) { this.problems.push(`frame after the end of ${f.id}: ${f.type}`); return; }
        const g = this.gens.get(f.id);
        if (!g) {
            this.problems.push(`frame for an id never sent: ${JSON.stringify(f).slice(0, 80)}`);
            this.unattributed.push(f);  // so that a check waiting there sees it
            this.waiters.splice(0).forEach((w) => w());
            return;
        }
        g.frames.push(f);
        if (g.onFrame) g.onFrame(f);
        if (f.type === "done" || f.type === "error") {
            this.finished.add(f.id);
            this.gens.delete(f.id);
            g.resolve(summarise(f.id, g.frames));
        }
    }

    send(obj) { this.ws.send(typeof obj === "string" ? obj : JSON.stringify(obj)); }

    // Sends a generate and resolves with its summary once done or error arrives.
    generate(req, onFrame) {
        return new Promise((resolve) => {
            this.gens.set(req.id, { frames: [], resolve, onFrame });
            this.send({ type: "generate", ...req });
        });
    }

    async nextUnattributed() {
        while (this.unattributed.length === 0) await new Promise((r) => this.waiters.push(r));
        return this.unattributed.shift();
    }

    close() { try { this.ws.close(1000); } catch { /* already closed */ } }
}

function summarise(id, frames) {
    const s = { id, tokens: [], ids: [], text: "", done: null, error: null, bad: [] };
    for (const f of frames) {
        if (f.type === "token") {
            if (!Array.isArray(f.token_ids) || !Array.isArray(f.from_draft) || typeof f.text !== "string")
                s.bad.push(`malformed token frame ${JSON.stringify(f).slice(0, 120)}`);
            else if (f.token_ids.length !== f.from_draft.length)
                s.bad.push(`token_ids (${f.token_ids.length}) and from_draft (${f.from_draft.length}) differ in length`);
            else if (f.token_ids.length === 0) s.bad.push("token frame without tokens");
            else if (!Array.isArray(f.token_texts) || f.token_texts.length !== f.token_ids.length || f.token_texts.join("") !== f.text)
                s.bad.push(`token_texts ${JSON.stringify(f.token_texts)} are not one text per token joining to ${JSON.stringify(f.text)}`);
            s.tokens.push(f);
            s.ids.push(...(f.token_ids || []));
            s.text += f.text || "";
        } else if (f.type === "done") s.done = f;
        else if (f.type === "error") s.error = f;
        else s.bad.push(`unknown frame type ${f.type}`);
    }
    return s;
}

function withTimeout(promise, ms, what) {
    let t;
    return Promise.race([promise, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`timed out after ${ms / 1000} s waiting for ${what}`)), ms); })])
        .finally(() => clearTimeout(t));
}

function assert(cond, msg) { if (!cond) throw new Error(msg); }
const show = (s) => JSON.stringify(s.length > 60 ? s.slice(0, 60) + "…" : s);

// Checks that a generation ended with a well-formed done frame.
function expectDone(s, what) {
    assert(!s.error, `${what}: error frame ${s.error && s.error.code}: ${s.error && s.error.message}`);
    assert(s.bad.length === 0, `${what}: ${s.bad[0]}`);
    const d = s.done;
    assert(FINISH_REASONS.includes(d.finish_reason), `${what}: bad finish_reason ${JSON.stringify(d.finish_reason)}`);
    assert(d.usage && typeof d.usage.completion_tokens === "number", `${what}: done frame without usage.completion_tokens`);
    assert(d.usage.completion_tokens === s.ids.length,
        `${what}: usage.completion_tokens ${d.usage.completion_tokens} but ${s.ids.length} token ids were streamed`);
    return d;
}

const GREEDY = { prompt: "Once upon a time", max_tokens: 40, temperature: 0 };
let reference = null;  // the result of (a), for (b)

const checks = [
    ["(a) greedy generate streams tokens then one done", async (c) => {
        const s = await c.generate({ id: "a1", ...GREEDY });
        const d = expectDone(s, "greedy");
        assert(s.tokens.length > 0, "no token frames before done");
        assert(s.text.startsWith(","), `text should start with "," (", there was a little girl…"), got ${show(s.text)}`);
        await new Promise((r) => setTimeout(r, 100));  // let a stray second done show up
        assert(c.problems.length === 0, c.problems[0]);
        reference = s;
        const spec = d.speculative || {};
        const drafted = s.tokens.reduce((n, f) => n + f.from_draft.filter(Boolean).length, 0);
        return `${s.ids.length} tokens in ${s.tokens.length} frames, finish ${d.finish_reason}, speculative ${spec.enabled ? `on (${drafted} from draft, acceptance ${spec.acceptance_rate})` : "off (server default)"}, text ${show(s.text)}`;
    }],
    ["(b) speculation off gives identical tokens (lossless)", async (c) => {
        assert(reference, "needs (a) to pass first");
        const s = await c.generate({ id: "b1", ...GREEDY, speculative: { enabled: false } });
        const d = expectDone(s, "non-speculative");
        assert(!(d.speculative && d.speculative.enabled), "done frame says speculative.enabled although it was disabled");
        assert(s.tokens.every((f) => f.from_draft.every((x) => !x)), "from_draft true with speculation disabled");
        assert(s.text === reference.text, `text differs: speculative ${show(reference.text)} vs plain ${show(s.text)}`);
        const i = s.ids.findIndex((t, k) => t !== reference.ids[k]);
        assert(i < 0 && s.ids.length === reference.ids.length, `token ids differ at position ${i < 0 ? Math.min(s.ids.length, reference.ids.length) : i}`);
        return `${s.ids.length} identical token ids`;
    }],
    ["(b2) logprobs: true puts one entry per token id in every token frame, drafted tokens included; a seed gives the same text with speculation off and on", async (c) => {
        const s = await c.generate({ id: "lp", ...GREEDY, logprobs: true, top_logprobs: 2, speculative: { enabled: true, draft_max: 4, adaptive: false } });
        expectDone(s, "logprobs");
        let drafted = 0;
        for (const f of s.tokens) {
            assert(Array.isArray(f.logprobs) && f.logprobs.length === f.token_ids.length, `token frame with ${f.token_ids.length} ids has logprobs ${JSON.stringify(f.logprobs).slice(0, 120)}`);
            f.logprobs.forEach((e, i) => {
                assert(typeof e.token === "string" && typeof e.logprob === "number" && e.logprob <= 0 && Array.isArray(e.bytes), `bad entry ${JSON.stringify(e)}`);
                assert(Array.isArray(e.top_logprobs) && e.top_logprobs.length === 2 && e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, `bad alternatives ${JSON.stringify(e.top_logprobs)}`);
                assert(e.logprob === e.top_logprobs[0].logprob, "greedy took a token less likely than the first alternative");
                if (f.from_draft[i]) ++drafted;
            });
        }
        assert(drafted > 0, "no drafted token was accepted");
        const plainFrames = await c.generate({ id: "nolp", ...GREEDY, max_tokens: 4 });
        assert(plainFrames.tokens.every((f) => f.logprobs === undefined), "logprobs sent although not asked");
        const seeded = { prompt: "Once upon a time", max_tokens: 40, temperature: 1.0, seed: 99 };
        const off = await c.generate({ id: "s-off", ...seeded, speculative: { enabled: false } });
        const on = await c.generate({ id: "s-on", ...seeded, speculative: { enabled: true, draft_max: 6, adaptive: false } });
        expectDone(off, "seeded off"); expectDone(on, "seeded on");
        assert(on.text === off.text, `seeded text differs: ${show(on.text)} vs ${show(off.text)}`);
        return `${s.ids.length} tokens with logprobs (${drafted} drafted); seeded ${show(on.text)} alike`;
    }],
    ["(c) two concurrent generations on one connection", async (c) => {
        const [x, y] = await Promise.all([
            c.generate({ id: "c1", prompt: "Once upon a time", max_tokens: 40, temperature: 0 }),
            c.generate({ id: "c2", prompt: "The little dog", max_tokens: 40, temperature: 0.8, seed: 7 }),
        ]);
        expectDone(x, "c1"); expectDone(y, "c2");
        assert(c.problems.length === 0, c.problems[0]);
        return `c1 ${x.ids.length} tokens (${x.done.finish_reason}), c2 ${y.ids.length} tokens (${y.done.finish_reason})`;
    }],
    ["(d) cancel mid-stream ends with finish_reason cancelled", async (c) => {
        // On a fast server the generation may end before the cancel lands; then
        // retry once, cancelling right after the generate.
        for (const when of ["first token", "immediately"]) {
            const id = `d-${when[0]}`;
            let sent = false;
            const cancel = () => { if (!sent) { sent = true; c.send({ type: "cancel", id }); } };
            const p = c.generate({ id, prompt: "Once upon a time", max_tokens: 200, temperature: 0.8, seed: 1 },
                (f) => { if (f.type === "token") cancel(); });
            if (when === "immediately") cancel();
            const s = await p;
            assert(!s.error, `error frame ${s.error && s.error.code}: ${s.error && s.error.message}`);
            assert(s.bad.length === 0, s.bad[0]);
            if (s.done.finish_reason === "cancelled") {
                assert(s.done.usage.completion_tokens === s.ids.length,
                    `usage.completion_tokens ${s.done.usage.completion_tokens} but ${s.ids.length} streamed`);
                return `cancelled after ${s.ids.length} tokens (cancel sent on ${when})`;
            }
            // Finished first; the late cancel is answered with unknown_id (ignored).
            cancel();
            await new Promise((r) => setTimeout(r, 200));
        }
        throw new Error("generation always finished before the cancel took effect (finish_reason never \"cancelled\")");
    }],
    ["(e) malformed JSON gives invalid_json, connection stays usable", async (c) => {
        c.send("{\"type\": \"generate\", \"id\": ");
        const e = await c.nextUnattributed();
        assert(e.type === "error", `expected an error frame, got ${JSON.stringify(e).slice(0, 100)}`);
        assert(e.code === "invalid_json", `expected code invalid_json, got ${e.code}`);
        assert(e.id === null, `expected id null, got ${JSON.stringify(e.id)}`);
        const s = await c.generate({ id: "e1", prompt: "Once upon a time", max_tokens: 5, temperature: 0 });
        expectDone(s, "generate after bad JSON");
        return `error "${e.message}", then ${s.ids.length} tokens`;
    }],
    ["(f) temperature -1 gives invalid_request", async (c) => {
        const s = await c.generate({ id: "f1", prompt: "Once upon a time", max_tokens: 5, temperature: -1 });
        assert(s.error, `expected an error frame, got done (${s.done && s.done.finish_reason})`);
        assert(s.error.code === "invalid_request", `expected code invalid_request, got ${s.error.code}`);
        assert(s.tokens.length === 0, "tokens streamed before the error");
        return `error "${s.error.message}"`;
    }],
    ["(g) binary frame closes with 1003", async (c) => {
        c.ws.send(Buffer.from([1, 2, 3, 4]), { binary: true });
        const { code, reason } = await c.closed;
        assert(code === 1003, `expected close code 1003, got ${code}${c.error ? ` (${c.error.message})` : ""}`);
        return `closed ${code} ${JSON.stringify(reason)}`;
    }],
    ["(h) 2 MiB frame closes with 1009", async (c) => {
        c.send(JSON.stringify({ type: "generate", id: "h1", prompt: "x".repeat(2 << 20) }));
        const { code, reason } = await c.closed;
        assert(code === 1009, `expected close code 1009, got ${code}${c.error ? ` (${c.error.message})` : ""}`);
        return `closed ${code} ${JSON.stringify(reason)}`;
    }],
];

async function main() {
    if (process.argv.length < 3) {
        console.error("usage: node ws_client.test.mjs ws://HOST:PORT[/v1/ws]");
        process.exit(2);
    }
    const url = wsUrl(process.argv[2]);
    console.log(`specd WebSocket protocol checks against ${url}`);
    const failed = [];
    for (const [name, fn] of checks) {
        let c = null;
        try {
            const detail = await withTimeout((async () => { c = await Client.open(url); return fn(c); })(), CHECK_TIMEOUT_MS, name);
            console.log(`ok   ${name}: ${detail}`);
        } catch (e) {
            console.log(`FAIL ${name}: ${e.message}`);
            failed.push(name.split(" ")[0]);
        } finally {
            if (c) c.close();
        }
    }
    if (failed.length) {
        console.log(`FAIL: ${failed.length} of ${checks.length} checks failed: ${failed.join(" ")}`);
        process.exit(1);
    }
    console.log(`PASS: all ${checks.length} checks`);
    process.exit(0);
}

main().catch((e) => { console.log(`FAIL: ${e.stack || e}`); process.exit(1); });
