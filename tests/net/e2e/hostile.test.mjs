// A hostile client against `specd serve` over real sockets (issue 31):
// every crash reproduction found so far, then random byte strings as HTTP
// bodies and WebSocket frames, valid JSON with the wrong type at every
// parameter, deep nesting, huge strings, NaN/Infinity spellings and UTF-8
// cut at every byte. Every input must get a clear answer: an HTTP 4xx with
// an OpenAI error object (or a well-formed 200 when the input happens to be
// a valid request), a WebSocket error frame (or a generation's done frame),
// or a WebSocket close code that names the problem (1007 invalid UTF-8,
// 1009 too big). Never a 5xx, a 1011, a dropped connection without an
// answer, invalid UTF-8 or the JSON library's wording in a reply, an error
// over 4 KiB (a huge input reflected back) or an echoed id over 128 bytes.
// Afterwards the server is the same process (process_start_time_seconds
// unchanged), answers /health, and its KV blocks are back to zero.
//
//   node hostile.test.mjs http://127.0.0.1:PORT
//   HOSTILE_RANDOM_COUNT  random inputs per kind (default 10000)
//   HOSTILE_SEED          seed of the random inputs (default: the time; printed)
//   HOSTILE_ONLY          run only the checks whose name matches this regular expression
//   SPECD_API_KEY         the server's --api-key, if it has one
//
// Exit 0 when every check passes, 1 with a one-line summary otherwise.
import http from "node:http";
import net from "node:net";
import WebSocket from "ws";

const base = new URL(process.argv[2] || "");
const key = process.env.SPECD_API_KEY || "";
const auth = key ? { Authorization: `Bearer ${key}` } : {};
const randomCount = Number(process.env.HOSTILE_RANDOM_COUNT || 10000);
const seed = Number(process.env.HOSTILE_SEED || Date.now() % 1000000);
const only = process.env.HOSTILE_ONLY ? new RegExp(process.env.HOSTILE_ONLY) : null;
const MAX_BODY = 1 << 20;  // the server's default max_body_bytes and max_message_bytes
const WORKERS = 4;         // keep-alive connections / WebSocket connections used at once
const MAX_ERROR_BYTES = 4096;  // an error names the problem; it never reflects a huge input back
const MAX_WS_ID_BYTES = 128;   // the longest WebSocket id the server keeps (net/ws_protocol.h)
let failures = 0;

// ------------------------------------------------------------ harness ---

function withTimeout(promise, ms, what) {
    let timer;
    return Promise.race([promise, new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms); })])
        .finally(() => clearTimeout(timer));
}

// Runs one check; if the server is gone afterwards, says which check
// killed it and stops (every later check would only fail to connect).
async function check(name, fn, ms = 60000) {
    if (only && !only.test(name)) return;
    const t0 = Date.now();
    try {
        const detail = await withTimeout(fn(), ms, name);
        console.log(`ok   ${name}${detail ? ": " + detail : ""} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    } catch (e) {
        failures++;
        console.log(`FAIL ${name}: ${e.message}`);
    }
    const alive = await sendHttp("GET", "/health", undefined, {}, false).then(() => true, () => false);
    if (!alive) {
        console.log(`FAIL the server is gone (no answer on a new connection to /health) after: ${name}`);
        process.exit(1);
    }
}

// Problems found within one check: the first few are shown, all are counted.
class Problems {
    constructor() { this.list = []; }
    add(input, what) { this.list.push(`${show(input)} -> ${what}`); }
    throwIfAny(total) {
        if (this.list.length === 0) return;
        throw new Error(`${this.list.length} of ${total} inputs: ${this.list.slice(0, 4).join(" | ")}`);
    }
}

// An input as a short printable string (bytes beyond ASCII as \xNN).
function show(input) {
    const buf = Buffer.isBuffer(input) ? input : Buffer.from(String(input));
    let s = "";
    for (const b of buf.subarray(0, 60)) s += b >= 0x20 && b < 0x7f && b !== 0x5c ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`;
    return buf.length > 60 ? `${s}... (${buf.length} bytes)` : s;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
function isUtf8(buf) {
    try { utf8.decode(buf); return true; } catch { return false; }
}

// A seeded generator (mulberry32), so a failing run can be repeated with HOSTILE_SEED.
let rngState = seed >>> 0;
function random() {
    rngState = (rngState + 0x6d2b79f5) >>> 0;
    let t = rngState;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const randInt = (n) => Math.floor(random() * n);
const pick = (arr) => arr[randInt(arr.length)];

// Runs fn(item, index, worker) over `items`, `WORKERS` at a time.
async function inParallel(items, fn) {
    let next = 0;
    await Promise.all(Array.from({ length: WORKERS }, async (_, worker) => {
        while (next < items.length) {
            const i = next++;
            await fn(items[i], i, worker);
        }
    }));
}

// --------------------------------------------------------------- HTTP ---

const agent = new http.Agent({ keepAlive: true, maxSockets: WORKERS });

function sendHttp(method, path, body, headers, useAgent) {
    return new Promise((resolve, reject) => {
        const data = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body);
        const req = http.request({ host: base.hostname, port: base.port, method, path, agent: useAgent ? agent : false,
                                   headers: { ...(data ? { "Content-Type": "application/json", "Content-Length": data.length } : {}), ...auth, ...headers } }, (res) => {
            const chunks = [];
            res.on("data", (c) => chunks.push(c));
            res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, raw: Buffer.concat(chunks) }));
            res.on("error", (e) => reject(new Error(`the reply was cut off: ${e.code || e.message}`)));
        });
        req.on("error", (e) => { e.reused = req.reusedSocket; reject(e); });
        req.end(data);
    });
}

