// The soak driver (tools/soak.sh runs it): mixed load against a running
// `specd serve` for a chosen time, then the checks.
//
//   node soak.mjs URL DURATION_S [--pid PID] [--concurrency N] [--seed S] [--api-key KEY]
//
// Load: WebSocket generations (some cancelled mid-stream, some cut off by an
// abrupt disconnect), HTTP completions and chat completions streamed (SSE,
// some abandoned mid-stream) and not, and bad requests; speculation on or
// off per request. Every request must end in a result or a clear error (an
// OpenAI error object / a WebSocket error frame with a code); abandoned ones
// are the client's doing and counted apart. Memory and KV blocks in use are
// sampled each second. With the server's pid (a local server), memory is
// /proc/PID/status's RssAnon, the heap, where a leak would show: the models
// are mmapped files whose resident pages come and go with the page cache,
// so total RSS is reported but not judged. Without it, /metrics' RSS.
// Checks at the end: no request without an outcome, KV blocks back to 0,
// memory after the load no more than after the warm-up plus a margin,
// /health still 200. Prints a summary table; exit 0 or 1.
//   --only KIND     one kind of request alone (ws_finish, ws_cancel, ...)
//   --samples FILE  writes the samples as CSV (t_s, rss, rss_anon, rss_file, kv_used, active)
import fs from "node:fs";
import http from "node:http";
import WebSocket from "ws";

const args = process.argv.slice(2);
const base = new URL(args[0] || "");
const durationS = Number(args[1] || 30);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
const pid = opt("--pid", "");
const concurrency = Number(opt("--concurrency", 8));
let seed = Number(opt("--seed", 1));
const apiKey = opt("--api-key", process.env.SPECD_API_KEY || "");
const auth = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
// RSS may grow by allocator slack after the warm-up: 10 % plus 16 MiB.
const rssMarginRatio = 0.10, rssMarginBytes = 16 << 20;
const requestTimeoutMs = 120000;

// A small seeded generator (mulberry32): the same seed gives the same mix.
function random() {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(random() * a.length)];
const between = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
const prompts = ["Once upon a time", "Lily and Ben went to the park.", "The sun was hot", "Max the dog liked to run",
                 "One day, a little girl named Sue found a shiny rock.", "Anna saw a big bird in the tree. She"];

const counts = {};      // kind -> { outcome -> n }
const failures = [];    // first few failure descriptions
function record(kind, outcome, detail) {
    counts[kind] = counts[kind] || {};
    counts[kind][outcome] = (counts[kind][outcome] || 0) + 1;
    if (outcome === "FAILED" && failures.length < 10) failures.push(`${kind}: ${detail}`);
}

function genBody() {
    const body = { prompt: pick(prompts), max_tokens: between(4, 48), temperature: pick([0, 0, 0.8]) };
    if (random() < 0.3) body.speculative = { enabled: random() < 0.5 };
    return body;
}

function httpRequest(method, path, { body, raw, stream, abandonAfterFirst } = {}) {
    return new Promise((resolve, reject) => {
        const data = raw !== undefined ? raw : body !== undefined ? JSON.stringify(body) : undefined;
        const req = http.request({ host: base.hostname, port: base.port, method, path, agent: false,
                                   headers: { ...(data !== undefined ? { "Content-Type": "application/json" } : {}), ...auth } }, (res) => {
            let text = "";
            res.on("data", (c) => {
                text += c;
                if (abandonAfterFirst && text.includes("data: ")) { req.destroy(); resolve({ abandoned: true }); }
            });
            res.on("end", () => resolve({ status: res.statusCode, text }));
            res.on("error", (e) => reject(e));
        });
        req.setTimeout(requestTimeoutMs, () => { req.destroy(new Error("timed out")); });
        req.on("error", (e) => reject(e));
        if (data !== undefined) req.write(data);
        req.end();
    });
}

// An OpenAI error object with a message: a clear error.
function clearHttpError(r) {
    try {
        const j = JSON.parse(r.text);
        return r.status >= 400 && j.error && typeof j.error.message === "string" && j.error.message.length > 0;
    } catch { return false; }
}

