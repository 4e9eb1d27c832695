// specd's tokenizer against llama.cpp's, live (node-llama-cpp's prebuilt
// CPU build loads each vocabulary-only GGUF with vocabOnly):
//   - chat turns with special tokens (parse_special) give the same ids;
//   - every pre-tokenizer family (qwen2's vocabulary with each name) gives
//     the same ids on the hard strings;
//   - hard strings (contractions in all cases, digit runs, whitespace runs
//     at every boundary, CJK, emoji and ZWJ sequences, combining marks,
//     Khmer, RTL, control characters; not NUL, which no argument can hold,
//     nor invalid UTF-8, which no JS string can) give the same ids on every
//     vocabulary;
//   - 1 MiB of mixed text (every input of llama.cpp's test vectors, over and
//     over) gives the same ids, and both tokenizers' times are printed in
//     this one run.
//
//   node tokenizer_live.test.mjs SPECD_BINARY [VOCAB_DIR]
//
// VOCAB_DIR: tools/fetch-llama-cpp-vocab.sh's output (default: its cache
// directory, or $SPECD_LLAMA_VOCAB_DIR). Exit 77 (skipped) without it.
import {execFileSync, spawnSync} from "node:child_process";
import {existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync} from "node:fs";
import {homedir, tmpdir} from "node:os";
import {join} from "node:path";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [specd, dirArg] = process.argv.slice(2);
if (!specd) {
    console.error("usage: tokenizer_live.test.mjs SPECD_BINARY [VOCAB_DIR]");
    process.exit(2);
}
const cacheRoot = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
const dir = dirArg || process.env.SPECD_LLAMA_VOCAB_DIR || join(cacheRoot, "specd", "llama-cpp-vocab-3.22.1");
if (!existsSync(join(dir, ".complete"))) {
    console.log(`skipped: llama.cpp vocabulary files not fetched (${dir}; run tools/fetch-llama-cpp-vocab.sh)`);
    process.exit(77);
}

const vocabs = ["llama-bpe", "qwen2", "qwen35", "gpt-2", "deepseek-coder", "deepseek-llm", "starcoder", "refact",
                "command-r", "falcon", "mpt", "llama-spm", "phi-3", "gemma-4"];
const hard = [
    "Hello world", " Hello World!", "HELLO'S 'S 'S'll 'LL 'Ll I'M we'Re you'VE they'D", "don't won't can't shouldn't",
    "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 0x1F2E", "٣٤٥ ๑๒๓ ⅫⅣ ²³",
    "a  b   c    d\t\te\n\nf\r\n\r\ng \n \n h", "   leading", "trailing   ", "\n", "\n\n\n", " \n", "\t \t ",
    "tab\tseparated\tvalues\n", "x\u00a0y\u2003z\u3000w", "line\u2028sep\u2029para\u0085nel",
    "我想在apple工作1314151天～", "日本語のテキスト、カタカナ。", "한국어 문장입니다.", "中文，标点！“引号”",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 👨‍👩‍👧‍👦 🏳️‍🌈 🇩🇪", "e\u0301 n\u0303 a\u0308\u0304 ḁ̴̛̥",
    "កាន់តែពិសេសអាចខលចេញ", "нещо на Български", "שלום עולם مرحبا بالعالم", "Ελληνικά: αβγ ΑΒΓ",
    "def f(x):\n    return x**2  # square\n\n\tif x != 0: pass", "<html><body class=\"x\">&amp;</body></html>",
    "```cpp\nint main() { return 0; }\n```", "$$\\int_0^\\infty e^{-x^2} dx$$", "((((((()))))))!!!???...,,,",
    "<|endoftext|> <s></s> <|im_start|>user", "\u0001\u001f\u007f control", "\u0003\u000b\u001e bytes Falcon lacks", "ſ K ǅ Ǆ ǆ ß ẞ İ ı",
    "a".repeat(300), " ".repeat(257) + "x", "9".repeat(100), "\u200b\u200c\u200d\ufeff zero width",
];

// With parse_special: chat turns as the templates write them.
const chats = [
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n  hi  <|im_end|>\n<|im_start|>assistant\n",
    "<|user|>\n  Hello <|end|>\n<|assistant|>\n", "<s> [INST] hi [/INST]</s>", "<bos><start_of_turn>user\nhi<end_of_turn>\n",
    "<|endoftext|><|endoftext|>x<|endoftext|>", "<|fim_prefix|>def f(<|fim_suffix|>)<|fim_middle|>",
];