// One request; a keep-alive socket the server closed between requests is
// retried once on a fresh connection (Node's documented race), any other
// error is a connection dropped without an answer.
async function httpRequest(method, path, body, headers = {}) {
    try {
        return await sendHttp(method, path, body, headers, true);
    } catch (e) {
        if (!e.reused) throw new Error(`no answer, the connection dropped: ${e.code || e.message}`);
    }
    try {
        return await sendHttp(method, path, body, headers, false);
    } catch (e) {
        throw new Error(`no answer, the connection dropped: ${e.code || e.message}`);
    }
}

// A clear answer: 4xx with an OpenAI error object, or a well-formed 200
// (a completion, or an SSE stream ending in [DONE]). Returns "200" or the
// error code; throws what is wrong otherwise.
function judgeHttp(res) {
    if (!isUtf8(res.raw)) throw new Error(`HTTP ${res.status} with invalid UTF-8 in the body`);
    const text = res.raw.toString("utf8");
    if (text.includes("json.exception")) throw new Error(`HTTP ${res.status} quotes the JSON library: ${text.slice(0, 160)}`);
    if (res.status === 200) {
        if ((res.headers["content-type"] || "").startsWith("text/event-stream")) {
            if (!text.trimEnd().endsWith("data: [DONE]")) throw new Error(`an SSE stream without data: [DONE]: ...${text.slice(-120)}`);
            return "200";
        }
        const j = JSON.parse(text);
        if (!Array.isArray(j.choices)) throw new Error(`HTTP 200 without choices: ${text.slice(0, 160)}`);
        return "200";
    }
    if (res.status < 400 || res.status > 499) throw new Error(`HTTP ${res.status}: ${text.slice(0, 160)}`);
    if (res.raw.length > MAX_ERROR_BYTES) throw new Error(`HTTP ${res.status} with a ${res.raw.length}-byte error body: ${text.slice(0, 100)}`);
    let j;
    try { j = JSON.parse(text); } catch { throw new Error(`HTTP ${res.status} whose body is not JSON: ${text.slice(0, 160)}`); }
    if (!j.error || typeof j.error.message !== "string" || typeof j.error.code !== "string")
        throw new Error(`HTTP ${res.status} without an OpenAI error object: ${text.slice(0, 160)}`);
    return `${res.status} ${j.error.code}`;
}