async function httpCompletion(chat, stream, abandon) {
    const kind = `http_${chat ? "chat" : "completion"}${stream ? (abandon ? "_stream_abandoned" : "_stream") : ""}`;
    const g = genBody();
    const body = chat ? { messages: [{ role: "user", content: g.prompt }], max_tokens: g.max_tokens, temperature: g.temperature, stream }
                      : { ...g, stream };
    try {
        const r = await httpRequest("POST", chat ? "/v1/chat/completions" : "/v1/completions", { body, abandonAfterFirst: abandon });
        if (r.abandoned) return record(kind, "abandoned");
        if (r.status !== 200) return record(kind, clearHttpError(r) ? `error_${r.status}` : "FAILED", `HTTP ${r.status} ${r.text.slice(0, 100)}`);
        if (stream) {
            const events = r.text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
            if (events.at(-1) !== "[DONE]") return record(kind, "FAILED", "stream without [DONE]");
            const last = JSON.parse(events.at(-2));
            if (last.error) return record(kind, "error_in_stream");
            return record(kind, last.choices[0].finish_reason ? "result" : "FAILED", "no finish_reason");
        }
        const j = JSON.parse(r.text);
        record(kind, j.choices && j.choices[0].finish_reason ? "result" : "FAILED", r.text.slice(0, 100));
    } catch (e) {
        record(kind, "FAILED", e.message);
    }
}

async function badRequest() {
    const cases = [
        { raw: "{\"prompt\": " },
        { body: { prompt: "x", max_tokens: "many" } },
        { body: { prompt: "x", temperature: -1 } },
        { body: { max_tokens: 4 } },
        { body: { prompt: "x", model: "no-such-model" } },
    ];
    try {
        const r = await httpRequest("POST", "/v1/completions", pick(cases));
        record("http_bad_request", r.status >= 400 && r.status < 500 && clearHttpError(r) ? `error_${r.status}` : "FAILED",
               `HTTP ${r.status} ${r.text.slice(0, 100)}`);
    } catch (e) {
        record("http_bad_request", "FAILED", e.message);
    }
}

// One WebSocket connection with 1-3 generations; mode: "finish", "cancel"
// (cancel each after its first token) or "disconnect" (terminate the socket
// after the first token).
function wsSession(mode) {
    const kind = `ws_${mode}`;
    const n = between(1, 3);
    return new Promise((resolve) => {
        const u = new URL("/v1/ws", base);
        u.protocol = "ws:";
        const ws = new WebSocket(u, { headers: auth });
        const pending = new Set();
        let settled = false;
        const finish = () => { if (!settled) { settled = true; clearTimeout(timer); resolve(); } };
        const timer = setTimeout(() => {
            for (const id of pending) record(kind, "FAILED", `${id}: no done/error within ${requestTimeoutMs} ms`);
            ws.terminate();
            finish();
        }, requestTimeoutMs);
        ws.on("open", () => {
            for (let i = 0; i < n; i++) {
                const id = `s${i}`;
                pending.add(id);
                const g = genBody();
                if (mode !== "finish") g.max_tokens = 200;
                ws.send(JSON.stringify({ type: "generate", id, ...g }));
            }
        });
        const seen = new Set();
        ws.on("message", (d) => {
            let f;
            try { f = JSON.parse(d.toString()); } catch { record(kind, "FAILED", "a frame that is not JSON"); return; }
            if (f.type === "token" && !seen.has(f.id)) {
                seen.add(f.id);
                if (mode === "cancel") ws.send(JSON.stringify({ type: "cancel", id: f.id }));
                if (mode === "disconnect") {
                    for (const id of pending) record(kind, "abandoned");
                    pending.clear();
                    ws.terminate();
                    finish();
                }
            } else if (f.type === "done") {
                if (!pending.delete(f.id)) return;
                record(kind, mode === "cancel" ? (f.finish_reason === "cancelled" ? "cancelled" : "result") : "result");
            } else if (f.type === "error") {
                pending.delete(f.id);
                record(kind, f.code && f.message ? `error_${f.code}` : "FAILED", JSON.stringify(f));
            }
            if (pending.size === 0 && !settled) { ws.close(); finish(); }
        });
        ws.on("unexpected-response", (_q, res) => { record(kind, `error_${res.statusCode}`); finish(); });
        ws.on("error", (e) => { if (!settled) { for (const id of pending) record(kind, "FAILED", `${id}: ${e.message}`); finish(); } });
        ws.on("close", () => { if (!settled) { for (const id of pending) record(kind, "FAILED", `${id}: closed without done`); finish(); } });
    });
}

// --only KIND runs one kind alone (to find which kind a growth comes with).
const only = opt("--only", "");
const kinds = {
    ws_finish: () => wsSession("finish"), ws_cancel: () => wsSession("cancel"), ws_disconnect: () => wsSession("disconnect"),
    http_completion: () => httpCompletion(false, false, false), http_chat: () => httpCompletion(true, false, false),
    http_stream: () => httpCompletion(random() < 0.5, true, false), http_stream_abandoned: () => httpCompletion(false, true, true),
    http_bad_request: () => badRequest(),
};
if (only && !kinds[only]) { console.log(`unknown --only ${only}: one of ${Object.keys(kinds).join(", ")}`); process.exit(2); }

