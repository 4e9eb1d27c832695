// llama.cpp (node-llama-cpp's prebuilt CPU binary) and specd on the same GGUF
// files, measured side by side in one run: pp128 and tg128 as llama-bench
// defines them, and greedy speculative decoding with a draft model.
// A benchmark, never a test: run it through tools/bench-llama-cpp.sh.
//
//   node bench_llama_cpp.mjs SPECD_BINARY MODELS_DIR THREADS REPETITIONS [FILE.gguf ...]
//
// With no FILE: stories15M f32/q8_0/q4_0 from MODELS_DIR, and speculation.
// With FILEs: pp128 and tg128 of each file, and the bytes per second that
// tg128 reads (the file's size times tokens/s: a decode step reads every
// weight once), so that files of different shapes compare.
//
// llama.cpp's figures go through node-llama-cpp's JavaScript layer, which
// adds a little per generated token (an async iterator step); its
// speculative figure uses node-llama-cpp's DraftSequenceTokenPredictor (a
// draft sequence on a second context), not llama.cpp's llama-speculative.
import {execFileSync} from "node:child_process";
import {statSync} from "node:fs";
import {basename} from "node:path";
import {getLlama, LlamaLogLevel, DraftSequenceTokenPredictor} from "node-llama-cpp";

const [specd, models, threadsArg = "2", repsArg = "5", ...files] = process.argv.slice(2);
const threads = Number(threadsArg), reps = Number(repsArg);
if (!specd || !models || !(threads >= 1) || !(reps >= 1)) {
    console.error("usage: bench_llama_cpp.mjs SPECD_BINARY MODELS_DIR THREADS REPETITIONS");
    process.exit(2);
}
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };
const now = () => Number(process.hrtime.bigint()) / 1e6;

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});

async function llamaCppFigures(path) {
    const model = await llama.loadModel({modelPath: path});
    const context = await model.createContext({contextSize: 256, threads, batchSize: 512});
    // pp128: 128 prompt tokens in one batch, from an empty cache.
    const prompt = [model.tokens.bos, ...Array.from({length: 127}, (_, i) => 1000 + i)];
    const pp = [], tg = [];
    for (let r = 0; r <= reps; ++r) {  // run 0 is the warm-up
        const seq = context.getSequence();
        let t0 = now();
        await seq.evaluateWithoutGeneratingNewTokens(prompt);
        const ppMs = now() - t0;
        seq.dispose();
        // tg128: 128 tokens one at a time after BOS.
        const seq2 = context.getSequence();
        let n = 0;
        t0 = now();
        for await (const _ of seq2.evaluate([model.tokens.bos], {temperature: 0})) { if (++n >= 128) break; }
        const tgMs = now() - t0;
        seq2.dispose();
        if (r > 0) { pp.push(128000 / ppMs); tg.push(128000 / tgMs); }
    }
    await context.dispose();
    await model.dispose();
    return {pp: median(pp), tg: median(tg)};
}

async function llamaCppSpeculative(targetType, draftType, prompt, n) {
    const target = await llama.loadModel({modelPath: `${models}/stories15M-${targetType}.gguf`});
    const draft = await llama.loadModel({modelPath: `${models}/stories15M-${draftType}.gguf`});
    const draftContext = await draft.createContext({contextSize: 256, threads});
    const targetContext = await target.createContext({contextSize: 256, threads});
    const ids = [target.tokens.bos, ...Array.from(target.tokenize(prompt))];
    const plain = [], spec = [];
    for (let r = 0; r <= reps; ++r) {
        for (const useDraft of [false, true]) {
            const draftSequence = useDraft ? draftContext.getSequence() : null;
            const seq = useDraft
                ? targetContext.getSequence({tokenPredictor: new DraftSequenceTokenPredictor(draftSequence, {minTokens: 0, maxTokens: 8})})
                : targetContext.getSequence();
            let got = 0;
            const t0 = now();
            for await (const _ of seq.evaluate(ids, {temperature: 0})) { if (++got >= n) break; }
            const tps = 1000 * got / (now() - t0);
            seq.dispose();
            draftSequence?.dispose();
            if (r > 0) (useDraft ? spec : plain).push(tps);
        }
    }
    await targetContext.dispose();
    await draftContext.dispose();
    await target.dispose();
    await draft.dispose();
    return {plain: median(plain), spec: median(spec)};
}

