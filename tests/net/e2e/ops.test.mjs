// Operations end to end, each check against its own real `specd serve`
// process: graceful drain on SIGTERM, the drain timeout, the run-time
// speculation switch (admin endpoint, SIGHUP), a draft that cannot load,
// refused target files, `specd config` precedence and bad values, `specd
// verify --write`, and JSON logs with the per-request summary line.
//
//   node ops.test.mjs SPECD_BINARY MODELS_DIR
//
// Exit 0 when every check passes, 1 with a one-line summary otherwise.
import { spawn, spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import WebSocket from "ws";

const [specd, modelsDir] = process.argv.slice(2);
if (!specd || !modelsDir) {
    console.log("usage: node ops.test.mjs SPECD_BINARY MODELS_DIR");
    process.exit(2);
}
const target = path.join(modelsDir, "stories15M-f32.gguf");
const draft = path.join(modelsDir, "stories15M-q8_0.gguf");
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "specd-ops-"));
let failures = 0;

// The environment without any specd setting of the caller's (ctest may set
// some for other tests), so each server sees exactly what a check gives it.
function cleanEnv(env) {
    const out = {};
    for (const [k, v] of Object.entries(env))
        if (!k.startsWith("SPECD_") && !["MAIN_MODEL_PATH", "DRAFT_MODEL_PATH", "MAX_DRAFT_TOKENS", "KV_CACHE_RATIO",
                                          "ENABLE_SPECULATIVE_DECODING", "MAIN_MODEL_SHA256", "DRAFT_MODEL_SHA256"].includes(k)) out[k] = v;
    return out;
}
const baseEnv = cleanEnv(process.env);

function withTimeout(promise, ms, what) {
    let timer;
    return Promise.race([promise, new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms); })])
        .finally(() => clearTimeout(timer));
}

const running = new Set();
async function check(name, fn, ms = 120000) {
    try {
        const detail = await withTimeout(fn(), ms, name);
        console.log(`ok   ${name}${detail ? ": " + detail : ""}`);
    } catch (e) {
        failures++;
        console.log(`FAIL ${name}: ${e.message}`);
    }
    for (const s of running) s.proc.kill("SIGKILL");
    running.clear();
}

function expect(cond, what) {
    if (!cond) throw new Error(what);
}

// Starts `specd serve --port 0 ARGS`; resolves when it prints its URL.
function startServer(args, env = {}) {
    const proc = spawn(specd, ["serve", "--port", "0", ...args], { env: { ...baseEnv, ...env } });
    const s = { proc, stdout: "", stderr: "", url: "" };
    running.add(s);
    s.exited = new Promise((resolve) => proc.on("exit", (code, signal) => { running.delete(s); resolve({ code, signal }); }));
    proc.stdout.on("data", (d) => { s.stdout += d; });
    proc.stderr.on("data", (d) => { s.stderr += d; });
    return new Promise((resolve, reject) => {
        const poll = setInterval(() => {
            const m = s.stdout.match(/http:\/\/127\.0\.0\.1:(\d+)/);
            if (m) { clearInterval(poll); s.url = m[0]; resolve(s); }
        }, 20);
        s.exited.then(({ code }) => { clearInterval(poll); reject(new Error(`specd serve exited ${code}: ${s.stderr.trim().slice(-300)}`)); });
    });
}

