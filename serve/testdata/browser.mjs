// The web page of `polysketch serve` in headless Chromium, driven by
// puppeteer-core: load /, type a prompt, set the sampling fields, press
// Generate, and wait for streamed text. Run from a directory where the
// npm package puppeteer-core is installed:
//
//	node browser.mjs http://127.0.0.1:8080 /usr/bin/chromium
//
// Exits non-zero with a message on the first failed check.
import puppeteer from "puppeteer-core";

const [base, executablePath = "/usr/bin/chromium"] = process.argv.slice(2);
function check(ok, what) {
  if (!ok) {
    console.error("browser test: FAIL:", what);
    process.exit(1);
  }
}

const browser = await puppeteer.launch({
  executablePath, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(base + "/", { waitUntil: "load", timeout: 30_000 });
  check((await page.title()) === "polysketch", `title ${await page.title()}`);
  await page.$eval("#prompt", (el) => { el.value = ""; });
  await page.type("#prompt", "package main\n");
  for (const [id, v] of [["#max_tokens", "32"], ["#seed", "5"], ["#temperature", "0.7"]]) {
    await page.$eval(id, (el) => { el.value = ""; });
    await page.type(id, v);
  }
  await page.click("#go");
  await page.waitForFunction(() => document.body.dataset.state === "done" || document.body.dataset.state === "error", { timeout: 60_000 });
  const state = await page.evaluate(() => document.body.dataset.state);
  const status = await page.$eval("#status", (el) => el.textContent);
  check(state === "done", `page state ${state}: ${status}`);
  const out = await page.$eval("#out", (el) => el.textContent);
  const chunks = await page.evaluate(() => Number(document.body.dataset.chunks));
  check(out.startsWith("package main\n") && out.length > "package main\n".length, `output ${JSON.stringify(out)}`);
  check(chunks > 1, `text arrived in ${chunks} chunks, want it streamed`);
  check(/^32 tokens in /.test(status), `status ${JSON.stringify(status)}`);

  // The page shows what the API answers for the same request.
  const resp = await fetch(base + "/v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "package main\n", max_tokens: 32, seed: 5, temperature: 0.7, top_p: 0.95, top_k: 0 }),
  });
  const whole = await resp.json();
  check(out === "package main\n" + whole.choices[0].text, `page ${JSON.stringify(out)}, API ${JSON.stringify(whole.choices[0].text)}`);
  check(errors.length === 0, `page errors: ${errors}`);
  console.log(`browser test: ok (Chromium ${await browser.version()}, ${chunks} chunks: ${JSON.stringify(out)})`);
} finally {
  await browser.close();
}