// Posts each body; every answer must be clear. Returns a histogram of answers.
async function postAll(label, bodies, pathFor, allowOk = () => true) {
    const problems = new Problems();
    const seen = new Map();
    await inParallel(bodies, async (body, i) => {
        const path = pathFor(i);
        try {
            const verdict = judgeHttp(await httpRequest("POST", path, body));
            if (verdict === "200" && !allowOk(i)) throw new Error("HTTP 200 for a value of the wrong type");
            seen.set(verdict, (seen.get(verdict) || 0) + 1);
        } catch (e) {
            problems.add(body, `${path}: ${e.message}`);
        }
    });
    problems.throwIfAny(bodies.length);
    return `${bodies.length} ${label}: ` + [...seen.entries()].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} x${n}`).join(", ");
}

// A raw HTTP/1.1 exchange on a plain socket (for bytes Node's client refuses
// to send): resolves with the status line and the body once the server has
// answered (Content-Length read) or closed.
function rawHttp(bytes) {
    return new Promise((resolve, reject) => {
        const sock = net.connect(Number(base.port), base.hostname);
        let got = Buffer.alloc(0);
        const finish = () => {
            sock.destroy();
            const head = got.indexOf("\r\n\r\n");
            if (head < 0) return reject(new Error(got.length ? `a reply without a header end: ${show(got)}` : "no answer, the connection dropped"));
            const headers = got.subarray(0, head).toString("latin1");
            const length = Number((/content-length:\s*(\d+)/i.exec(headers) || [])[1] || 0);
            resolve({ status: Number(headers.split(" ")[1]), headers, body: got.subarray(head + 4, head + 4 + length) });
        };
        sock.on("data", (c) => {
            got = Buffer.concat([got, c]);
            const head = got.indexOf("\r\n\r\n");
            if (head >= 0) {
                const length = Number((/content-length:\s*(\d+)/i.exec(got.subarray(0, head).toString("latin1")) || [])[1] || 0);
                if (got.length >= head + 4 + length) finish();
            }
        });
        sock.on("end", finish);
        sock.on("error", (e) => (got.length ? finish() : reject(new Error(`no answer, the connection dropped: ${e.code}`))));
        sock.write(bytes);
    });
}

// ---------------------------------------------------------- WebSocket ---

const wsUrl = (() => { const u = new URL("/v1/ws", base); u.protocol = "ws:"; return u; })();

// One WebSocket connection that sends a frame at a time and waits for its
// answer: an error frame, a done frame (the frame was a valid generate), or
// the connection closing with a code. Reconnects after a close.
class WsClient {
    constructor() { this.ws = null; this.waiter = null; }

    async open() {
        this.ws = new WebSocket(wsUrl, { headers: auth, maxPayload: 0 });
        this.closed = null;
        this.ws.on("message", (data, isBinary) => {
            if (!this.waiter) return;
            const w = this.waiter;
            if (isBinary) return w.reject(new Error("a binary frame from the server"));
            if (!isUtf8(data)) return w.reject(new Error(`a text frame with invalid UTF-8: ${show(data)}`));
            let f;
            try { f = JSON.parse(data.toString("utf8")); } catch { return w.reject(new Error(`a frame that is not JSON: ${show(data)}`)); }
            if (f.type === "token") return;
            if (f.type === "error" || f.type === "done") return w.resolve({ frame: f, text: data.toString("utf8") });
            w.reject(new Error(`a frame of unknown type: ${show(data)}`));
        });
        this.ws.on("close", (code, reason) => {
            this.closed = { code, reason: reason.toString() };
            if (this.waiter) this.waiter.resolve({ close: this.closed });
        });
        this.ws.on("error", () => {});  // the close event follows
        await new Promise((resolve, reject) => {
            this.ws.once("open", resolve);
            this.ws.once("close", (code) => reject(new Error(`the upgrade failed (close ${code})`)));
            this.ws.once("unexpected-response", (_q, res) => reject(new Error(`the upgrade was answered HTTP ${res.statusCode}`)));
        });
    }

    // Sends `data` (a string or a Buffer) as one text frame.
    async send(data) {
        if (!this.ws || this.closed) await this.open();
        const answer = new Promise((resolve, reject) => { this.waiter = { resolve, reject }; });
        this.ws.send(data, { binary: false });
        try {
            return await withTimeout(answer, 60000, "no answer to the frame");  // a 1 MiB prompt tokenizes slowly under ASan
        } finally {
            this.waiter = null;
        }
    }

    close() { if (this.ws && !this.closed) this.ws.close(1000); }
}

// A clear answer to a frame: an error frame whose message is one line in
// specd's words, a done frame, or a close with 1007 (invalid UTF-8) or 1009
// (too big). Returns a short verdict; throws what is wrong otherwise.
function judgeWs(answer, frameBytes) {
    if (answer.close) {
        const { code, reason } = answer.close;
        if (code === 1007 && !isUtf8(frameBytes)) return "close 1007";
        // A frame whose invalid UTF-8 comes early in a large payload: the
        // server sends 1007 and tears the connection down cleanly (its debug
        // log says "The WebSocket frame payload was not valid utf8" every
        // time), while this client is still writing the rest of the frame;
        // on a loaded machine the client sometimes loses the close frame in
        // that teardown and reports 1006. Seen in 2 of 7 runs with two
        // compilers busy, never on an idle machine.
        if (code === 1006 && !isUtf8(frameBytes) && frameBytes.length > 256 * 1024) return "close 1007 (seen as 1006)";
        if (code === 1009 && frameBytes.length > MAX_BODY) return "close 1009";
        throw new Error(`the connection closed with ${code} ${JSON.stringify(reason)}`);
    }
    const f = answer.frame;
    if (f.type === "done") return "done";
    if (answer.text.includes("json.exception")) throw new Error(`an error frame quotes the JSON library: ${answer.text.slice(0, 160)}`);
    if (typeof f.code !== "string" || !f.code || typeof f.message !== "string") throw new Error(`a malformed error frame: ${answer.text.slice(0, 160)}`);
    if (!(f.id === null || typeof f.id === "string")) throw new Error(`an error frame whose id is neither null nor a string: ${answer.text.slice(0, 160)}`);
    if (typeof f.id === "string" && Buffer.byteLength(f.id) > MAX_WS_ID_BYTES) throw new Error(`an error frame echoes a ${Buffer.byteLength(f.id)}-byte id`);
    if (Buffer.byteLength(answer.text) > MAX_ERROR_BYTES) throw new Error(`a ${Buffer.byteLength(answer.text)}-byte error frame: ${answer.text.slice(0, 100)}`);
    return `error ${f.code}`;
}

async function sendAllWs(label, frames, allowDone = () => true) {
    const problems = new Problems();
    const seen = new Map();
    const clients = Array.from({ length: WORKERS }, () => new WsClient());
    await inParallel(frames, async (frame, i, worker) => {
        const lane = clients[worker];  // one connection per worker, one frame at a time on it
        const bytes = Buffer.isBuffer(frame) ? frame : Buffer.from(frame);
        try {
            const verdict = judgeWs(await lane.send(frame), bytes);
            if (verdict === "done" && !allowDone(i)) throw new Error("a generation ran for a value of the wrong type");
            seen.set(verdict, (seen.get(verdict) || 0) + 1);
        } catch (e) {
            problems.add(bytes, e.message);
            lane.closed = lane.closed || { code: 0, reason: "reset by the test" };
            try { lane.ws.terminate(); } catch { /* already gone */ }
        }
    });
    for (const c of clients) c.close();
    problems.throwIfAny(frames.length);
    return `${frames.length} ${label}: ` + [...seen.entries()].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} x${n}`).join(", ");
}