// Runs specd to completion: { code, stdout, stderr }.
function runSpecd(args, env = {}) {
    const r = spawnSync(specd, args, { env: { ...baseEnv, ...env }, encoding: "utf8", timeout: 120000 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function request(s, method, p, { body, headers = {} } = {}) {
    const base = new URL(s.url);
    return new Promise((resolve, reject) => {
        const data = body !== undefined ? JSON.stringify(body) : undefined;
        const req = http.request({ host: base.hostname, port: base.port, method, path: p,
                                   headers: { ...(data !== undefined ? { "Content-Type": "application/json" } : {}), ...headers } }, (res) => {
            let text = "";
            res.on("data", (c) => { text += c; });
            res.on("end", () => resolve({ status: res.statusCode, text, json: () => JSON.parse(text) }));
        });
        req.on("error", reject);
        if (data !== undefined) req.write(data);
        req.end();
    });
}

async function complete(s, extra = {}) {
    const r = await request(s, "POST", "/v1/completions", { body: { prompt: "Once upon a time", max_tokens: 24, temperature: 0, ...extra } });
    expect(r.status === 200, `completion: HTTP ${r.status} ${r.text.slice(0, 120)}`);
    return r.json();
}

// A streamed completion: resolves with its events once [DONE] or the end
// arrives; `onFirst` runs when the first token chunk does.
function streamCompletion(s, body, onFirst = () => {}) {
    const base = new URL(s.url);
    return new Promise((resolve, reject) => {
        const req = http.request({ host: base.hostname, port: base.port, method: "POST", path: "/v1/completions",
                                   headers: { "Content-Type": "application/json" } }, (res) => {
            let buf = "", first = true;
            const events = [];
            res.on("data", (c) => {
                buf += c;
                let i;
                while ((i = buf.indexOf("\n\n")) >= 0) {
                    const ev = buf.slice(0, i);
                    buf = buf.slice(i + 2);
                    if (!ev.startsWith("data: ")) continue;
                    const data = ev.slice(6);
                    events.push(data);
                    if (first && data !== "[DONE]") { first = false; onFirst(); }
                }
            });
            res.on("end", () => resolve({ status: res.statusCode, events }));
        });
        req.on("error", reject);
        req.write(JSON.stringify(body));
        req.end();
    });
}

// WebSocket generations on one connection: resolves with each id's last
// frame (done or error) once all ended or the socket closed.
function wsGenerations(s, ids, gen, onFirstToken = () => {}) {
    const u = new URL("/v1/ws", s.url);
    u.protocol = "ws:";
    return new Promise((resolve, reject) => {
        const ws = new WebSocket(u);
        const last = {};
        let first = true;
        ws.on("open", () => { for (const id of ids) ws.send(JSON.stringify({ type: "generate", id, ...gen })); });
        ws.on("message", (d) => {
            const f = JSON.parse(d.toString());
            if (f.type === "token" && first) { first = false; onFirstToken(); }
            if (f.type === "done" || f.type === "error") last[f.id] = f;
            if (Object.keys(last).length === ids.length) ws.close();
        });
        ws.on("close", () => resolve(last));
        ws.on("error", (e) => reject(e));
    });
}

async function waitFor(pred, ms, what) {
    const end = Date.now() + ms;
    while (Date.now() < end) {
        if (await pred()) return;
        await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(what);
}

// Exit 1 and exactly one "specd: error:" line, the last on stderr; any
// other lines are the structured log's (they start with a timestamp).
function oneErrorLine(r, what) {
    const lines = r.stderr.trim().split("\n");
    expect(r.code === 1, `${what}: exit ${r.code}, expected 1 (stderr: ${r.stderr.trim().slice(-200)})`);
    const errors = lines.filter((l) => l.startsWith("specd: error: "));
    const other = lines.filter((l) => !l.startsWith("specd: error: ") && !/^\d{4}-\d\d-\d\dT/.test(l));
    expect(errors.length === 1 && errors[0] === lines.at(-1) && other.length === 0,
           `${what}: expected one "specd: error:" line, got: ${r.stderr.trim()}`);
    return errors[0];
}

const longStream = { prompt: "Once upon a time", max_tokens: 200, temperature: 0, stream: true, speculative: { enabled: false } };

console.log(`specd operations checks: ${specd}`);

await check("SIGTERM drains: /health turns 503, new requests get 503, running streams finish with [DONE], exit 0", async () => {
    // One request decodes at a time, so the four streams take a while: the
    // drain is observable on any machine.
    const s = await startServer(["-m", target, "--model-draft", draft, "--parallel", "1", "--drain-timeout", "120"]);
    let resolveFirst;
    const firstToken = new Promise((r) => { resolveFirst = r; });
    const streams = [0, 1, 2, 3].map(() => streamCompletion(s, longStream, resolveFirst));
    await firstToken;
    s.proc.kill("SIGTERM");
    await waitFor(async () => (await request(s, "GET", "/health")).status === 503, 10000, "/health never turned 503");
    const health = (await request(s, "GET", "/health").catch(() => ({ status: "gone" }))).status;
    const refused = await request(s, "POST", "/v1/completions", { body: { prompt: "x", max_tokens: 2 } }).catch((e) => ({ status: e.code }));
    const results = await Promise.all(streams);
    const { code, signal } = await s.exited;
    for (const r of results) {
        expect(r.status === 200 && r.events.at(-1) === "[DONE]", `a stream did not end with [DONE]: ${r.events.slice(-2).join(" | ")}`);
        const last = JSON.parse(r.events.at(-2));
        expect(last.choices[0].finish_reason === "length" && last.usage.completion_tokens === 200,
               `a stream was cut short: ${JSON.stringify(last.usage)} ${last.choices[0].finish_reason}`);
    }
    expect(refused.status === 503, `a new request during the drain got ${refused.status}, expected 503`);
    expect(code === 0 && signal === null, `exit code ${code} signal ${signal}`);
    expect(/draining/.test(s.stderr), "no draining log line");
    return `health ${health} while draining, new request 503, 4 x 200 tokens completed, exit 0`;
});

await check("the drain timeout cancels what is still running (finish_reason cancelled, on SSE too), WebSockets get close 1001, exit 0", async () => {
    const s = await startServer(["-m", target, "--model-draft", draft, "--parallel", "1", "--drain-timeout", "1"]);
    // An idle WebSocket: told why the server goes away (1001), not dropped (1006).
    const idleClose = new Promise((resolve, reject) => {
        const u = new URL("/v1/ws", s.url);
        u.protocol = "ws:";
        const ws = new WebSocket(u);
        ws.on("close", (code) => resolve(code));
        ws.on("error", reject);
    });
    // Three connections of eight (a connection's limit): far more decoding
    // than one second allows with one request at a time.
    const ids = Array.from({ length: 24 }, (_, i) => `g${i}`);
    let resolveFirst;
    const firstToken = new Promise((r) => { resolveFirst = r; });
    const gen = { prompt: "Once upon a time", max_tokens: 200, temperature: 0, speculative: { enabled: false } };
    const gens = [0, 8, 16].map((at) => wsGenerations(s, ids.slice(at, at + 8), gen, resolveFirst));
    await firstToken;
    // Queued behind the WebSocket generations, so still unfinished when the drain times out.
    const sse = streamCompletion(s, longStream);
    await new Promise((r) => setTimeout(r, 200));
    s.proc.kill("SIGTERM");
    const last = Object.assign({}, ...(await Promise.all(gens)));
    const { code } = await s.exited;
    const streamed = await sse;
    const sseLast = JSON.parse(streamed.events.at(-2));
    expect(streamed.events.at(-1) === "[DONE]" && sseLast.choices[0].finish_reason === "cancelled",
           `the SSE stream cut by the drain timeout ends with ${sseLast.choices[0].finish_reason}, not "cancelled"`);
    expect((await idleClose) === 1001, `the idle WebSocket closed with ${await idleClose}, not 1001`);
    const reasons = {};
    for (const id of ids) {
        const f = last[id];
        expect(f, `generation ${id} ended without a done or error frame`);
        const r = f.type === "done" ? f.finish_reason : `error:${f.code}`;
        reasons[r] = (reasons[r] || 0) + 1;
    }
    expect(reasons.cancelled > 0, `nothing was cancelled: ${JSON.stringify(reasons)}`);
    expect(code === 0, `exit code ${code}`);
    expect(/drain timeout/.test(s.stderr), "no drain-timeout warning in the log");
    return `${JSON.stringify(reasons)}, SSE cancelled, idle WebSocket 1001, exit 0`;
});

await check("/admin/speculation: 401 without the key; off then on shows in the next request's stats; per request too", async () => {
    const s = await startServer(["-m", target, "--model-draft", draft, "--admin-key", "adm1n"]);
    const auth = { Authorization: "Bearer adm1n" };
    expect((await request(s, "POST", "/admin/speculation", { body: { enabled: false } })).status === 401, "no key: not 401");
    expect((await request(s, "POST", "/admin/speculation", { body: { enabled: false }, headers: { Authorization: "Bearer nope" } })).status === 401,
           "wrong key: not 401");
    expect((await request(s, "GET", "/v1/models")).status === 200, "the admin key must not guard the API");
    const before = await complete(s);
    expect(before.speculative.enabled && before.speculative.drafted > 0, `speculation should start on: ${JSON.stringify(before.speculative)}`);

    const off = await request(s, "POST", "/admin/speculation", { body: { enabled: false }, headers: auth });
    expect(off.status === 200 && off.json().enabled === false, `switch off: ${off.status} ${off.text}`);
    const plain = await complete(s);
    expect(!plain.speculative.enabled && plain.speculative.drafted === 0, `still drafting after the switch: ${JSON.stringify(plain.speculative)}`);
    expect(plain.choices[0].text === before.choices[0].text, "greedy output changed with speculation off (must be lossless)");
    const perRequest = await complete(s, { speculative: { enabled: true } });
    expect(perRequest.speculative.drafted > 0, "a request asking for speculation did not draft");
    expect((await request(s, "GET", "/health")).json().speculation === false, "/health does not report speculation off");

    const on = await request(s, "POST", "/admin/speculation", { body: { enabled: true, draft_max: 4 }, headers: auth });
    expect(on.status === 200 && on.json().enabled === true && on.json().draft_max === 4, `switch on: ${on.text}`);
    const again = await complete(s);
    expect(again.speculative.enabled && again.speculative.drafted > 0, `not drafting after switching on: ${JSON.stringify(again.speculative)}`);
    const optOut = await complete(s, { speculative: { enabled: false } });
    expect(optOut.speculative.drafted === 0, "a request opting out still drafted");
    const bad = await request(s, "POST", "/admin/speculation", { body: { enabled: "yes" }, headers: auth });
    expect(bad.status === 400, `a bad admin body got ${bad.status}`);
    expect(/speculation switched/.test(s.stderr), "no 'speculation switched' log line");
    return `drafted ${before.speculative.drafted} -> 0 -> ${again.speculative.drafted}`;
});

await check("SIGHUP re-reads the config file: speculation off, then on; a bad file keeps the running config", async () => {
    const file = path.join(scratch, "reload.json");
    fs.writeFileSync(file, JSON.stringify({ model: target, model_draft: draft, speculative: true }));
    const s = await startServer(["--config", file]);
    expect((await complete(s)).speculative.drafted > 0, "not drafting at start");
    const reloaded = async (n) => waitFor(async () => (s.stderr.match(/config reloaded/g) || []).length >= n, 10000, "no reload logged");

    fs.writeFileSync(file, JSON.stringify({ model: target, model_draft: draft, speculative: false, draft_max: 3 }));
    s.proc.kill("SIGHUP");
    await reloaded(1);
    const off = await complete(s);
    expect(!off.speculative.enabled && off.speculative.drafted === 0, `SIGHUP did not switch speculation off: ${JSON.stringify(off.speculative)}`);

    // Broken files must be refused and the running config kept: a cut one,
    // smart quotes (a parse error inside a multi-byte character), raw bytes.
    const broken = ["{\"speculative\": tru", "{\u201cspeculative\u201d: true}", Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])];
    for (const [i, text] of broken.entries()) {
        fs.writeFileSync(file, text);
        s.proc.kill("SIGHUP");
        await waitFor(async () => (s.stderr.match(/config reload failed/g) || []).length > i, 10000, `bad file ${i} on SIGHUP was not reported`);
        expect(s.proc.exitCode === null, `SIGHUP with bad file ${i} ended the server: ${s.stderr.slice(-300)}`);
    }
    expect(!/json\.exception/.test(s.stderr), "the JSON library's text reached the log");
    expect((await complete(s)).speculative.drafted === 0, "a failed reload changed the configuration");

    fs.writeFileSync(file, JSON.stringify({ model: target, model_draft: draft, speculative: true }));
    s.proc.kill("SIGHUP");
    await reloaded(2);
    const on = await complete(s);
    expect(on.speculative.drafted > 0, "SIGHUP did not switch speculation back on");
    return `drafted 0 after the first reload, ${on.speculative.drafted} after the second`;
});

await check("a port already in use is found before the models load: exit 1, one line naming the address", async () => {
    const s = await startServer(["-m", target]);
    const port = new URL(s.url).port;
    const t0 = Date.now();
    const busy = runSpecd(["serve", "--port", port, "-m", target, "--model-draft", draft]);
    const line = oneErrorLine(busy, "busy port");
    expect(line.includes(`cannot listen on 127.0.0.1:${port}`), `the line does not name the address: ${line}`);
    expect(!/loading models/.test(busy.stderr), "the models were loaded before the port was checked");
    s.proc.kill("SIGTERM");
    await s.exited;
    return `${line} (${Date.now() - t0} ms)`;
});

await check("a draft that cannot load: plain mode with a loud warning; with --require-draft exit 1, one line", async () => {
    const cut = path.join(scratch, "draft-truncated.gguf");
    const bytes = fs.readFileSync(draft);
    fs.writeFileSync(cut, bytes.subarray(0, Math.floor(bytes.length / 2)));
    const s = await startServer(["-m", target, "--model-draft", cut]);
    expect(/WARNING: draft model .* not loaded .*speculative decoding is OFF/.test(s.stderr), `no loud warning: ${s.stderr.slice(0, 300)}`);
    expect(/DRAFT MODEL NOT LOADED/.test(s.stderr), "no error-level log line");
    expect(/speculative decoding off/.test(s.stdout), `the banner does not say plain mode: ${s.stdout}`);
    const r = await complete(s);
    expect(r.speculative.drafted === 0 && r.choices[0].text.length > 0, "plain mode did not serve plainly");
    expect((await request(s, "GET", "/health")).json().speculation === false, "/health reports speculation on");
    s.proc.kill("SIGTERM");
    expect((await s.exited).code === 0, "plain-mode server did not exit 0");

    const refused = runSpecd(["serve", "--port", "0", "-m", target, "--model-draft", cut, "--require-draft"]);
    const line = oneErrorLine(refused, "--require-draft");
    expect(/draft/.test(line) && /require_draft/.test(line), `the line does not name the draft: ${line}`);
    const viaEnv = runSpecd(["serve", "--port", "0", "-m", target, "--model-draft", cut], { SPECD_REQUIRE_DRAFT: "true" });
    oneErrorLine(viaEnv, "SPECD_REQUIRE_DRAFT=true");
    return line.slice(0, 110);
});

await check("a target with a wrong .sha256, a wrong configured hash or a truncated file is refused: exit 1, one line", async () => {
    const dir = fs.mkdtempSync(path.join(scratch, "target-"));
    const linked = path.join(dir, "model.gguf");
    fs.symlinkSync(path.resolve(target), linked);
    fs.writeFileSync(linked + ".sha256", `${"0".repeat(64)}  model.gguf\n`);
    const mismatch = oneErrorLine(runSpecd(["serve", "--port", "0", "-m", linked]), "wrong sidecar");
    expect(/sha256/.test(mismatch) && /model\.gguf/.test(mismatch), `mismatch line: ${mismatch}`);

    const configured = oneErrorLine(runSpecd(["serve", "--port", "0", "-m", target], { MAIN_MODEL_SHA256: "ab".repeat(32) }), "configured hash");
    expect(/sha256/.test(configured) && /configured/.test(configured), `configured-hash line: ${configured}`);

    const cut = path.join(dir, "cut.gguf");
    const bytes = fs.readFileSync(draft);
    fs.writeFileSync(cut, bytes.subarray(0, bytes.length - 4096));
    const truncated = oneErrorLine(runSpecd(["serve", "--port", "0", "-m", cut]), "truncated target");
    expect(/truncated|incomplete/.test(truncated), `truncated line: ${truncated}`);
    return `${mismatch.slice(14, 90)}… / ${truncated.slice(14, 90)}…`;
});

await check("specd verify --write, then verify and serve check against the written .sha256", async () => {
    const dir = fs.mkdtempSync(path.join(scratch, "verify-"));
    const copy = path.join(dir, "draft.gguf");
    fs.copyFileSync(draft, copy);
    const expected = crypto.createHash("sha256").update(fs.readFileSync(copy)).digest("hex");
    const written = runSpecd(["verify", copy, "--write"]);
    expect(written.code === 0, `verify --write: exit ${written.code} ${written.stderr}`);
    expect(fs.readFileSync(copy + ".sha256", "utf8") === `${expected}  draft.gguf\n`, "the .sha256 is not sha256sum's line");
    const again = runSpecd(["verify", copy]);
    expect(again.code === 0 && again.stdout.includes(`sha256 ${expected} matches`), `verify against the sidecar: ${again.stdout}`);
    const fd = fs.openSync(copy, "r+");  // one flipped byte near the end (inside the weights)
    const b = Buffer.alloc(1);
    const at = fs.statSync(copy).size - 100;
    fs.readSync(fd, b, 0, 1, at);
    b[0] ^= 0xff;
    fs.writeSync(fd, b, 0, 1, at);
    fs.closeSync(fd);
    const flipped = oneErrorLine(runSpecd(["verify", copy]), "verify of a modified file");
    expect(/sha256/.test(flipped), `flipped line: ${flipped}`);
    oneErrorLine(runSpecd(["serve", "--port", "0", "-m", copy]), "serve of a modified file");
    return flipped.slice(14, 100);
});

await check("specd config: for every key, file < environment < flag, with each source; secrets hidden", async () => {
    const fields = JSON.parse(runSpecd(["config", "--json", "-m", target]).stdout);
    const values = {};  // key -> [file, env, flag] as text
    for (const f of fields) {
        const def = f.value;
        let v;
        if (f.kind === "boolean") v = def === "true" ? ["false", "true", "false"] : ["true", "false", "true"];
        else if (f.kind === "integer") v = [f.min, f.min + 1, f.min + 2].map(String).map((x) => (x === def ? String(f.max) : x));
        else if (f.kind === "number") v = [0.2, 0.4, 0.6].map((k) => String(Number((f.min + (f.max - f.min) * k).toPrecision(12))));
        else if (f.kind === "path") v = ["file", "env", "flag"].map((w) => { const p = path.join(scratch, `${f.key}-${w}.gguf`); fs.writeFileSync(p, "x"); return p; });
        else if (f.kind === "choice") { const c = f.choices.filter((x) => x !== def); v = [c[0], c[1 % c.length], c[2 % c.length]]; }
        else if (f.kind === "sha256") v = ["a", "b", "c"].map((x) => x.repeat(64));
        else v = ["file", "env", "flag"].map((w) => `${f.key}-${w}`);
        if (f.key === "ngram_min") v = ["2", "3", "4"];
        if (f.key === "ngram_max") v = ["5", "6", "7"];
        if (f.key.endsWith("sha256")) v = [def, def, def].map(() => "");  // a hash would be checked against the model copies; see below
        values[f.key] = v;
    }
    const file = path.join(scratch, "all.json");
    fs.writeFileSync(file, JSON.stringify(Object.fromEntries(fields.map((f) => {
        const t = values[f.key][0];
        return [f.key, f.kind === "boolean" ? t === "true" : f.kind === "integer" || f.kind === "number" ? Number(t) : t];
    }))));
    const env = Object.fromEntries(fields.map((f) => [f.env, values[f.key][1]]));
    const flags = [];
    for (const f of fields) {
        const want = values[f.key][2];
        const names = f.flag.split(",").filter((n) => n.startsWith("--"));
        if (f.kind === "boolean") {
            const chosen = names.find((n) => n.endsWith(`{${want}}`));
            expect(chosen, `no flag of ${f.key} sets ${want}`);
            flags.push(chosen.replace(/\{.*\}$/, ""));
        } else flags.push(names[0], want);
    }
    const show = (extraEnv, extraFlags) => {
        const r = runSpecd(["config", "--json", "--config", file, ...extraFlags], extraEnv);
        expect(r.code === 0, `specd config exit ${r.code}: ${r.stderr}`);
        return Object.fromEntries(JSON.parse(r.stdout).map((f) => [f.key, f]));
    };
    const stages = [[{}, [], 0, () => `file ${file}`], [env, [], 1, (f) => `env ${f.env}`], [env, flags, 2, () => "flag "]];
    let checked = 0;
    for (const [e, fl, i, source] of stages) {
        const got = show(e, fl);
        for (const f of fields) {
            const want = values[f.key][i];
            if (want === "") continue;  // the sha256 keys: set empty, so the source does not move
            const g = got[f.key];
            expect(f.secret ? g.value === "***" : g.value === want, `${f.key} stage ${i}: value ${g.value}, expected ${want}`);
            expect(g.source.startsWith(source(f)), `${f.key} stage ${i}: source ${g.source}, expected ${source(f)}`);
            checked++;
        }
    }
    // The sha256 keys through all three layers, against a model they describe.
    const sum = crypto.createHash("sha256").update(fs.readFileSync(draft)).digest("hex");
    const hashFile = path.join(scratch, "hash.json");
    fs.writeFileSync(hashFile, JSON.stringify({ model_sha256: "1".repeat(64), model_draft_sha256: "2".repeat(64) }));
    const h = runSpecd(["config", "--json", "--config", hashFile, "-m", draft, "--model-sha256", sum], { MAIN_MODEL_SHA256: "3".repeat(64),
                                                                                                   DRAFT_MODEL_SHA256: sum });
    const hs = Object.fromEntries(JSON.parse(h.stdout).map((f) => [f.key, f]));
    expect(hs.model_sha256.value === sum && hs.model_sha256.source.startsWith("flag"), "model_sha256 flag did not win");
    expect(hs.model_draft_sha256.value === sum && hs.model_draft_sha256.source === "env DRAFT_MODEL_SHA256", "draft sha256 env did not win");
    const table = runSpecd(["config", "--config", file], env).stdout;
    expect(!table.includes("api_key-env") && !table.includes("admin_key-env") && table.includes("***"), "a secret is shown by specd config");
    return `${checked + 2} (key, layer) pairs`;
});

await check("bad values stop specd config and specd serve: exit 1 and one line naming key, value and what is allowed", async () => {
    const cases = [
        [["config", "-m", target], { MAX_DRAFT_TOKENS: "99" }, /draft_max = 99 \(from env MAX_DRAFT_TOKENS\): must be an integer in 0\.\.64/],
        [["serve", "-m", target], { KV_CACHE_RATIO: "1.5" }, /kv_cache_ratio = 1\.5 .*a number in 0\.01\.\.1/],
        [["serve", "-m", target, "--port", "http"], {}, /port = http \(from flag --port\)/],
        [["serve", "-m", target], { ENABLE_SPECULATIVE_DECODING: "maybe" }, /speculative = maybe .*true or false/],
        [["serve", "-m", target], { SPECD_LOG_FORMAT: "yaml" }, /log_format = yaml .*one of text, json/],
        [["serve", "-m", path.join(scratch, "absent.gguf")], {}, /model = .*absent\.gguf \(from flag .*\): no such file/],
        [["serve"], { MAIN_MODEL_PATH: target, DRAFT_MODEL_PATH: "/nope/draft.gguf" }, /model_draft = \/nope\/draft\.gguf \(from env DRAFT_MODEL_PATH\): no such file/],
        [["serve", "-m", target], { SPECD_PROT: "9000" }, /SPECD_PROT is not a setting \(did you mean SPECD_PORT\?/],
        [["serve", "-m", target, "--model-sha256", "xyz"], {}, /model_sha256 = xyz .*64 hex digits/],
        [["serve"], {}, /model is required/],
    ];
    const badFile = path.join(scratch, "bad.json");
    fs.writeFileSync(badFile, JSON.stringify({ model: target, max_sesions: 4 }));
    cases.push([["serve", "--config", badFile], {}, /unknown key "max_sesions"/]);
    const typed = path.join(scratch, "typed.json");
    fs.writeFileSync(typed, JSON.stringify({ model: target, port: "eighty" }));
    cases.push([["serve", "--config", typed], {}, /port = eighty \(from file .*typed\.json\): must be an integer in 0\.\.65535/]);
    for (const [args, env, re] of cases) {
        const line = oneErrorLine(runSpecd(args, env), args.join(" "));
        expect(re.test(line), `"${line}" does not match ${re}`);
    }
    return `${cases.length} cases`;
});

await check("JSON logs: every stderr line is one object; one request-done summary per request with its id and figures", async () => {
    const s = await startServer(["-m", target, "--model-draft", draft, "--log-format", "json"]);
    const r = await complete(s, { max_tokens: 16 });
    await wsGenerations(s, ["ws-7"], { prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
    s.proc.kill("SIGTERM");
    expect((await s.exited).code === 0, "did not exit 0");
    const lines = s.stderr.trim().split("\n");
    const objects = lines.map((l) => { try { return JSON.parse(l); } catch { throw new Error(`not one JSON object: ${l}`); } });
    for (const o of objects) expect(o.time && o.level && o.msg, `missing time/level/msg: ${JSON.stringify(o)}`);
    const done = objects.filter((o) => o.msg === "request done");
    expect(done.length === 2, `${done.length} request-done lines for 2 requests`);
    const http1 = done.find((o) => o.request_id === r.id);
    expect(http1, `no summary with request_id ${r.id}`);
    for (const k of ["prompt_tokens", "completion_tokens", "drafted", "accepted", "acceptance_rate", "tokens_per_s", "ttft_ms"])
        expect(typeof http1[k] === "number", `summary lacks ${k}`);
    expect(http1.completion_tokens === 16 && http1.drafted === r.speculative.drafted && http1.accepted === r.speculative.accepted,
           "the summary's figures differ from the response's");
    expect(done.some((o) => o.request_id.endsWith("/ws-7") && o.transport === "ws"), "no summary for the WebSocket request");
    return `${lines.length} lines, summary ${JSON.stringify(http1).slice(0, 120)}…`;
});

await check("a window of low acceptance logs a warning and counts in /metrics; the threshold is honoured", async () => {
    // The n-gram drafter (no draft model) on a story is rejected often: with
    // the threshold at 1.0 and a window of one drafted token, any request
    // that drafted and had one rejection ends a low window.
    const s = await startServer(["-m", target, "--low-acceptance-rate", "1.0", "--low-acceptance-window", "1", "--log-format", "json"]);
    let windows = 0, rejected = false;
    for (let i = 0; i < 5 && !rejected; i++) {
        const r = await complete(s, { max_tokens: 48, prompt: ["Once upon a time", "Lily and Ben", "The sun was hot", "Max the dog", "Anna saw"][i] });
        rejected = r.speculative.drafted > r.speculative.accepted;
        windows += rejected ? 1 : 0;
    }
    expect(rejected, "the n-gram drafter never had a rejection in 5 requests");
    const metric = (await request(s, "GET", "/metrics")).text.match(/^specd_spec_low_acceptance_windows_total (\d+)/m);
    expect(metric && Number(metric[1]) >= windows, `metric: ${metric && metric[0]}`);
    const warning = s.stderr.split("\n").filter((l) => l).map((l) => JSON.parse(l)).find((o) => /low speculative acceptance/.test(o.msg));
    expect(warning && warning.level.startsWith("warn") && warning.acceptance_rate < 1 && warning.threshold === 1, `warning: ${JSON.stringify(warning)}`);

    // At threshold 0 no window is low.
    const quiet = await startServer(["-m", target, "--low-acceptance-rate", "0", "--low-acceptance-window", "1"]);
    await complete(quiet, { max_tokens: 48 });
    expect(!/low speculative acceptance/.test(quiet.stderr), "a warning at threshold 0");
    return `warning ${JSON.stringify(warning).slice(0, 140)}`;
});

fs.rmSync(scratch, { recursive: true, force: true });
if (failures) {
    console.log(`FAIL: ${failures} check(s) failed`);
    process.exit(1);
}
console.log("PASS");
