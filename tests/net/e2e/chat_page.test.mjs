// End-to-end check of the chat page (net/www/index.html) in headless
// Chromium, against a running `specd serve` with stories15M.
//
//   node chat_page.test.mjs http://127.0.0.1:PORT [screenshot.png]
//
// CHROMIUM moves the browser (default /usr/bin/chromium). SPECD_API_KEY, when
// set, is the key the server was started with (--api-key): the page must load
// without it, ask for it, say so when a wrong one is typed, and keep exactly
// one socket open however often a key is typed. Exit 0 pass, 1 fail, 2 bad
// usage, 77 (ctest: skipped) when Chromium is not installed.
import fs from "node:fs";
import { chromium } from "playwright-core";

const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const apiKey = process.env.SPECD_API_KEY || "";
const pageErrorsSeen = [];
const fail = (msg) => { throw new Error(msg); };
const pct = (x) => (100 * x).toFixed(1) + "%";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
    if (process.argv.length < 3) {
        console.error("usage: node chat_page.test.mjs http://HOST:PORT [screenshot.png]");
        process.exit(2);
    }
    if (!fs.existsSync(executablePath)) {
        console.log(`SKIP: chromium not installed (${executablePath}; apt-get install chromium, or set CHROMIUM)`);
        process.exit(77);
    }
    const base = process.argv[2];
    const url = new URL("/", base).toString();
    const shot = process.argv[3] || "chat_page.png";
    const watchdog = setTimeout(() => { console.log("FAIL: timed out after 240 s"); process.exit(1); }, 240000);
    const auth = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};

    // What the server says, read past the page: n_ctx, and the WebSocket
    // connections it accepted (a socket the page left behind shows there).
    const models = await fetch(new URL("/v1/models", base), { headers: auth }).then((r) => r.json());
    const nCtx = models.data[0].meta.n_ctx;
    const wsAccepted = async () => {
        const text = await fetch(new URL("/metrics", base), { headers: auth }).then((r) => r.text());
        return Number(/^specd_websocket_connections_total (\d+)$/m.exec(text)[1]);
    };

    const browser = await chromium.launch({
        executablePath,
        args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    });
    const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
    page.on("pageerror", (e) => pageErrorsSeen.push(e.message));

    // Every socket the page opens, and the frames on it.
    const sockets = [];   // {ws, url}
    const received = [];  // parsed server frames, in order
    const sent = [];      // parsed client frames
    page.on("websocket", (ws) => {
        sockets.push({ ws, url: ws.url() });
        ws.on("framereceived", (f) => { try { received.push(JSON.parse(f.payload)); } catch { /* not JSON */ } });
        ws.on("framesent", (f) => { try { sent.push(JSON.parse(f.payload)); } catch { /* not JSON */ } });
    });
    const openSockets = () => sockets.filter((s) => !s.ws.isClosed());

    const status = async () => ((await page.textContent("#status")) || "").trim();
    const connected = () => page.waitForFunction(
        () => /^connected\b/i.test((document.getElementById("status") || {}).textContent || ""), null, { timeout: 20000 });
    const authShown = () => page.evaluate(() => { const a = document.getElementById("auth"); return !!a && !a.hidden; });
    const typeKey = async (key) => {
        await page.fill("#api_key", key);
        await page.press("#api_key", "Enter");
    };
    // The page settles (a retired socket has closed) before sockets are counted.
    const expectOneSocket = async (what) => {
        await sleep(500);
        const open = openSockets();
        if (open.length !== 1) fail(`${what}: ${open.length} sockets open (want exactly 1; ${sockets.length} opened in all)`);
        return open[0];
    };

    try {
        console.log(`chat page checks against ${url}${apiKey ? " (server started with --api-key)" : ""}`);
        const res = await page.goto(url, { timeout: 20000 });
        if (!res || res.status() !== 200) fail(`GET / answered ${res ? res.status() : "nothing"}`);
        const type = res.headers()["content-type"] || "";
        if (!type.startsWith("text/html")) fail(`GET / has content-type ${JSON.stringify(type)}, want text/html`);
        console.log(`ok   GET / 200 ${type}${apiKey ? " without a key" : ""}`);

        if (apiKey) {
            const bare = await fetch(new URL("/v1/models", base));
            if (bare.status !== 401) fail(`GET /v1/models without a key answered ${bare.status}, want 401 (is the server started with --api-key?)`);
            await page.waitForFunction(() => { const a = document.getElementById("auth"); return !!a && !a.hidden; }, null, { timeout: 10000 })
                .catch(() => fail("the page does not ask for the API key (no #auth form shown)"));
            const asked = (await page.textContent("#auth_msg")).trim();
            if (openSockets().length) fail("the page opened a socket before it had a key");
            console.log(`ok   the page asks for the key: ${JSON.stringify(asked)}, status ${JSON.stringify(await status())}, no socket open`);

            const before = await wsAccepted();
            await typeKey("not-" + apiKey);
            await page.waitForFunction(() => document.getElementById("auth").classList.contains("refused"), null, { timeout: 10000 });
            const refused = (await page.textContent("#auth_msg")).trim();
            if (!/refused|wrong/i.test(refused)) fail(`after a wrong key the page says ${JSON.stringify(refused)}, want a clear refusal`);
            if (!(await authShown())) fail("after a wrong key the page no longer asks for the key");
            if (openSockets().length) fail("a socket is open after a wrong key");
            if ((await wsAccepted()) !== before) fail("the server accepted a WebSocket for a wrong key");
            console.log(`ok   wrong key: ${JSON.stringify(refused)}, asked again, no socket open`);

            await typeKey(apiKey);
            await connected();
            const first = await expectOneSocket("after the right key");
            if (!first.url.includes("api_key=" + encodeURIComponent(apiKey))) fail(`the socket URL ${first.url} does not carry the percent-encoded key`);
            if (await authShown()) fail("the key prompt is still shown after connecting");
            if ((await wsAccepted()) !== before + 1) fail(`the server accepted ${(await wsAccepted()) - before} WebSockets, want 1`);
            console.log(`ok   right key: ${JSON.stringify(await status())}, exactly 1 socket open (${sockets.length} tried in all), the server accepted 1`);

            // A key typed later, twice in a row: the old socket closes before
            // the new one opens, and only one of the two restarts opens one.
            const acceptedBefore = await wsAccepted();
            await page.click("#key_btn");
            await page.fill("#api_key", apiKey);
            await page.evaluate(() => { const f = document.getElementById("auth"); f.requestSubmit(); f.requestSubmit(); });
            await connected();
            const second = await expectOneSocket("after the key was typed again (twice)");
            if (second === first) fail("the page kept the old socket instead of reconnecting with the key typed later");
            if (!first.ws.isClosed()) fail("the socket of the old key is still open");
            const more = (await wsAccepted()) - acceptedBefore;
            if (more !== 1) fail(`typing the key again opened ${more} WebSockets on the server, want 1`);
            console.log(`ok   key typed again (twice): the old socket closed, exactly 1 open, the server accepted 1 more`);
        } else {
            await connected();
            if (await authShown()) fail("the page asks for a key though the server has none");
            await expectOneSocket("after loading");
            console.log(`ok   #status ${JSON.stringify(await status())}, no key asked, 1 socket open`);
        }

        // ---- one answer: per-token marks and one meaning of "acceptance"
        await page.evaluate(() => {
            window.__acceptanceSeen = [];
            const el = document.getElementById("acceptance");
            new MutationObserver(() => window.__acceptanceSeen.push(el.textContent)).observe(el, { childList: true, characterData: true, subtree: true });
        });
        await page.fill("#prompt", "Once upon a time");
        await page.click("#send");
        const ended = await page.waitForSelector('#log [data-state="done"], #log [data-state="error"]', { timeout: 30000 });
        if ((await ended.getAttribute("data-state")) !== "done") fail(`generation ended in an error: ${JSON.stringify(await ended.textContent())}`);
        const request = sent.filter((f) => f.type === "generate").at(-1);
        const tokenFrames = received.filter((f) => f.type === "token" && f.id === request.id);
        const done = received.find((f) => f.type === "done" && f.id === request.id);
        if (!done) fail("no done frame seen on the socket");
        const ids = tokenFrames.flatMap((f) => f.token_ids), fromDraft = tokenFrames.flatMap((f) => f.from_draft);
        const withoutTexts = tokenFrames.filter((f) => f.token_ids.length && !Array.isArray(f.token_texts));
        if (withoutTexts.length) fail(`${withoutTexts.length} token frames carry no token_texts (the server's per-token text)`);
        const marks = await ended.evaluate((el) => [...el.querySelectorAll(".body > span")].map((s) => ({ cls: s.className, text: s.textContent })));
        if (marks.length !== ids.length || ids.length !== done.usage.completion_tokens)
            fail(`${marks.length} marked spans for ${ids.length} tokens in frames (${done.usage.completion_tokens} in usage): want one per token`);
        marks.forEach((m, i) => {
            const want = "tok " + (fromDraft[i] ? "draft" : "target");
            if (m.cls !== want) fail(`token ${i} (${ids[i]}) is marked ${JSON.stringify(m.cls)}, want ${JSON.stringify(want)}`);
        });
        const streamed = tokenFrames.map((f) => f.text).join("");
        if (marks.map((m) => m.text).join("") !== streamed) fail("the marked tokens' text differs from the streamed text");
        const nDraft = fromDraft.filter(Boolean).length;
        if (nDraft === 0 || nDraft === ids.length) fail(`want both kinds of token in the answer, got ${nDraft} drafted of ${ids.length}`);
        const mixedFrames = tokenFrames.filter((f) => f.from_draft.some(Boolean) && !f.from_draft.every(Boolean)).length;
        console.log(`ok   ${ids.length} tokens, each its own mark: ${nDraft} drafted+accepted, ${ids.length - nDraft} the target's own ` +
                    `(${tokenFrames.length} frames, ${mixedFrames} of them mixed); text ${JSON.stringify(streamed.slice(0, 50) + "…")}`);

        const acceptance = ((await page.textContent("#acceptance")) || "").trim();
        const s = done.speculative;
        if (acceptance !== pct(s.accepted / s.drafted)) fail(`#acceptance shows ${JSON.stringify(acceptance)}, want accepted/drafted = ${s.accepted}/${s.drafted} = ${pct(s.accepted / s.drafted)}`);
        if (s.accepted !== nDraft) fail(`the done frame says ${s.accepted} accepted, the token frames mark ${nDraft} drafted`);
        const seen = await page.evaluate(() => window.__acceptanceSeen);
        const otherFigures = seen.filter((v) => /%/.test(v) && v.trim() !== acceptance);
        if (otherFigures.length) fail(`#acceptance showed other figures while streaming: ${JSON.stringify(otherFigures)}`);
        const share = ((await page.textContent("#from_draft")) || "").trim();
        if (share !== pct(nDraft / ids.length)) fail(`#from_draft shows ${JSON.stringify(share)}, want ${pct(nDraft / ids.length)}`);
        console.log(`ok   #acceptance ${JSON.stringify(acceptance)} = ${s.accepted}/${s.drafted} drafted (shown only at the end; seen: ${JSON.stringify([...new Set(seen)])}), ` +
                    `#from_draft ${JSON.stringify(share)} of the output`);

        // ---- a conversation longer than the context holds
        const maxTokens = 48, turns = 7;
        await page.check("#chat");
        await page.fill("#max_tokens", String(maxTokens));
        const before = await page.$$eval('#log [data-state]', (els) => els.length);
        for (let t = 1; t <= turns; ++t) {
            await page.fill("#prompt", `Tell me what the little dog did on day ${t}.`);
            await page.click("#send");
            await page.waitForFunction((n) => {
                const els = document.querySelectorAll("#log [data-state]");
                return els.length === n && els[n - 1].dataset.state !== "streaming";
            }, before + t, { timeout: 30000 });
            const last = await page.$$eval('#log [data-state]', (els) => ({ state: els.at(-1).dataset.state, text: els.at(-1).textContent }));
            if (last.state !== "done") fail(`conversation turn ${t} ended in an error: ${JSON.stringify(last.text)}`);
        }
        const logText = await page.textContent("#log");
        if (/context_exceeded/.test(logText)) fail("the page shows context_exceeded");
        const notices = await page.$$eval("#log .msg.notice", (els) => els.map((e) => e.querySelector(".body").textContent));
        const noticeRe = new RegExp(`^\\d+ old turns? dropped to fit the ${nCtx}-token context`);
        if (!notices.length || !notices.every((n) => noticeRe.test(n))) fail(`want dropped-turn notices like "2 old turns dropped to fit the ${nCtx}-token context", got ${JSON.stringify(notices)}`);
        const chatRequests = sent.filter((f) => f.type === "generate" && f.messages);
        // A turn the page sent again after context_exceeded has no done frame.
        const chatDone = chatRequests.map((r) => received.find((f) => f.type === "done" && f.id === r.id)).filter(Boolean);
        const retried = received.filter((f) => f.type === "error" && f.code === "context_exceeded").length;
        // The page's own estimate keeps each turn within the context; the
        // retry after context_exceeded is only for an estimate gone wrong.
        if (retried) fail(`${retried} turns were answered context_exceeded (the page sent them again with fewer turns): the estimate did not fit them`);
        const over = chatDone.filter((d) => d.usage.prompt_tokens + maxTokens > nCtx);
        if (over.length) fail(`${over.length} turns were sent with prompt + max_tokens over n_ctx ${nCtx}: ${JSON.stringify(over.map((d) => d.usage))}`);
        const kept = chatRequests.map((r) => r.messages.length);
        if (Math.max(...kept.slice(1)) < 3) fail(`no turn carried the conversation before it (messages per turn ${JSON.stringify(kept)})`);
        const dropped = await page.$$eval("#log .msg.dropped", (els) => els.length);
        console.log(`ok   ${turns} conversation turns on n_ctx ${nCtx} with max_tokens ${maxTokens}: no context_exceeded; messages sent per turn ${JSON.stringify(kept)}; ` +
                    `prompt tokens ${JSON.stringify(chatDone.map((d) => d.usage.prompt_tokens))}; ${dropped} old messages greyed; notices ${JSON.stringify(notices)}`);

        await expectOneSocket("at the end");
        await page.screenshot({ path: shot, fullPage: true });
        console.log(`ok   screenshot ${shot}`);
        if (pageErrorsSeen.length) fail(`JavaScript error on the page: ${pageErrorsSeen[0]}`);
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