async function oneRequest() {
    if (only) return kinds[only]();
    const r = random();
    if (r < 0.25) return wsSession("finish");
    if (r < 0.35) return wsSession("cancel");
    if (r < 0.45) return wsSession("disconnect");
    if (r < 0.60) return httpCompletion(false, false, false);
    if (r < 0.70) return httpCompletion(true, false, false);
    if (r < 0.85) return httpCompletion(random() < 0.5, true, false);
    if (r < 0.93) return httpCompletion(false, true, true);
    return badRequest();
}

async function metrics() {
    const r = await httpRequest("GET", "/metrics");
    const get = (name) => {
        const line = r.text.split("\n").find((l) => l.startsWith(name + " "));
        return line ? Number(line.split(" ")[1]) : NaN;
    };
    return { kv: get("specd_kv_blocks_used"), kvTotal: get("specd_kv_blocks_total"), rssMetrics: get("process_resident_memory_bytes"),
             active: get("specd_active_sessions") };
}

// { rss, anon, file } in bytes; anon is the figure judged (see above).
function memory(m) {
    if (pid) {
        try {
            const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
            const kb = (name) => Number((status.match(new RegExp(`${name}:\\s+(\\d+) kB`)) || [0, NaN])[1]) * 1024;
            return { rss: kb("VmRSS"), anon: kb("RssAnon"), file: kb("RssFile") };
        } catch { /* the process is gone: the /health check below reports it */ }
    }
    return { rss: m.rssMetrics, anon: m.rssMetrics, file: NaN };
}
const judged = pid ? "RssAnon" : "RSS";

const samples = [];  // { t, rss, kv, active }
async function sample(t0) {
    try {
        const m = await metrics();
        const mem = memory(m);
        samples.push({ t: (Date.now() - t0) / 1000, rss: mem.anon, total: mem.rss, file: mem.file, kv: m.kv, kvTotal: m.kvTotal, active: m.active });
    } catch (e) {
        samples.push({ t: (Date.now() - t0) / 1000, error: e.message });
    }
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.floor(s.length / 2)] : NaN; };
const mib = (b) => (b / 1048576).toFixed(1);

// ---- the run
const t0 = Date.now();
const deadline = t0 + durationS * 1000;
const warmupS = Math.max(5, Math.min(60, durationS * 0.2));
const sampler = setInterval(() => sample(t0), 1000);
await sample(t0);
let started = 0;
await Promise.all(Array.from({ length: concurrency }, async () => {
    while (Date.now() < deadline) {
        started++;
        await oneRequest();
    }
}));
clearInterval(sampler);
const loadEndS = (Date.now() - t0) / 1000;

// Abandoned requests are cancelled by the server as it notices; then the KV
// cache must be empty and the process idle.
let idle = null;
for (let i = 0; i < 300 && !idle; i++) {
    const m = await metrics().catch(() => null);
    if (m && m.kv === 0 && m.active === 0) idle = m;
    else await new Promise((r) => setTimeout(r, 100));
}
const idleSamples = [];
for (let i = 0; i < 3; i++) {
    await new Promise((r) => setTimeout(r, 300));
    const m = await metrics().catch(() => null);
    if (m) idleSamples.push(memory(m));
}
const health = await httpRequest("GET", "/health").catch((e) => ({ status: e.message }));

// ---- the figures
const loaded = samples.filter((s) => !s.error);
const afterWarmup = loaded.filter((s) => s.t >= warmupS);
const atWarmup = loaded.filter((s) => s.t >= warmupS - 3 && s.t <= warmupS + 1).map((s) => s.rss);
const rssStart = loaded.length ? loaded[0].rss : NaN;
const rssWarm = median(atWarmup.length ? atWarmup : afterWarmup.slice(0, 3).map((s) => s.rss));
const rssEnd = median(idleSamples.map((x) => x.anon));
const totalStart = loaded.length ? loaded[0].total : NaN, totalEnd = median(idleSamples.map((x) => x.rss));
const totalPeak = Math.max(...loaded.map((s) => s.total));
const rssPeak = Math.max(...loaded.map((s) => s.rss));
const kvPeak = Math.max(...loaded.map((s) => s.kv));
const kvTotal = loaded.length ? loaded[0].kvTotal : NaN;
// RSS slope after the warm-up (least squares), for the record.
let slope = 0;
if (afterWarmup.length > 2) {
    const n = afterWarmup.length, mx = afterWarmup.reduce((a, s) => a + s.t, 0) / n, my = afterWarmup.reduce((a, s) => a + s.rss, 0) / n;
    const sxy = afterWarmup.reduce((a, s) => a + (s.t - mx) * (s.rss - my), 0), sxx = afterWarmup.reduce((a, s) => a + (s.t - mx) ** 2, 0);
    slope = sxx > 0 ? (sxy / sxx) * 60 : 0;
}