// ------------------------------------------------------------- inputs ---

// Random bytes of three kinds: any byte, printable ASCII with JSON's
// punctuation, and valid UTF-8 text (so some frames pass Beast's UTF-8 check
// and reach specd's own parser).
function randomBytes() {
    const n = randInt(randInt(8) === 0 ? 2000 : 64) + (randInt(4) === 0 ? 0 : 1);
    const kind = randInt(3);
    if (kind === 0) return Buffer.from(Array.from({ length: n }, () => randInt(256)));
    if (kind === 1) {
        const alphabet = '{}[]:,"\\ 0123456789.eE+-truefalsnlpromptmessagesid\t\n';
        return Buffer.from(Array.from({ length: n }, () => alphabet[randInt(alphabet.length)]).join(""));
    }
    let s = "";
    for (let i = 0; i < n; i++) {
        const r = randInt(10);
        const cp = r < 5 ? 0x20 + randInt(0x5f) : r < 7 ? 0x80 + randInt(0x780) : r < 9 ? 0x800 + randInt(0xd000) : 0x10000 + randInt(0xfffff);
        s += String.fromCodePoint(cp >= 0xd800 && cp <= 0xdfff ? 0xfffd : cp);
    }
    return Buffer.from(s, "utf8");
}

// Random valid JSON text (any type, nested a little).
function randomJson(depth = 0) {
    const r = randInt(depth > 2 ? 6 : 8);
    switch (r) {
        case 0: return "null";
        case 1: return pick(["true", "false"]);
        case 2: return pick(["0", "-0", "1", "-1", "7", "4096", "4097", "2147483648", "9223372036854775808", "-9223372036854775809",
                             "18446744073709551616", "1e400", "-1e400", "1e-400", "1.5", "0.5", "2.0000001", "1e308", "123456789012345678901234567890"]);
        case 3: return String(Math.floor((random() - 0.5) * 1e6));
        case 4: return JSON.stringify(randomBytes().toString("utf8").slice(0, 40));
        case 5: return pick(['""', '"x"', '"1"', '"true"', '"null"', '"\\ud800"', '"\\u0000"', '"\u00e9"']);
        case 6: return `[${Array.from({ length: randInt(4) }, () => randomJson(depth + 1)).join(",")}]`;
        default: return `{${Array.from({ length: randInt(4) }, () => `${JSON.stringify(pick(["a", "prompt", "role", "content", "enabled", ""]))}:${randomJson(depth + 1)}`).join(",")}}`;
    }
}

