// Drives the web console in headless Chromium (Debian's) with
// playwright-core, page by page, as a user would: log in with the admin
// token, the sandbox list, one sandbox (a terminal command, an upload and
// its download, pause and resume, a snapshot), templates, nodes, tenants
// (a tenant and a key made). A screenshot of each page goes to OUTDIR.
// Prints one JSON object of what it saw; tests/integration/test_console.py
// checks it and the server's side.
//
//   node console.mjs URL TOKEN SANDBOX_ID OUTDIR TEMPLATE
import { chromium } from "playwright-core";
import { readFileSync } from "node:fs";

const [url, token, sbx, outdir, template] = process.argv.slice(2);
const seen = { errors: [], shots: [] };
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
  headless: true,
});
const T = 60000;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
  page.setDefaultTimeout(T);
  page.on("pageerror", (e) => seen.errors.push(`pageerror: ${e.message}`));
  // a refused request is logged by the browser too: those are kept apart,
  // with their URLs, for the test to say which are expected
  seen.refused = [];
  page.on("response", (r) => {
    if (r.status() >= 400) seen.refused.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
  });
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource"))
      seen.errors.push(`console: ${m.text()}`);
  });
  const shot = async (name) => {
    await page.screenshot({ path: `${outdir}/${name}.png`, fullPage: true });
    seen.shots.push(`${name}.png`);
  };
  const ready = (view) => page.waitForSelector(`main[data-ready="${view}"]`);

  // a wrong key first: refused, still on the login page
  await page.goto(`${url}/`);
  await page.fill("[data-testid=key]", "alk_wrong");
  await page.click("[data-testid=login-submit]");
  seen.wrongKey = await page.textContent("[data-testid=toast-error]");
  await shot("login");

  await page.fill("[data-testid=key]", token);
  await page.click("[data-testid=login-submit]");
  await ready("viewSandboxes");
  await page.waitForSelector(`a[href="#/sandboxes/${sbx}"]`);
  seen.listed = await page.$$eval("[data-testid=sandbox-row]", (rows) => rows.map((r) => r.innerText));
  await shot("sandboxes");

  // one sandbox
  await page.click(`a[href="#/sandboxes/${sbx}"]`);
  await ready("viewSandbox");
  seen.details = await page.textContent("[data-testid=details]");

  await page.click("[data-testid=open-terminal]");
  // the screen's text (term.js pads rows with no-break spaces); functions,
  // not strings: the console's CSP allows no eval
  const screen = () => document.querySelector("#terminal .terminal").innerText.replace(/\u00a0/g, " ");
  await page.waitForSelector("#terminal .terminal");
  await page.waitForFunction(() =>
    document.querySelector("#terminal .terminal").innerText.includes("#")); // the shell's prompt
  await page.click("#terminal");
  await page.keyboard.type("echo console-$((6*7)) > /root/from-terminal; cat /root/from-terminal\n");
  await page.waitForFunction(() =>
    /^console-42[ \u00a0]*$/m.test(document.querySelector("#terminal .terminal").innerText));
  seen.terminal = await page.evaluate(screen);
  // the shell's terminal is the size the page drew, and follows the window
  const sized = async (tag) => {
    await page.keyboard.type(`echo ${tag}=$(stty size)\n`);
    const found = await page.waitForFunction((t) => {
      const m = new RegExp("^" + t + "=(\\d+)[ \\u00a0](\\d+)", "m").exec(document.querySelector("#terminal .terminal").innerText);
      return m && `${m[1]} ${m[2]}`;
    }, tag);
    return { stty: await found.jsonValue(), drawn: await page.$eval("#terminal", (b) => `${b.dataset.rows} ${b.dataset.cols}`) };
  };
  const colsNow = () => page.$eval("#terminal", (b) => b.dataset.cols);
  seen.termSize = await sized("size1");
  const wide = await colsNow();
  await page.setViewportSize({ width: 900, height: 600 });
  await page.waitForFunction((c) => document.querySelector("#terminal").dataset.cols !== c, wide);
  seen.termResized = await sized("size2");
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.waitForFunction((c) => document.querySelector("#terminal").dataset.cols === c, wide);

  await page.setInputFiles("[data-testid=upload-file]", {
    name: "hello.txt", mimeType: "text/plain", buffer: Buffer.from("uploaded from the console\n"),
  });
  await page.click("[data-testid=upload]");
  const row = page.locator("[data-testid=file-row]", { hasText: "hello.txt" });
  await row.waitFor();
  const [download] = await Promise.all([page.waitForEvent("download"), row.locator("[data-testid=download]").click()]);
  seen.downloaded = readFileSync(await download.path(), "utf8");
  seen.files = await page.$$eval("[data-testid=file-row]", (rows) => rows.map((r) => r.innerText.split("\t")[0]));

  await page.click("[data-testid=snapshot-disk]");
  await page.waitForSelector("[data-testid=snapshot-row]");
  seen.snapshots = await page.locator("[data-testid=snapshot-row]").count();
  await shot("sandbox");

  await page.click("[data-testid=verb-pause]");
  await page.waitForSelector("[data-testid=operation]:has-text('pause: succeeded')");
  seen.pausedState = await page.textContent("[data-testid=details] [data-testid=state]");
  await page.click("[data-testid=verb-resume]");
  await page.waitForSelector("[data-testid=operation]:has-text('resume: succeeded')");
  seen.resumedState = await page.textContent("[data-testid=details] [data-testid=state]");
  seen.operations = await page.$$eval("[data-testid=operation]", (li) => li.map((x) => x.innerText));

  // templates, nodes, tenants
  await page.click("[data-testid=nav-templates]");
  await ready("viewTemplates");
  seen.templates = await page.$$eval("[data-testid=template-row]", (rows) => rows.map((r) => r.innerText));
  await shot("templates");
  // a built one's page: its build log, followed to its end
  await page.click(`a[href="#/templates/${template}"]`);
  await ready("viewTemplate");
  await page.waitForSelector("[data-testid=build-step]:has-text('built in')");
  seen.buildLog = await page.textContent("[data-testid=build-log]");
  await shot("template");

  await page.click("[data-testid=nav-nodes]");
  await ready("viewNodes");
  seen.localNode = await page.textContent("[data-testid=local-node]");
  await shot("nodes");

  await page.click("[data-testid=nav-tenants]");
  await ready("viewTenants");
  await page.fill("[data-testid=tenant-name]", "from-console");
  await page.click("[data-testid=tenant-create]");
  const tenant = page.locator("[data-testid=tenant]", { hasText: "from-console" });
  await tenant.waitFor();
  await tenant.locator("[data-testid=key-create]").click();
  seen.newKey = await page.textContent("[data-testid=new-key-value]");
  await page.locator("[data-testid=tenant]", { hasText: "from-console" }).locator("[data-testid=key-row]").waitFor();
  await shot("tenants");

  // the new key logs in as its tenant: no admin pages, none of the admin's sandboxes
  await page.click("[data-testid=logout]");
  await ready("viewLogin");
  await page.fill("[data-testid=key]", seen.newKey);
  await page.click("[data-testid=login-submit]");
  await ready("viewSandboxes");
  seen.tenantRows = await page.locator("[data-testid=sandbox-row]").count();
  seen.tenantSeesNodes = await page.isVisible("[data-testid=nav-nodes]");
  await shot("tenant-sandboxes");
} catch (e) {
  seen.failure = String(e.stack || e);
  for (const p of browser.contexts().flatMap((c) => c.pages()))
    await p.screenshot({ path: `${outdir}/failure.png`, fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