let total = 0, failed = 0, results = 0, errors = 0, abandoned = 0, cancelled = 0;
console.log(`specd soak: ${base.origin}, ${durationS} s, ${concurrency} clients, seed ${opt("--seed", 1)}\n`);
console.log("| request kind | outcomes |");
console.log("| --- | --- |");
for (const kind of Object.keys(counts).sort()) {
    const o = counts[kind];
    console.log(`| ${kind} | ${Object.entries(o).map(([k, v]) => `${k} ${v}`).join(", ")} |`);
    for (const [k, v] of Object.entries(o)) {
        total += v;
        if (k === "FAILED") failed += v;
        else if (k === "result") results += v;
        else if (k === "abandoned") abandoned += v;
        else if (k === "cancelled") cancelled += v;
        else errors += v;
    }
}
const rssLimit = rssWarm * (1 + rssMarginRatio) + rssMarginBytes;
const checks = [
    ["every request ended in a result or a clear error", failed === 0, `${failed} without one`],
    ["KV blocks in use back to 0", idle !== null, idle ? "0" : `still ${(await metrics().catch(() => ({ kv: "?" }))).kv}`],
    [`${judged} after the load <= after the warm-up + 10 % + 16 MiB`, rssEnd <= rssLimit, `${mib(rssEnd)} MiB vs limit ${mib(rssLimit)} MiB`],
    ["/health answers 200", health.status === 200, `${health.status}`],
    ["RSS samples taken", loaded.length >= Math.min(5, durationS / 2), `${loaded.length}`],
];
console.log(`\n| figure | value |\n| --- | --- |`);
console.log(`| duration of load | ${loadEndS.toFixed(0)} s (warm-up ${warmupS.toFixed(0)} s) |`);
console.log(`| requests | ${total}: ${results} results, ${cancelled} cancelled, ${errors} clear errors, ${abandoned} abandoned by the client, ${failed} failed |`);
console.log(`| requests per second | ${(total / loadEndS).toFixed(1)} |`);
console.log(`| ${judged} at start / after warm-up / peak / end (idle) | ${mib(rssStart)} / ${mib(rssWarm)} / ${mib(rssPeak)} / ${mib(rssEnd)} MiB |`);
console.log(`| ${judged} slope after warm-up | ${(slope / 1048576).toFixed(2)} MiB/min |`);
if (pid) console.log(`| RSS (anon + mmapped model pages) at start / peak / end | ${mib(totalStart)} / ${mib(totalPeak)} / ${mib(totalEnd)} MiB |`);
console.log(`| KV blocks used: peak / end (of ${kvTotal}) | ${kvPeak} / ${idle ? idle.kv : "not 0"} |`);
console.log("");
for (const [name, ok, detail] of checks) console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${detail}`);
for (const f of failures) console.log(`  failure: ${f}`);
const bad = checks.filter(([, ok]) => !ok).length;
console.log(bad ? `FAIL: ${bad} check(s) failed` : "PASS");
console.log(`SOAK_SUMMARY duration_s=${durationS} requests=${total} results=${results} cancelled=${cancelled} clear_errors=${errors} ` +
            `abandoned=${abandoned} failed=${failed} rss_start_mib=${mib(rssStart)} rss_warm_mib=${mib(rssWarm)} rss_peak_mib=${mib(rssPeak)} ` +
            `rss_end_mib=${mib(rssEnd)} (${judged}) rss_total_start_mib=${mib(totalStart)} rss_total_end_mib=${mib(totalEnd)} ` +
            `kv_peak=${kvPeak} kv_end=${idle ? idle.kv : "?"}`);
const samplesFile = opt("--samples", "");
if (samplesFile)
    fs.writeFileSync(samplesFile, "t_s,rss_bytes,rss_anon_bytes,rss_file_bytes,kv_blocks_used,active_sessions\n" +
                     loaded.map((x) => [x.t.toFixed(1), x.total, x.rss, x.file, x.kv, x.active].join(",")).join("\n") + "\n");
process.exit(bad ? 1 : 0);