// Values that are not numbers, strings or booleans of any kind, by JSON type.
const typeOf = (text) => {
    try {
        const v = JSON.parse(text);
        if (v === null) return "null";
        if (Array.isArray(v)) return "array";
        return typeof v;
    } catch { return "invalid"; }  // 1e400 parses in JS as Infinity; NaN etc. are not JSON
};
const FIXED_VALUES = ["null", "true", "false", "0", "-0", "1", "-1", "1.5", "2.5", "-0.5", "1e400", "-1e400", "1e999", "1e-400", "NaN", "-NaN",
                      "Infinity", "-Infinity", "nan", "inf", "9223372036854775808", "18446744073709551616", '"x"', '""', '"1"', '"0.5"', "[]",
                      "[1]", '["x"]', "{}", '{"a":1}', '"\u00e9"', `"${"y".repeat(5000)}"`];

// The parameters a generation request has, with the JSON types each takes
// (null is always allowed: "default", as OpenAI reads it).
const NUMBER = ["number"], INTEGER = ["integer"], BOOL = ["boolean"];
const PARAMS = {
    max_tokens: INTEGER, max_completion_tokens: INTEGER, n_predict: INTEGER, temperature: NUMBER, top_p: NUMBER, top_k: INTEGER,
    min_p: NUMBER, repeat_penalty: NUMBER, repeat_last_n: INTEGER, presence_penalty: NUMBER, frequency_penalty: NUMBER,
    logit_bias: ["object", "array"], seed: INTEGER, n: INTEGER, stop: ["array", "string"], stream: BOOL, model: ["string"],
    speculative: ["object"], "speculative.enabled": BOOL, "speculative.draft_max": INTEGER, "speculative.adaptive": BOOL,
};
function typeFits(valueText, types) {
    const t = typeOf(valueText);
    if (t === "null") return true;
    if (t === "number") {
        const v = JSON.parse(valueText);
        if (!Number.isFinite(v)) return false;
        return types.includes("number") || (types.includes("integer") && /^-?\d+$/.test(valueText.trim()));
    }
    return types.includes(t);
}

// A request body with `valueText` at `param` (dotted: inside an object).
function withParam(baseBody, param, valueText) {
    const [outer, inner] = param.split(".");
    const parts = [];
    for (const [k, v] of Object.entries(baseBody)) if (k !== outer) parts.push(`${JSON.stringify(k)}:${JSON.stringify(v)}`);
    parts.push(inner ? `${JSON.stringify(outer)}:{${JSON.stringify(inner)}:${valueText}}` : `${JSON.stringify(outer)}:${valueText}`);
    return `{${parts.join(",")}}`;
}

const COMPLETION = { prompt: "Once upon a time", max_tokens: 1, temperature: 0 };
const CHAT = { messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 1, temperature: 0 };
let wsIds = 0;
const wsGenerate = () => ({ type: "generate", id: `h${wsIds++}`, prompt: "Once upon a time", max_tokens: 1, temperature: 0 });

// Every parameter x (the fixed values and `perParam` random JSON values).
function wrongTypeCases(baseFor, perParam, extraParams) {
    const cases = [];
    const params = { ...PARAMS, ...extraParams };
    for (const [param, types] of Object.entries(params)) {
        const values = [...FIXED_VALUES, ...Array.from({ length: perParam }, () => randomJson())];
        for (const v of values) {
            // A wrong type must be refused; a fitting one may run (or be out of range).
            cases.push({ body: withParam(baseFor(), param, v), ok: typeFits(v, types) });
        }
    }
    return cases;
}

const MULTIBYTE = Buffer.from("h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u{1F389}", "utf8");  // "héllo wörld 日本語 🎉"

// ------------------------------------------------------------- checks ---

console.log(`specd hostile-client checks against ${base.origin} (seed ${seed}, ${randomCount} random inputs per kind)`);

async function metric(name) {
    const res = await httpRequest("GET", "/metrics");
    const line = res.raw.toString("utf8").split("\n").find((l) => l.startsWith(name + " "));
    if (!line) throw new Error(`metric ${name} missing`);
    return Number(line.split(" ")[1]);
}
const startTime = await metric("process_start_time_seconds");

