// Robustness of `specd serve` against bad and abusive clients, then a load
// of 200 WebSocket connections streaming at once; afterwards the KV cache
// must be empty again and the server must still answer. The server is
// expected to run with `--api-key $SPECD_API_KEY` (with_server.sh sets it).
//
//   node robustness.test.mjs http://127.0.0.1:PORT
//
// Exit 0 when every check passes, 1 with a one-line summary otherwise.
import http from "node:http";
import net from "node:net";
import { execFileSync } from "node:child_process";
import WebSocket from "ws";

const base = new URL(process.argv[2] || "");
const key = process.env.SPECD_API_KEY || "";
const auth = key ? { Authorization: `Bearer ${key}` } : {};
let failures = 0;

function withTimeout(promise, ms, what) {
    let timer;
    return Promise.race([promise, new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms); })])
        .finally(() => clearTimeout(timer));
}

async function check(name, fn, ms = 30000) {
    try {
        const detail = await withTimeout(fn(), ms, name);
        console.log(`ok   ${name}${detail ? ": " + detail : ""}`);
    } catch (e) {
        failures++;
        console.log(`FAIL ${name}: ${e.message}`);
    }
}

function request(method, path, { body, headers = {}, raw } = {}) {
    return new Promise((resolve, reject) => {
        const data = raw !== undefined ? raw : body !== undefined ? JSON.stringify(body) : undefined;
        const req = http.request({ host: base.hostname, port: base.port, method, path,
                                   headers: { ...(data !== undefined ? { "Content-Type": "application/json" } : {}), ...headers } }, (res) => {
            let text = "";
            res.on("data", (c) => { text += c; });
            res.on("end", () => resolve({ status: res.statusCode, text, headers: res.headers }));
        });
        req.on("error", reject);
        if (data !== undefined) req.write(data);
        req.end();
    });
}

function expectError(res, status, code) {
    if (res.status !== status) throw new Error(`expected HTTP ${status}, got ${res.status}: ${res.text.slice(0, 120)}`);
    const j = JSON.parse(res.text);
    if (!j.error || !j.error.message) throw new Error(`no OpenAI error object: ${res.text.slice(0, 120)}`);
    if (code && j.error.code !== code) throw new Error(`expected code ${code}, got ${j.error.code}`);
    return `${status} ${j.error.code}: ${j.error.message.slice(0, 70)}`;
}

async function metric(name) {
    const res = await request("GET", "/metrics", { headers: auth });
    const line = res.text.split("\n").find((l) => l.startsWith(name + " "));
    if (!line) throw new Error(`metric ${name} missing`);
    return Number(line.split(" ")[1]);
}