let failures = 0;
const check = (ok, what) => {
    console.log(`${ok ? "PASS" : "FAIL"}: ${what}`);
    if (!ok) ++failures;
};
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const firstDifference = (a, b) => {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) ++i;
    return i;
};

// specd's ids for several texts in one process: one "[...]" line each.
function specdIds(model, texts, parseSpecial = false) {
    const args = ["tokenize", "-m", model, "--ids", "--no-bos", ...(parseSpecial ? ["--parse-special"] : []),
                  ...texts.map((t) => `--prompt=${t}`)];
    const out = execFileSync(specd, args, {encoding: "utf8", maxBuffer: 1 << 28});
    return out.trim().split("\n").map((line) => JSON.parse(line));
}

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.disabled});

for (const name of vocabs) {
    const path = join(dir, `ggml-vocab-${name}.gguf`);
    let model;
    try {
        model = await llama.loadModel({modelPath: path, vocabOnly: true});
    } catch (e) {
        console.log(`NOTE: llama.cpp of this node-llama-cpp cannot load ${name} (${e.message}); not compared`);
        continue;
    }
    const ours = specdIds(path, hard);
    let equal = 0;
    hard.forEach((text, i) => {
        const theirs = Array.from(model.tokenize(text, false));
        if (same(ours[i], theirs)) {
            ++equal;
        } else {
            check(false, `${name}: ${JSON.stringify(text.slice(0, 60))}: specd ${JSON.stringify(ours[i])} llama.cpp ${JSON.stringify(theirs)}`);
        }
    });
    check(equal === hard.length, `${name}: ${equal}/${hard.length} hard strings give llama.cpp's ids`);
    const oursSpecial = specdIds(path, chats, true);
    let equalSpecial = 0;
    chats.forEach((text, i) => {
        const theirs = Array.from(model.tokenize(text, true));
        if (same(oursSpecial[i], theirs)) {
            ++equalSpecial;
        } else {
            check(false, `${name} parse_special: ${JSON.stringify(text.slice(0, 60))}: specd ${JSON.stringify(oursSpecial[i])} llama.cpp ${JSON.stringify(theirs)}`);
        }
    });
    check(equalSpecial === chats.length,
          `${name}: ${equalSpecial}/${chats.length} chat turns with special tokens give llama.cpp's ids`);
    await model.dispose();
}

// Every pre-tokenizer family on one vocabulary: a copy of qwen2's file with
// tokenizer.ggml.pre set to each name, so both sides run that family's
// regexes on the hard strings.
const GGUF_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8};
function withPreTokenizer(source, pre, target) {
    const buf = readFileSync(source);
    let pos = 24;  // magic, version, tensor count, key count
    const nTensors = buf.readBigUInt64LE(8), nKv = Number(buf.readBigUInt64LE(16));
    if (buf.toString("latin1", 0, 4) !== "GGUF" || nTensors !== 0n) throw new Error(`${source}: not a vocabulary-only GGUF`);
    const readString = () => { const n = Number(buf.readBigUInt64LE(pos)); pos += 8 + n; return buf.toString("utf8", pos - n, pos); };
    const skipValue = (type) => {
        if (type === 8) { readString(); return; }
        if (type === 9) {
            const elementType = buf.readUInt32LE(pos), n = Number(buf.readBigUInt64LE(pos + 4));
            pos += 12;
            for (let i = 0; i < n; ++i) skipValue(elementType);
            return;
        }
        pos += GGUF_SCALAR_SIZE[type];
    };
    const kept = [];
    for (let i = 0; i < nKv; ++i) {
        const start = pos;
        const key = readString();
        skipValue((pos += 4, buf.readUInt32LE(pos - 4)));
        if (key !== "tokenizer.ggml.pre") kept.push(buf.subarray(start, pos));
    }
    const str = (s) => { const b = Buffer.from(s, "utf8"); const n = Buffer.alloc(8); n.writeBigUInt64LE(BigInt(b.length)); return Buffer.concat([n, b]); };
    const type = Buffer.alloc(4);
    type.writeUInt32LE(8);
    kept.push(Buffer.concat([str("tokenizer.ggml.pre"), type, str(pre)]));
    const header = Buffer.from(buf.subarray(0, 24));
    header.writeBigUInt64LE(BigInt(kept.length), 16);
    let out = Buffer.concat([header, ...kept]);
    out = Buffer.concat([out, Buffer.alloc((32 - out.length % 32) % 32)]);
    writeFileSync(target, out);
}
const families = ["default", "llama3", "dbrx", "jais-2", "deepseek-llm", "deepseek-v3", "deepseek-coder", "falcon",
                  "starcoder", "gpt-2", "qwen2", "qwen35", "bloom", "glm4", "viking", "tekken", "gpt-4o",
                  "bailingmoe", "seed-coder", "ufakzeka", "grok-2", "minicpm5", "laguna"];
{
    const scratchPre = mkdtempSync(join(tmpdir(), "specd-pre-"));
    try {
        for (const pre of families) {
            const path = join(scratchPre, `qwen2-as-${pre}.gguf`);
            withPreTokenizer(join(dir, "ggml-vocab-qwen2.gguf"), pre, path);
            let model;
            try {
                model = await llama.loadModel({modelPath: path, vocabOnly: true});
            } catch (e) {
                console.log(`NOTE: llama.cpp of this node-llama-cpp does not know pre-tokenizer ${pre}; not compared`);
                continue;
            }
            const ours = specdIds(path, hard);
            let equal = 0;
            hard.forEach((text, i) => {
                const theirs = Array.from(model.tokenize(text, false));
                if (same(ours[i], theirs)) {
                    ++equal;
                } else {
                    check(false, `pre-tokenizer ${pre}: ${JSON.stringify(text.slice(0, 60))}: specd ${JSON.stringify(ours[i])} llama.cpp ${JSON.stringify(theirs)}`);
                }
            });
            check(equal === hard.length, `pre-tokenizer ${pre} (qwen2's vocabulary): ${equal}/${hard.length} hard strings give llama.cpp's ids`);
            await model.dispose();
        }
    } finally {
        rmSync(scratchPre, {recursive: true, force: true});
    }
}