await check("issue 31 #1: 1e400 as the HTTP body, inside a request, and as a WebSocket frame", async () => {
    const a = judgeHttp(await httpRequest("POST", "/v1/completions", "1e400"));
    const b = judgeHttp(await httpRequest("POST", "/v1/completions", '{"prompt":"x","temperature":1e400}'));
    const c = judgeHttp(await httpRequest("POST", "/v1/chat/completions", '{"messages":[{"role":"user","content":"x"}],"max_tokens":1e400}'));
    if (a === "200" || b === "200" || c === "200") throw new Error(`1e400 accepted: ${a}, ${b}, ${c}`);
    const ws = new WsClient();
    const d = judgeWs(await ws.send("1e400"), Buffer.from("1e400"));
    const e = judgeWs(await ws.send('{"type":"generate","id":"t","prompt":"x","temperature":1e400}'), Buffer.from("x"));
    // The connection is still usable: an unknown id gets its error frame.
    const f = judgeWs(await ws.send('{"type":"cancel","id":"nothing"}'), Buffer.from("x"));
    if (ws.closed) throw new Error("the WebSocket closed after the 1e400 frames");
    ws.close();
    return `body ${a}, temperature ${b}, chat max_tokens ${c}; ws ${d}, ${e}, then ${f}`;
});

await check("issue 31 #2: smart quotes, é and \\xff\\xfe get a valid UTF-8 error", async () => {
    const a = judgeHttp(await httpRequest("POST", "/v1/completions", "{\u201cprompt\u201d: \u201chi\u201d}"));
    const b = judgeHttp(await httpRequest("POST", "/v1/completions", Buffer.from('{"prompt":"\xff\xfe"}', "latin1")));
    const c = judgeHttp(await httpRequest("POST", "/v1/chat/completions", "{\u201cmessages\u201d: []}"));
    for (const v of [a, b, c]) if (v === "200") throw new Error(`accepted: ${a}, ${b}, ${c}`);
    const ws = new WsClient();
    const d = judgeWs(await ws.send("\u00e9"), Buffer.from("\u00e9"));
    const e = judgeWs(await ws.send("{\u201ctype\u201d: \u201cgenerate\u201d}"), Buffer.from("x"));
    const raw = Buffer.from('{"type":"generate","id":"r","prompt":"\xff\xfe"}', "latin1");
    const f = judgeWs(await ws.send(raw), raw);
    ws.close();
    return `smart quotes ${a}, \\xff\\xfe ${b}, chat ${c}; ws é ${d}, smart quotes ${e}, \\xff\\xfe ${f}`;
});

await check("issue 31 #3: GET /\\xff over a raw socket gets a 404 with a valid UTF-8 body", async () => {
    const r = await rawHttp(Buffer.concat([Buffer.from("GET /"), Buffer.from([0xff]), Buffer.from(`?x=\xfe HTTP/1.1\r\nHost: x\r\n${key ? `Authorization: Bearer ${key}\r\n` : ""}Connection: close\r\n\r\n`, "latin1")]));
    if (r.status !== 404) throw new Error(`HTTP ${r.status}: ${show(r.body)}`);
    if (!isUtf8(r.body)) throw new Error(`invalid UTF-8 in the body: ${show(r.body)}`);
    const j = JSON.parse(r.body.toString("utf8"));
    if (!j.error || typeof j.error.message !== "string") throw new Error(`no OpenAI error object: ${show(r.body)}`);
    return `404 ${j.error.code}: ${j.error.message}`;
});

await check("malformed request lines and headers over a raw socket are answered, not dropped", async () => {
    const host = `Host: x\r\n${key ? `Authorization: Bearer ${key}\r\n` : ""}Connection: close\r\n`;
    const cases = [
        `get /health HTTP/1.1\r\n${host}\r\n`,                               // a lowercase method: 400
        `GET /v1/models HTTP/1.1\r\nX-Bad: \xff\xfe\r\n${host}\r\n`,          // a header value that is not UTF-8
        `GET /v1/ws?api_key=%ff%zz HTTP/1.1\r\n${host}\r\n`,                 // a broken percent-escape
        `POST /v1/completions HTTP/1.1\r\n${host}Content-Length: 5\r\n\r\n1e400`,
        `POST /v1/completions HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\n3\r\n\xff\xfe}\r\n0\r\n\r\n`,
    ].map((c) => Buffer.from(c, "latin1"));  // \xff is the byte 0xff
    const problems = new Problems();
    const seen = [];
    for (const c of cases) {
        try {
            const r = await rawHttp(c);
            if (!(r.status >= 400 && r.status <= 499) && r.status !== 200) throw new Error(`HTTP ${r.status}`);
            if (!isUtf8(r.body)) throw new Error(`HTTP ${r.status} with invalid UTF-8: ${show(r.body)}`);
            if (r.body.toString("utf8").includes("json.exception")) throw new Error(`quotes the JSON library: ${show(r.body)}`);
            seen.push(r.status);
        } catch (e) {
            problems.add(c, e.message);
        }
    }
    problems.throwIfAny(cases.length);
    return seen.join(", ");
});

