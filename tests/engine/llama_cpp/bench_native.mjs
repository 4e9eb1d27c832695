// llama.cpp built natively (tools/build-llama-cpp-native.sh: llama-bench,
// llama-speculative-simple) and specd on the same GGUF files, side by side
// in one run, each pair measured back to back. A benchmark, never a test:
// run it through tools/bench-llama-cpp.sh --native.
//
//   node bench_native.mjs SPECD LLAMA_BIN THREADS REPS FILE.gguf... [--spec TARGET DRAFT]
//
// Per file: pp512 and tg128 (llama-bench's definitions; specd bench -p 512
// -n 128), medians of REPS, and the bytes per second tg128 reads (file size
// times tokens/s). With --spec: greedy decoding of 256 tokens from a story
// prompt, plain and with the draft (draft-max 8; llama.cpp also at 3, its
// better setting on small drafts), REPS runs each, medians. Every run is
// one repetition and the engines take turns, run by run: on a shared
// machine the memory bandwidth drifts by up to 2x over minutes, and
// back-to-back blocks of runs would measure the drift, not the engines.
import {execFileSync, spawnSync} from "node:child_process";
import {statSync} from "node:fs";
import {basename} from "node:path";

const args = process.argv.slice(2);
const [specd, llamaBin, threadsArg, repsArg] = args;
const threads = Number(threadsArg), reps = Number(repsArg);
const specAt = args.indexOf("--spec");
const files = args.slice(4, specAt < 0 ? undefined : specAt);
const spec = specAt < 0 ? null : {target: args[specAt + 1], draft: args[specAt + 2]};
if (!specd || !llamaBin || !(threads >= 1) || !(reps >= 1) || (spec && !(spec.target && spec.draft))) {
    console.error("usage: bench_native.mjs SPECD LLAMA_BIN THREADS REPS FILE.gguf... [--spec TARGET DRAFT]");
    process.exit(2);
}
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };
const run = (bin, argv) => execFileSync(bin, argv, {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20});

// One repetition of pp512 (pp = true) or tg128 by each engine, t/s.
function llamaBench(path, pp) {
    const rows = JSON.parse(run(`${llamaBin}/llama-bench`, ["-m", path, "-t", String(threads), "-p", pp ? "512" : "0",
                                                            "-n", pp ? "0" : "128", "-r", "1", "-o", "json"]));
    return rows[0].avg_ts;
}

function specdBench(path, pp) {
    const rows = JSON.parse(run(specd, ["bench", "-m", path, "-t", String(threads), "-p", pp ? "512" : "0", "-n", pp ? "0" : "128",
                                        "-r", "1", "--json"]));
    return rows.find((r) => r.test === (pp ? "pp512" : "tg128")).median;
}

// DRAM read bandwidth with THREADS threads now (specd bench --bandwidth: a
// 1 GiB buffer streamed, median of 5), bytes/s.
function bandwidth(path) {
    const out = run(specd, ["bench", "-m", path, "-t", String(threads), "-p", "0", "-n", "1", "-r", "1", "--bandwidth"]);
    const m = /DRAM read bandwidth, \d+ threads \([^)]*\): ([\d.]+) GB\/s/.exec(out);
    if (!m) throw new Error(`specd bench --bandwidth printed no bandwidth:\n${out}`);
    return Number(m[1]) * 1e9;
}

// REPS turns of each engine, alternating (tg: and the bandwidth, so that
// each tg figure has the bound of its own minutes); medians.
function alternate(path, pp) {
    const a = [], b = [], bw = [];
    for (let r = 0; r < reps; ++r) {
        if (!pp) bw.push(bandwidth(path));
        a.push(llamaBench(path, pp));
        b.push(specdBench(path, pp));
    }
    return [median(a), median(b), pp ? NaN : median(bw)];
}