function specdFigures(path) {
    const out = execFileSync(specd, ["bench", "-m", path, "-t", String(threads), "-r", String(reps), "--json"],
                             {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
    const rows = JSON.parse(out);
    return {pp: rows.find((r) => r.test === "pp128").median, tg: rows.find((r) => r.test === "tg128").median};
}

function specdSpeculative(prompt, n) {
    const run = (extra) => {
        const v = [];
        for (let r = 0; r <= reps; ++r) {
            const out = execFileSync(specd, ["generate", "-m", `${models}/stories15M-f32.gguf`, ...extra, "-p", prompt, "-n", String(n), "--temp", "0",
                                             "-t", String(threads), "--json"], {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
            if (r > 0) v.push(JSON.parse(out).tokens_per_s);
        }
        return median(v);
    };
    return {plain: run([]), spec: run(["-md", `${models}/stories15M-q8_0.gguf`, "--draft-max", "8"])};
}

console.log(`llama.cpp (node-llama-cpp) vs specd, ${threads} threads, median of ${reps} runs after a warm-up, same GGUF files, one run\n`);
if (files.length) {
    console.log("| model | GiB | test | llama.cpp t/s | specd t/s | specd / llama.cpp | llama.cpp GB/s | specd GB/s |");
    console.log("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for (const path of files) {
        const bytes = statSync(path).size;
        const a = await llamaCppFigures(path), b = specdFigures(path);
        for (const test of ["pp", "tg"]) {
            const gbs = (tps) => test === "tg" ? (bytes * tps / 1e9).toFixed(1) : "";
            console.log(`| ${basename(path, ".gguf")} | ${(bytes / 2 ** 30).toFixed(2)} | ${test}128 | ${a[test].toFixed(1)} | ${b[test].toFixed(1)} | ` +
                        `${(b[test] / a[test]).toFixed(2)}x | ${gbs(a[test])} | ${gbs(b[test])} |`);
        }
    }
    process.exit(0);
}
console.log("| model | test | llama.cpp t/s | specd t/s | specd / llama.cpp |");
console.log("| --- | --- | ---: | ---: | ---: |");
for (const type of ["f32", "q8_0", "q4_0"]) {
    const a = await llamaCppFigures(`${models}/stories15M-${type}.gguf`), b = specdFigures(`${models}/stories15M-${type}.gguf`);
    for (const test of ["pp", "tg"])
        console.log(`| stories15M ${type} | ${test}128 | ${a[test].toFixed(0)} | ${b[test].toFixed(0)} | ${(b[test] / a[test]).toFixed(2)}x |`);
}
const prompt = "Once upon a time", n = 200;
const a = await llamaCppSpeculative("f32", "q8_0", prompt, n), b = specdSpeculative(prompt, n);
console.log(`\nGreedy, ${n} tokens from "${prompt}", f32 target, q8_0 draft, draft-max 8:\n`);
console.log("| engine | plain t/s | speculative t/s | speedup |");
console.log("| --- | ---: | ---: | ---: |");
console.log(`| llama.cpp (node-llama-cpp DraftSequenceTokenPredictor) | ${a.plain.toFixed(0)} | ${a.spec.toFixed(0)} | ${(a.spec / a.plain).toFixed(2)}x |`);
console.log(`| specd generate -md | ${b.plain.toFixed(0)} | ${b.spec.toFixed(0)} | ${(b.spec / b.plain).toFixed(2)}x |`);
console.log(`\nspecd speculative / llama.cpp speculative: ${(b.spec / a.spec).toFixed(2)}x`);
