// Drives Debian's Chromium with playwright-core for the store's browser tests.
//
//   node run.mjs cross-origin   a page on another origin pays with the official x402 client
//   node run.mjs paywall        the paywall page pays with an injected EIP-1193 wallet
//   node run.mjs sign-in        the paywall page signs a wallet in (BUY_FIRST=1: after paying)
//   node run.mjs storefront     /bazaar at 1280 and 390 px: screenshots, filter, axe-core
//   node run.mjs hostile        opens PAGE_URL and reports whether anything it carries ran
//
// Settings come from the environment (STORE_URL, SIGNER_URL, WALLET_ADDRESS, OUT_DIR). Prints one
// JSON line of findings for the Rust test to check; exits non-zero when a step fails.
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { build } from "esbuild";
import { chromium } from "playwright-core";

const CHROMIUM = "/usr/bin/chromium";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

async function withBrowser(work) {
  const profile = mkdtempSync(join(tmpdir(), "x402-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, args: ARGS, headless: true,
  });
  try {
    return await work(context);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

async function crossOrigin() {
  const store = env("STORE_URL");
  const bundle = await build({
    entryPoints: [new URL("./client-entry.mjs", import.meta.url).pathname],
    bundle: true, format: "iife", platform: "browser", write: false, minify: true,
  });
  const script = bundle.outputFiles[0].text;
  const page = "<!doctype html><html><head><title>another origin</title>" +
    "<script src=\"/client.js\"></script></head><body>shop</body></html>";
  const server = createServer((request, response) => {
    const [type, body] = request.url === "/client.js" ? ["text/javascript", script] : ["text/html", page];
    response.writeHead(200, { "content-type": type });
    response.end(body);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  try {
    return await withBrowser(async (context) => {
      const tab = await context.newPage();
      const preflights = [];
      tab.on("request", (r) => { if (r.method() === "OPTIONS") preflights.push(r.url()); });
      await tab.goto(`${origin}/`);
      const key = "0x" + randomBytes(32).toString("hex");
      const result = await tab.evaluate(
        ([url, privateKey]) => window.payWithOfficialClient(url, privateKey),
        [`${store}/api/x402/store-rail-receipt`, key],
      );
      return { origin, bundleBytes: script.length, ...result };
    });
  } finally {
    server.close();
  }
}

// An EIP-1193 wallet for `address` injected into every page of `tab`: typed data and
// personal_sign messages are signed by the test's signer endpoints, through this process.
async function injectWallet(tab, signer, address) {
  await tab.exposeFunction("__signTypedData", async (typed) => {
    const response = await fetch(signer, { method: "POST", body: typed,
      headers: { "content-type": "application/json" } });
    if (!response.ok) throw new Error(`signer: ${response.status} ${await response.text()}`);
    return response.text();
  });
  await tab.exposeFunction("__personalSign", async (message, account) => {
    const response = await fetch(new URL("personal-sign", signer), { method: "POST",
      body: JSON.stringify({ message, account }), headers: { "content-type": "application/json" } });
    if (!response.ok) throw new Error(`signer: ${response.status} ${await response.text()}`);
    return response.text();
  });
  await tab.addInitScript((account) => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective));
    window.ethereum = {
      request: async ({ method, params }) => {
        switch (method) {
          case "eth_requestAccounts": return [account];
          case "wallet_switchEthereumChain": return null;
          case "eth_signTypedData_v4": return window.__signTypedData(params[1]);
          case "personal_sign": return window.__personalSign(params[0], params[1]);
          default: throw new Error(`unsupported ${method}`);
        }
      },
    };
  }, address);
}

async function paywall() {
  const store = env("STORE_URL");
  const signer = env("SIGNER_URL");
  const address = env("WALLET_ADDRESS");
  return withBrowser(async (context) => {
    const tab = await context.newPage();
    const dialogs = [];
    tab.on("dialog", (dialog) => { dialogs.push(dialog.message()); dialog.dismiss(); });
    // The wallet's signing runs in this process, which asks the test's signer endpoint.
    await injectWallet(tab, signer, address);
    const response = await tab.goto(`${store}/api/x402/store-rail-receipt`);
    const found = {
      status: response.status(),
      contentType: response.headers()["content-type"],
      title: await tab.title(),
      scripts: await tab.locator("script").count(),
    };
    await tab.getByRole("button", { name: "Pay" }).click();
    await tab.locator("#passport").waitFor({ timeout: 20000 });
    found.passport = await tab.locator("#passport").textContent();
    found.statusText = await tab.locator("#status").textContent();
    const links = await tab.locator("a.download").evaluateAll((as) => as.map((a) => a.href));
    found.links = links;
    const download = await tab.request.get(links[0]);
    found.download = { status: download.status(), bytes: (await download.body()).length };
    found.titleAfter = await tab.title();
    found.violations = await tab.evaluate(() => window.__violations);
    found.dialogs = dialogs;
    return found;
  });
}

// The paywall page's sign-in: optionally buys first (BUY_FIRST=1) and opens the page again,
// then signs in with the wallet; a wallet refused sign-in then pays on the same page.
async function signIn() {
  const store = env("STORE_URL");
  const signer = env("SIGNER_URL");
  const address = env("WALLET_ADDRESS");
  const buyFirst = process.env.BUY_FIRST === "1";
  const url = `${store}/api/x402/store-rail-receipt`;
  return withBrowser(async (context) => {
    const tab = await context.newPage();
    const dialogs = [];
    tab.on("dialog", (dialog) => { dialogs.push(dialog.message()); dialog.dismiss(); });
    await injectWallet(tab, signer, address);
    const pay = tab.getByRole("button", { name: "Pay", exact: true });
    const signInButton = tab.getByRole("button", { name: "Already bought? Sign in with your wallet" });
    const response = await tab.goto(url);
    const found = {
      status: response.status(),
      title: await tab.title(),
      heading: await tab.locator("h1").textContent(),
      lede: await tab.locator("p.lede").textContent(),
    };
    if (buyFirst) {
      await pay.click();
      await tab.locator("#passport").waitFor({ timeout: 20000 });
      found.paidPassport = await tab.locator("#passport").textContent();
      await tab.goto(url);
    }
    found.signInVisible = await signInButton.isVisible();
    await signInButton.click();
    await tab.locator("#status.done, #status.error").waitFor({ timeout: 20000 });
    found.signIn = {
      status: await tab.locator("#status").textContent(),
      kind: await tab.locator("#status").getAttribute("class"),
      heading: await tab.locator("#result h2").count() ? await tab.locator("#result h2").textContent() : null,
      passport: await tab.locator("#passport").count() ? await tab.locator("#passport").textContent() : null,
      links: await tab.locator("a.download").evaluateAll((as) => as.map((a) => a.href)),
    };
    found.payVisible = await pay.isVisible();
    if (!buyFirst) {
      await pay.click();
      await tab.locator("#passport").waitFor({ timeout: 20000 });
      found.paidPassport = await tab.locator("#passport").textContent();
      found.paidStatus = await tab.locator("#status").textContent();
    }
    found.violations = await tab.evaluate(() => window.__violations);
    found.dialogs = dialogs;
    return found;
  });
}

async function storefront() {
  const store = env("STORE_URL");
  const out = env("OUT_DIR");
  mkdirSync(out, { recursive: true });
  const axe = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  return withBrowser(async (context) => {
    const found = { widths: {} };
    for (const width of [1280, 390]) {
      const tab = await context.newPage();
      await tab.setViewportSize({ width, height: 900 });
      await tab.goto(`${store}/bazaar`);
      const shot = join(out, `bazaar-${width}.png`);
      await tab.screenshot({ path: shot, fullPage: true });
      const product = join(out, `product-${width}.png`);
      const first = await tab.locator("li.card h3 a").first().getAttribute("href");
      const view = {
        title: await tab.title(),
        cards: await tab.locator("li.card:visible").count(),
        scrollWidth: await tab.evaluate(() => document.documentElement.scrollWidth),
        screenshot: { path: shot, bytes: statSync(shot).size },
      };
      await tab.selectOption("#filter-tag", "software");
      view.afterTag = await tab.locator("li.card:visible").count();
      view.afterTagCount = await tab.locator("#count").textContent();
      await tab.selectOption("#filter-tag", "");
      await tab.fill("#filter-text", "receipt");
      view.afterText = await tab.locator("li.card:visible").count();
      await tab.fill("#filter-text", "");
      // axe-core through a CDP script evaluation, which the page's CSP does not govern.
      await tab.evaluate(axe);
      const results = await tab.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
      view.axe = results.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.length }));
      await tab.goto(first);
      await tab.screenshot({ path: product, fullPage: true });
      view.product = { title: await tab.title(), path: product, bytes: statSync(product).size,
        heading: await tab.locator("article h2").textContent() };
      await tab.evaluate(axe);
      const productResults = await tab.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
      view.productAxe = productResults.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.length }));
      found.widths[width] = view;
      await tab.close();
    }
    return found;
  });
}

async function hostile() {
  const url = env("PAGE_URL");
  return withBrowser(async (context) => {
    const tab = await context.newPage();
    const dialogs = [];
    tab.on("dialog", async (dialog) => { dialogs.push(dialog.message()); await dialog.dismiss(); });
    const response = await tab.goto(url, { waitUntil: "load" });
    // Give an injected handler (an image's onerror, say) time to fire.
    await tab.waitForTimeout(500);
    return {
      status: response.status(),
      contentType: response.headers()["content-type"],
      title: await tab.title(),
      scripts: await tab.locator("script").count(),
      images: await tab.locator("img").count(),
      pwned: await tab.evaluate(() => window.__pwned === true),
      heading: await tab.locator("h1").first().textContent(),
      lede: await tab.locator("p.lede").count() ? await tab.locator("p.lede").textContent() : null,
      dialogs,
    };
  });
}

const mode = process.argv[2];
const modes = { "cross-origin": crossOrigin, paywall, "sign-in": signIn, storefront, hostile };
if (!modes[mode]) {
  console.error(`usage: node run.mjs ${Object.keys(modes).join("|")}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await modes[mode]()));
} catch (error) {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
}