// 1 MiB of mixed text, the same the Catch2 speed test builds.
const sep = "\n__ggml_vocab_test__\n";
const inputs = (name) => {
    const raw = readFileSync(join(dir, `ggml-vocab-${name}.gguf.inp`), "utf8");
    const parts = [];
    for (let pos = 0; pos < raw.length;) {
        const next = raw.indexOf(sep, pos);
        if (next < 0) { parts.push(raw.slice(pos)); break; }
        parts.push(raw.slice(pos, next));
        pos = next + sep.length;
    }
    return parts;
};
let unit = "";
for (const name of ["llama-bpe", "qwen2", "deepseek-llm", "starcoder"]) for (const c of inputs(name)) unit += c + "\n";
const unitBytes = Buffer.from(unit, "utf8");
const chunks = [];
for (let total = 0; total < (1 << 20); total += unitBytes.length) chunks.push(unitBytes);
let bytes = Buffer.concat(chunks).subarray(0, 1 << 20);
let end = bytes.length;
while (end > 0 && ((bytes[end - 1] & 0xC0) === 0x80 || bytes[end - 1] >= 0xC0)) --end;
bytes = bytes.subarray(0, end);
const text = bytes.toString("utf8");
const scratch = mkdtempSync(join(tmpdir(), "specd-tok-"));
const textPath = join(scratch, "mixed.txt");
writeFileSync(textPath, bytes);
try {
    for (const name of ["llama-bpe", "qwen2", "gpt-2"]) {
        const path = join(dir, `ggml-vocab-${name}.gguf`);
        const model = await llama.loadModel({modelPath: path, vocabOnly: true});
        model.tokenize(text.slice(0, 4096), false);
        const t0 = process.hrtime.bigint();
        const theirs = Array.from(model.tokenize(text, false));
        const llamaMs = Number(process.hrtime.bigint() - t0) / 1e6;
        await model.dispose();
        const run = spawnSync(specd, ["tokenize", "-m", path, "--ids", "--no-bos", "--timing", "-f", textPath],
                              {encoding: "utf8", maxBuffer: 1 << 28});
        if (run.status !== 0) {
            check(false, `${name}: specd tokenize -f failed: ${run.stderr}`);
            continue;
        }
        const ours = JSON.parse(run.stdout.trim());
        const i = firstDifference(ours, theirs);
        check(same(ours, theirs), `${name}: 1 MiB of mixed text gives llama.cpp's ${theirs.length} ids` +
              (same(ours, theirs) ? "" : ` (first difference at token ${i}: specd ${ours[i]} llama.cpp ${theirs[i]})`));
        console.log(`tokenize 1 MiB ${name}: llama.cpp ${theirs.length} tokens in ${llamaMs.toFixed(1)} ms ` +
                    `(${Math.round(theirs.length / llamaMs * 1e3)} tokens/s, node-llama-cpp's model.tokenize); ` +
                    `specd ${run.stderr.trim().replace(/^specd: /, "")}`);
    }
} finally {
    rmSync(scratch, {recursive: true, force: true});
}

console.log(failures === 0 ? "all passed" : `${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
