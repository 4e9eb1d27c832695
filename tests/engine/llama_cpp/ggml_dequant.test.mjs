// Runs ggml_dequant_check against the libggml-base.so of node-llama-cpp's
// prebuilt CPU package (installed by tests/support/node_run.sh): specd's
// dequantisation of every type must equal ggml's to_float bit for bit.
//
//   node ggml_dequant.test.mjs GGML_DEQUANT_CHECK_BINARY
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const [checker] = process.argv.slice(2);
if (!checker) {
    console.error("usage: ggml_dequant.test.mjs GGML_DEQUANT_CHECK_BINARY");
    process.exit(2);
}
// The package exports no paths: look for its folder as Node would.
function findBinsDir() {
    for (let dir = path.dirname(new URL(import.meta.url).pathname); ; dir = path.dirname(dir)) {
        const candidate = path.join(dir, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");
        if (fs.existsSync(candidate)) return candidate;
        if (dir === path.dirname(dir)) return "";
    }
}
const binsDir = findBinsDir();
const lib = binsDir ? path.join(binsDir, "libggml-base.so") : "";
if (!lib || !fs.existsSync(lib)) {
    console.log("node-llama-cpp's libggml-base.so not found: skipped");
    process.exit(77);
}
const run = spawnSync(checker, [lib], {stdio: "inherit", env: {...process.env, LD_LIBRARY_PATH: binsDir}});
process.exit(run.status ?? 1);
