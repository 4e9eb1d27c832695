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
// better setting on small drafts), REPS runs each, medians.
import {execFileSync} from "node:child_process";
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

function llamaBench(path) {
    const rows = JSON.parse(run(`${llamaBin}/llama-bench`, ["-m", path, "-t", String(threads), "-p", "512", "-n", "128", "-r", String(reps), "-o", "json"]));
    const pick = (pp) => median(rows.find((r) => (pp ? r.n_prompt > 0 && r.n_gen === 0 : r.n_gen > 0 && r.n_prompt === 0)).samples_ts);
    return {pp: pick(true), tg: pick(false)};
}

function specdBench(path) {
    const rows = JSON.parse(run(specd, ["bench", "-m", path, "-t", String(threads), "-p", "512", "-n", "128", "-r", String(reps), "--json"]));
    return {pp: rows.find((r) => r.test === "pp512").median, tg: rows.find((r) => r.test === "tg128").median};
}

console.log(`llama.cpp (native build) vs specd, ${threads} threads, medians of ${reps} runs, same GGUF files, one run\n`);
if (files.length) {
    console.log("| model | GiB | test | llama.cpp t/s | specd t/s | specd / llama.cpp | llama.cpp GB/s | specd GB/s |");
    console.log("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for (const path of files) {
        const bytes = statSync(path).size;
        const a = llamaBench(path), b = specdBench(path);
        for (const [test, name] of [["pp", "pp512"], ["tg", "tg128"]]) {
            const gbs = (tps) => (test === "tg" ? (bytes * tps / 1e9).toFixed(1) : "");
            console.log(`| ${basename(path, ".gguf")} | ${(bytes / 2 ** 30).toFixed(2)} | ${name} | ${a[test].toFixed(1)} | ${b[test].toFixed(1)} | ` +
                        `${(b[test] / a[test]).toFixed(2)}x | ${gbs(a[test])} | ${gbs(b[test])} |`);
        }
    }
}

if (spec) {
    const prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    const n = 256;
    const llamaSpec = (draftMax) => {
        const v = [], acc = [];
        for (let r = 0; r < reps; ++r) {
            const argv = ["-m", spec.target, "-md", spec.draft, "-p", prompt, "-n", String(n), "-t", String(threads), "-td", String(threads),
                          "--draft-max", String(draftMax), "--spec-draft-n-min", "0", "--temp", "0", "-c", "1024", "--no-warmup"];
            let out;
            try { out = execFileSync(`${llamaBin}/llama-speculative-simple`, argv, {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]}); }
            catch (e) { out = `${e.stdout}${e.stderr}`; }
            const speed = /decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t\/s/.exec(out);
            const accept = /accept\s+=\s+([\d.]+)%/.exec(out);
            if (!speed) throw new Error(`llama-speculative-simple printed no speed:\n${out.slice(-2000)}`);
            v.push(Number(speed[1]));
            if (accept) acc.push(Number(accept[1]) / 100);
        }
        return {tps: median(v), accept: acc.length ? median(acc) : NaN};
    };
    const specdGen = (extra) => {
        const v = [], acc = [];
        for (let r = 0; r < reps; ++r) {
            const o = JSON.parse(run(specd, ["generate", "-m", spec.target, ...extra, "-p", prompt, "-n", String(n), "--temp", "0", "-t", String(threads), "--json"]));
            v.push(o.tokens_per_s);
            if (o.acceptance_rate !== undefined) acc.push(o.acceptance_rate);
        }
        return {tps: median(v), accept: acc.length ? median(acc) : NaN};
    };
    const llamaPlain = llamaBench(spec.target).tg;
    const l3 = llamaSpec(3), l8 = llamaSpec(8);
    const sPlain = specdGen([]), s8 = specdGen(["-md", spec.draft, "--draft-max", "8"]);
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