console.log(`llama.cpp (native build) vs specd, ${threads} threads, medians of ${reps} runs, same GGUF files, one run\n`);
if (files.length) {
    console.log("tg rows: GB/s = file bytes x tokens/s (every weight is read once per token); bound = DRAM read bandwidth");
    console.log("measured in the same rounds (specd bench --bandwidth), share = GB/s over it.\n");
    console.log("| model | GiB | test | llama.cpp t/s | specd t/s | specd / llama.cpp | llama.cpp GB/s | specd GB/s | bound GB/s | llama.cpp share | specd share |");
    console.log("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const path of files) {
        const bytes = statSync(path).size;
        const [app, bpp] = alternate(path, true), [atg, btg, bw] = alternate(path, false);
        const a = {pp: app, tg: atg}, b = {pp: bpp, tg: btg};
        for (const [test, name] of [["pp", "pp512"], ["tg", "tg128"]]) {
            const tg = test === "tg";
            const gbs = (tps) => (tg ? (bytes * tps / 1e9).toFixed(1) : "");
            const share = (tps) => (tg ? `${(100 * bytes * tps / bw).toFixed(0)}%` : "");
            console.log(`| ${basename(path, ".gguf")} | ${(bytes / 2 ** 30).toFixed(2)} | ${name} | ${a[test].toFixed(1)} | ${b[test].toFixed(1)} | ` +
                        `${(b[test] / a[test]).toFixed(2)}x | ${gbs(a[test])} | ${gbs(b[test])} | ${tg ? (bw / 1e9).toFixed(1) : ""} | ` +
                        `${share(a[test])} | ${share(b[test])} |`);
        }
    }
}

if (spec) {
    const prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    const n = 256;
    // One run of each setting, REPS turns, alternating.
    const llamaSpec = (draftMax) => {
        const argv = ["-m", spec.target, "-md", spec.draft, "-p", prompt, "-n", String(n), "-t", String(threads), "-td", String(threads),
                      "--spec-type", "draft-simple", "--spec-draft-n-max", String(draftMax), "--spec-draft-n-min", "0", "--temp", "0", "-c", "1024"];
        // Its timings and acceptance go to stderr, the text to stdout.
        const r = spawnSync(`${llamaBin}/llama-speculative-simple`, argv, {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20});
        const out = `${r.stdout}${r.stderr}`;
        const speed = /decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t\/s/.exec(out);
        const accept = /accept\s+=\s+([\d.]+)%/.exec(out);
        if (!speed) throw new Error(`llama-speculative-simple printed no speed:\n${out.slice(-2000)}`);
        return {tps: Number(speed[1]), accept: accept ? Number(accept[1]) / 100 : NaN};
    };
    const specdGen = (extra) => {
        const o = JSON.parse(run(specd, ["generate", "-m", spec.target, ...extra, "-p", prompt, "-n", String(n), "--temp", "0", "-t", String(threads), "--json"]));
        return {tps: o.tokens_per_s, accept: o.acceptance_rate ?? NaN};
    };
    const settings = {
        llamaPlain: () => ({tps: llamaBench(spec.target, false), accept: NaN}),
        l3: () => llamaSpec(3), l8: () => llamaSpec(8),
        sPlain: () => specdGen([]), s8: () => specdGen(["-md", spec.draft, "--draft-max", "8"]),
    };
    const samples = Object.fromEntries(Object.keys(settings).map((k) => [k, []]));
    for (let r = 0; r < reps; ++r) for (const [k, f] of Object.entries(settings)) samples[k].push(f());
    const med = (k) => ({tps: median(samples[k].map((x) => x.tps)), accept: median(samples[k].map((x) => x.accept))});
    const llamaPlain = med("llamaPlain").tps, l3 = med("l3"), l8 = med("l8"), sPlain = med("sPlain"), s8 = med("s8");
    const lBest = Math.max(l3.tps, l8.tps);
    console.log(`\nGreedy, ${n} tokens, target ${basename(spec.target)}, draft ${basename(spec.draft)}:\n`);
    console.log("| engine | setting | t/s | acceptance | vs its plain |");
    console.log("| --- | --- | ---: | ---: | ---: |");
    console.log(`| llama.cpp | plain (llama-bench tg128) | ${llamaPlain.toFixed(1)} | | 1.00x |`);
    console.log(`| llama.cpp | llama-speculative-simple, draft-max 3 | ${l3.tps.toFixed(1)} | ${l3.accept.toFixed(2)} | ${(l3.tps / llamaPlain).toFixed(2)}x |`);
    console.log(`| llama.cpp | llama-speculative-simple, draft-max 8 | ${l8.tps.toFixed(1)} | ${l8.accept.toFixed(2)} | ${(l8.tps / llamaPlain).toFixed(2)}x |`);
    console.log(`| specd | plain (generate) | ${sPlain.tps.toFixed(1)} | | 1.00x |`);
    console.log(`| specd | generate -md, draft-max 8 | ${s8.tps.toFixed(1)} | ${s8.accept.toFixed(2)} | ${(s8.tps / sPlain.tps).toFixed(2)}x |`);
    console.log(`\nspecd speculative / llama.cpp's best speculative: ${(s8.tps / lBest).toFixed(2)}x`);
}