await check(`${randomCount} random byte strings as HTTP bodies`, async () => {
    const bodies = Array.from({ length: randomCount }, randomBytes);
    return postAll("bodies", bodies, (i) => (i % 2 ? "/v1/chat/completions" : "/v1/completions"));
}, 120000);

await check(`${randomCount} random byte strings as WebSocket text frames`, async () => {
    const frames = Array.from({ length: randomCount }, randomBytes);
    return sendAllWs("frames", frames);
}, 120000);

await check("valid JSON with a wrong type at every completion parameter", async () => {
    const cases = wrongTypeCases(() => COMPLETION, 8, { prompt: ["string", "array"], messages: [] });
    return postAll("bodies", cases.map((c) => c.body), () => "/v1/completions", (i) => cases[i].ok);
}, 120000);

await check("valid JSON with a wrong type at every chat parameter and inside messages", async () => {
    const cases = wrongTypeCases(() => CHAT, 8, { prompt: [], messages: ["array"] });
    for (const v of [...FIXED_VALUES, ...Array.from({ length: 16 }, () => randomJson())]) {
        cases.push({ body: `{"messages":[${v}],"max_tokens":1}`, ok: false });
        cases.push({ body: `{"messages":[{"role":${v},"content":"x"}],"max_tokens":1}`, ok: false });
        cases.push({ body: `{"messages":[{"role":"user","content":${v}}],"max_tokens":1}`, ok: typeOf(v) === "string" || typeOf(v) === "null" });
    }
    return postAll("bodies", cases.map((c) => c.body), () => "/v1/chat/completions", (i) => cases[i].ok);
}, 120000);

await check("valid JSON with a wrong type at every WebSocket generate field", async () => {
    const cases = wrongTypeCases(wsGenerate, 4, { prompt: ["string", "array"], messages: [], id: ["string"], type: [] });
    for (const v of FIXED_VALUES) cases.push({ body: `{"type":"cancel","id":${v}}`, ok: false });
    return sendAllWs("frames", cases.map((c) => c.body), (i) => cases[i].ok);
}, 120000);

await check("deep nesting: [ x 100000 and {\"a\": x 100000, open and closed, over HTTP and WebSocket", async () => {
    const n = 100000;
    const inputs = ["[".repeat(n), "[".repeat(n) + "]".repeat(n), '{"a":'.repeat(n), '{"a":'.repeat(n) + "1" + "}".repeat(n),
                    `{"prompt":"x","speculative":${"[".repeat(n)}${"]".repeat(n)}}`, `{"prompt":${'{"a":'.repeat(n)}1${"}".repeat(n)}}`];
    const http = await postAll("bodies", inputs, (i) => (i % 2 ? "/v1/chat/completions" : "/v1/completions"), () => false);
    const ws = await sendAllWs("frames", inputs, () => false);
    return `${http}; ${ws}`;
});

await check("huge strings close to --max-body, and just over it", async () => {
    const room = MAX_BODY - 200;
    const bodies = [
        JSON.stringify({ prompt: "Once upon a time ".repeat(room / 17), max_tokens: 1 }),
        JSON.stringify({ messages: [{ role: "user", content: "ab ".repeat(room / 3) }], max_tokens: 1 }),
        JSON.stringify({ prompt: "x", model: "m".repeat(room) }),
        JSON.stringify({ prompt: "x", ["k".repeat(room)]: 1 }),
        `{"prompt":"${"\\u00e9".repeat(room / 6)}"}`,
        `{"prompt":"x","stop":["${"s".repeat(room)}"]}`,
        Buffer.concat([Buffer.from('{"prompt":"'), Buffer.alloc(room, 0xff), Buffer.from('"}')]),
        JSON.stringify({ prompt: "x".repeat(MAX_BODY + 10) }),
    ];
    const mayRun = (i) => i === 3;  // an unknown key is ignored, as OpenAI does
    const http = await postAll("bodies", bodies, (i) => (i === 1 ? "/v1/chat/completions" : "/v1/completions"), mayRun);
    const frames = bodies.map((b) => {
        const s = Buffer.isBuffer(b) ? b : Buffer.from(b);
        return Buffer.concat([Buffer.from('{"type":"generate","id":"big",'), s.subarray(1)]);
    });
    frames.push(Buffer.from(JSON.stringify({ type: "generate", id: "i".repeat(room), prompt: "x", max_tokens: 1 })));
    const ws = await sendAllWs("frames", frames, mayRun);
    return `${http}; ${ws}`;
}, 120000);

