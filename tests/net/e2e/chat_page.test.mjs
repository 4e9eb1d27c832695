// End-to-end check of the chat page (net/www/index.html) in headless
// Chromium, against a running `specd serve` with stories15M.
//
//   node chat_page.test.mjs http://127.0.0.1:PORT [screenshot.png]
//
// CHROMIUM moves the browser (default /usr/bin/chromium); SPECD_API_KEY, when
// set, is typed into the page's API key field. Exit 0 pass, 1 fail, 2 bad
// usage, 77 (ctest: skipped) when Chromium is not installed.
import fs from "node:fs";
import { chromium } from "playwright-core";

const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const pageErrorsSeen = [];
const fail = (msg) => { throw new Error(msg); };

async function main() {
    if (process.argv.length < 3) {
        console.error("usage: node chat_page.test.mjs http://HOST:PORT [screenshot.png]");
        process.exit(2);
    }
    if (!fs.existsSync(executablePath)) {
        console.log(`SKIP: chromium not installed (${executablePath}; apt-get install chromium, or set CHROMIUM)`);
        process.exit(77);
    }
    const url = new URL("/", process.argv[2]).toString();
    const shot = process.argv[3] || "chat_page.png";
    const watchdog = setTimeout(() => { console.log("FAIL: timed out after 90 s"); process.exit(1); }, 90000);

    const browser = await chromium.launch({
        executablePath,
        args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    });
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    const pageErrors = pageErrorsSeen;
    page.on("pageerror", (e) => pageErrors.push(e.message));
    try {
        console.log(`chat page checks against ${url}`);
        const res = await page.goto(url, { timeout: 20000 });
        if (!res || res.status() !== 200) fail(`GET / answered ${res ? res.status() : "nothing"}`);
        const type = res.headers()["content-type"] || "";
        if (!type.startsWith("text/html")) fail(`GET / has content-type ${JSON.stringify(type)}, want text/html`);
        console.log(`ok   GET / 200 ${type}`);

        const connected = () => page.waitForFunction(
            () => /\bconnected\b/i.test((document.getElementById("status") || {}).textContent || ""), null, { timeout: 20000 });
        await connected();
        if (process.env.SPECD_API_KEY && (await page.$("#api_key"))) {
            await page.fill("#api_key", process.env.SPECD_API_KEY);
            await page.dispatchEvent("#api_key", "change");
            await connected();
        }
        console.log(`ok   #status: ${JSON.stringify(await page.textContent("#status"))}`);

        await page.fill("#prompt", "Once upon a time");
        await page.click("#send");
        const ended = await page.waitForSelector('#log [data-state="done"], #log [data-state="error"]', { timeout: 30000 });
        if ((await ended.getAttribute("data-state")) !== "done") fail(`generation ended in an error: ${JSON.stringify(await ended.textContent())}`);
        const text = await ended.evaluate((el) => ((el.querySelector(".body") || el).textContent || "").trim());
        if (!text) fail("the assistant message is empty");
        const drafted = await ended.evaluate((el) => el.querySelectorAll(".draft, .mixed").length);
        console.log(`ok   assistant message done: ${JSON.stringify(text.length > 60 ? text.slice(0, 60) + "…" : text)} (${drafted} spans marked as (partly) draft)`);

        const acceptance = ((await page.textContent("#acceptance")) || "").trim();
        if (!/\d+(\.\d+)?\s*%/.test(acceptance)) fail(`#acceptance should show a percentage, shows ${JSON.stringify(acceptance)}`);
        const tps = ((await page.textContent("#tps")) || "").trim();
        console.log(`ok   #acceptance ${JSON.stringify(acceptance)}, #tps ${JSON.stringify(tps)}`);

        await page.screenshot({ path: shot, fullPage: true });
        console.log(`ok   screenshot ${shot}`);
        if (pageErrors.length) fail(`JavaScript error on the page: ${pageErrors[0]}`);
    } catch (e) {
        await page.screenshot({ path: shot, fullPage: true }).then(() => console.log(`     screenshot of the failure: ${shot}`), () => {});
        throw e;
    } finally {
        clearTimeout(watchdog);
        await browser.close();
    }
    console.log("PASS");
    process.exit(0);
}

main().catch((e) => {
    if (pageErrorsSeen.length) console.log(`     page errors: ${pageErrorsSeen.join(" | ")}`);
    console.log(`FAIL: ${String(e && e.message ? e.message.split("\n")[0] : e)}`);
    process.exit(1);
});