async function waitFor(pred, ms, what) {
    const end = Date.now() + ms;
    while (Date.now() < end) {
        if (await pred()) return;
        await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(what);
}

function wsGenerate(id, maxTokens) {
    return new Promise((resolve, reject) => {
        const u = new URL("/v1/ws", base);
        u.protocol = "ws:";
        const ws = new WebSocket(u, { headers: auth });
        let tokens = 0;
        ws.on("open", () => ws.send(JSON.stringify({ type: "generate", id, prompt: "Once upon a time", max_tokens: maxTokens, temperature: 0 })));
        ws.on("message", (d) => {
            const f = JSON.parse(d.toString());
            if (f.type === "token") tokens += f.token_ids.length;
            else if (f.type === "done") { ws.close(); resolve(tokens); }
            else if (f.type === "error") { ws.close(); reject(new Error(`${id}: ${f.code} ${f.message}`)); }
        });
        ws.on("error", (e) => reject(new Error(`${id}: ${e.message}`)));
    });
}

console.log(`specd robustness checks against ${base.origin}`);

await check("/health answers without an API key", async () => {
    const r = await request("GET", "/health");
    if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
    return r.text;
});
if (key) {
    await check("a missing API key is 401", async () => expectError(await request("GET", "/v1/models"), 401, "invalid_api_key"));
    await check("a wrong API key is 401", async () =>
        expectError(await request("GET", "/v1/models", { headers: { Authorization: "Bearer wrong" } }), 401, "invalid_api_key"));
    await check("a WebSocket upgrade without the key is refused with 401", () => new Promise((resolve, reject) => {
        const u = new URL("/v1/ws", base);
        u.protocol = "ws:";
        const ws = new WebSocket(u);
        ws.on("unexpected-response", (_q, res) => (res.statusCode === 401 ? resolve("401") : reject(new Error(`HTTP ${res.statusCode}`))));
        ws.on("open", () => { ws.close(); reject(new Error("upgrade accepted without a key")); });
        ws.on("error", () => {});
    }));
}
await check("malformed JSON is 400 invalid_json", async () =>
    expectError(await request("POST", "/v1/completions", { raw: "{\"prompt\": ", headers: auth }), 400, "invalid_json"));
await check("a missing prompt is 400", async () => expectError(await request("POST", "/v1/completions", { body: { max_tokens: 4 }, headers: auth }), 400, "invalid_request"));
await check("a wrong type is 400", async () =>
    expectError(await request("POST", "/v1/completions", { body: { prompt: "x", max_tokens: "many" }, headers: auth }), 400, "invalid_request"));
await check("an unknown model is 404", async () =>
    expectError(await request("POST", "/v1/completions", { body: { prompt: "x", model: "gpt-17" }, headers: auth }), 404, "unknown_model"));
await check("max_tokens beyond the limit is 400", async () =>
    expectError(await request("POST", "/v1/completions", { body: { prompt: "x", max_tokens: 10000000 }, headers: auth }), 400, "invalid_request"));
await check("a 2 MiB body is 413", async () =>
    expectError(await request("POST", "/v1/completions", { raw: JSON.stringify({ prompt: "x".repeat(2 << 20) }), headers: auth }), 413, "request_too_large"));
await check("a wrong method is 405, an unknown path 404", async () => {
    expectError(await request("GET", "/v1/completions", { headers: auth }), 405);
    return expectError(await request("GET", "/nope", { headers: auth }), 404);
});

await check("a client that vanishes mid-stream has its generation cancelled and its blocks freed", async () => {
    const before = await metric("specd_generations_cancelled_total");
    await new Promise((resolve, reject) => {
        const req = http.request({ host: base.hostname, port: base.port, method: "POST", path: "/v1/completions",
                                   headers: { "Content-Type": "application/json", ...auth } }, (res) => {
            res.once("data", () => { req.destroy(); resolve(); });
        });
        req.on("error", () => {});
        req.write(JSON.stringify({ prompt: "Once upon a time", max_tokens: 240, stream: true, temperature: 0, speculative: { enabled: false } }));
        req.end();
        setTimeout(() => reject(new Error("no first chunk")), 10000);
    });
    await waitFor(async () => (await metric("specd_generations_cancelled_total")) > before, 10000, "the generation was not cancelled");
    await waitFor(async () => (await metric("specd_kv_blocks_used")) === 0, 10000, "KV blocks still in use");
    return "cancelled, 0 KV blocks in use";
});

await check("a slow-loris connection does not block other clients", async () => {
    const sock = net.connect(Number(base.port), base.hostname);
    await new Promise((r) => sock.once("connect", r));
    sock.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n");  // and never more
    const r = await request("GET", "/v1/models", { headers: auth });
    sock.destroy();
    if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
    return "models answered while a half-sent request was open";
});

await check("200 WebSocket connections streaming at once all finish", async () => {
    const n = 200;
    const results = await Promise.all(Array.from({ length: n }, (_, i) => wsGenerate(`load${i}`, 8)));
    const bad = results.filter((t) => t !== 8).length;
    if (bad) throw new Error(`${bad} of ${n} did not get 8 tokens`);
    return `${n} x 8 tokens`;
}, 180000);

await check("afterwards the KV cache is empty and the server still answers", async () => {
    await waitFor(async () => (await metric("specd_kv_blocks_used")) === 0 && (await metric("specd_active_sessions")) === 0, 15000,
                  "KV blocks or sessions still in use");
    const r = await request("POST", "/v1/completions", { body: { prompt: "Once upon a time", max_tokens: 5, temperature: 0 }, headers: auth });
    if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
    return JSON.parse(r.text).choices[0].text;
});

await check("/metrics on the CPU (--device cpu) has no GPU figures", async () => {
    const text = (await request("GET", "/metrics", { headers: auth })).text;
    const gpu = text.split("\n").filter((l) => l.includes("specd_gpu_"));
    if (gpu.length) throw new Error(`unexpected GPU lines: ${gpu[0]}`);
    if (!text.includes("specd_kv_blocks_total")) throw new Error("no specd_kv_blocks_total: not the runtime's metrics");
    return "none";
});

await check("/metrics passes promtool check metrics (when promtool is installed)", async () => {
    const text = (await request("GET", "/metrics", { headers: auth })).text;
    try {
        execFileSync("promtool", ["check", "metrics"], { input: text, stdio: ["pipe", "pipe", "pipe"] });
    } catch (e) {
        if (e.code === "ENOENT") return "promtool not installed; skipped";
        const out = `${e.stdout || ""}${e.stderr || ""}`.trim();
        // Lint warnings (exit 3) are not errors of the format.
        if (e.status === 3) return `valid, lint: ${out.split("\n")[0]}`;
        throw new Error(`promtool: ${out.slice(0, 200)}`);
    }
    return "valid";
});

if (failures) {
    console.log(`FAIL: ${failures} check(s) failed`);
    process.exit(1);
}
console.log("PASS");