await check("NaN / Infinity / 1e999 / -0 spellings at every numeric parameter", async () => {
    const spellings = ["NaN", "-NaN", "nan", "Infinity", "-Infinity", "+Infinity", "inf", "-inf", "1e999", "-1e999", "1E400", "1e+400",
                       "-0", "-0.0", "0e0", "-0e-0", "1e-400", "4.9e-324", "1.7976931348623157e308", "1.8e308", "0x10", "+1", ".5", "5.", "01"];
    const numeric = Object.entries(PARAMS).filter(([, t]) => t === NUMBER || t === INTEGER).map(([p]) => p);
    const bodies = [], ok = [];
    for (const p of numeric) for (const s of spellings) { bodies.push(withParam(COMPLETION, p, s)); ok.push(typeFits(s, PARAMS[p])); }
    for (const s of spellings) { bodies.push(s); ok.push(false); }
    const http = await postAll("bodies", bodies, () => "/v1/completions", (i) => ok[i]);
    const frames = bodies.map((b, i) => (i < numeric.length * spellings.length ? withParam(wsGenerate(), numeric[Math.floor(i / spellings.length)], spellings[i % spellings.length]) : b));
    const ws = await sendAllWs("frames", frames, (i) => ok[i]);
    return `${http}; ${ws}`;
});

await check(`UTF-8 cut at every byte of ${JSON.stringify(MULTIBYTE.toString("utf8"))}, as a prompt, a chat message, a frame and a body`, async () => {
    const cuts = Array.from({ length: MULTIBYTE.length }, (_, i) => MULTIBYTE.subarray(0, i + 1));
    const wrap = (pre, cut, post) => Buffer.concat([Buffer.from(pre), cut, Buffer.from(post)]);
    const bodies = [], paths = [];
    for (const cut of cuts) {
        bodies.push(wrap('{"prompt":"', cut, '","max_tokens":1,"temperature":0}')); paths.push("/v1/completions");
        bodies.push(wrap('{"messages":[{"role":"user","content":"', cut, '"}],"max_tokens":1,"temperature":0}')); paths.push("/v1/chat/completions");
        bodies.push(wrap('{"prompt":"x","model":"', cut, '"}')); paths.push("/v1/completions");
    }
    // The whole body cut at every byte: truncated JSON.
    const full = wrap('{"prompt":"', MULTIBYTE, '","max_tokens":1}');
    for (let i = 1; i < full.length; i++) { bodies.push(full.subarray(0, i)); paths.push("/v1/completions"); }
    const http = await postAll("bodies", bodies, (i) => paths[i]);
    const frames = cuts.flatMap((cut) => [wrap(`{"type":"generate","id":"u${wsIds++}","prompt":"`, cut, '","max_tokens":1,"temperature":0}'),
                                          wrap('{"type":"generate","id":"', cut, '","prompt":"x","max_tokens":1}')]);
    const ws = await sendAllWs("frames", frames);
    return `${http}; ${ws}`;
});

await check("afterwards: the same process, /health answers, the KV cache is empty", async () => {
    const health = await httpRequest("GET", "/health");
    if (health.status !== 200) throw new Error(`/health: HTTP ${health.status}`);
    const now = await metric("process_start_time_seconds");
    if (now !== startTime) throw new Error(`process_start_time_seconds changed from ${startTime} to ${now}: the server restarted`);
    const end = Date.now() + 15000;
    let used = -1, sessions = -1;
    while (Date.now() < end) {
        used = await metric("specd_kv_blocks_used");
        sessions = await metric("specd_active_sessions");
        if (used === 0 && sessions === 0) break;
        await new Promise((r) => setTimeout(r, 100));
    }
    if (used !== 0 || sessions !== 0) throw new Error(`${used} KV blocks and ${sessions} sessions still in use after 15 s`);
    const r = await httpRequest("POST", "/v1/completions", JSON.stringify({ prompt: "Once upon a time", max_tokens: 5, temperature: 0 }));
    if (r.status !== 200) throw new Error(`a plain completion: HTTP ${r.status}`);
    return `start time ${startTime}, 0 KV blocks, 0 sessions, completion ${JSON.stringify(JSON.parse(r.raw.toString("utf8")).choices[0].text)}`;
});

agent.destroy();
if (failures) {
    console.log(`FAIL: ${failures} check(s) failed (seed ${seed})`);
    process.exit(1);
}
console.log("PASS");
