// The dashboard in a real browser (Debian's chromium, driven by playwright-core)
// against a live coordinator: sign in, see the fleet, follow a running job to its
// end without reloading, read the WAN matrix. Run by tests/dashboard_test.sh, which
// starts the cluster and the job and passes what to expect in the environment:
//   DASHBOARD_URL   the coordinator's https://host:port/
//   TOKEN           a user's token
//   SCREENSHOTS     a directory for the screenshots
//   NODES, SITES    the fleet's node count and site names (comma-separated)
//   JOB_ID, TASKS   the running job and its task count
//   WAN             "from>to=text" a WAN matrix cell must show once the job is done
//   GATE            a file the job's tasks wait for: made once the page has shown them
//                   running, so that a slow machine cannot let the job end unseen
// Exits non-zero, saying what was wrong, on the first check that fails.
import { mkdirSync, writeFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

const env = (k) => {
  const v = process.env[k];
  if (v === undefined || v === '') throw new Error(`${k} is not set`);
  return v;
};
const url = env('DASHBOARD_URL');
const token = env('TOKEN');
const shots = env('SCREENSHOTS');
const nodes = Number(env('NODES'));
const sites = env('SITES').split(',');
const jobId = env('JOB_ID');
const tasks = Number(env('TASKS'));
const [wanCell, wanText] = env('WAN').split('=');
const [wanFrom, wanTo] = wanCell.split('>');
mkdirSync(shots, { recursive: true });

function check(ok, what) {
  if (!ok) throw new Error(what);
  console.log(`ok   ${what}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  // The coordinator's certificate is of the cluster's own CA, which this fresh
  // browser profile does not hold.
  const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 1600 } });
  const page = await context.newPage();
  // Failures: requests that got no answer, and script errors. Errors: what the
  // console says (a 401 too), counted once signed in.
  const failures = [];
  const errors = [];
  page.on('pageerror', (e) => failures.push(e.message));
  page.on('requestfailed', (r) => failures.push(`${r.url()}: ${r.failure() && r.failure().errorText}`));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });

  await page.goto(url);
  check(failures.length === 0, `the page and its assets load${failures.length ? `: ${failures.join('; ')}` : ''}`);
  await page.locator('#login').waitFor({ state: 'visible', timeout: 10000 });
  check(await page.locator('#app').isHidden(), 'without a token the page asks for one and shows nothing');

  await page.fill('#token', 'mrd_0123456789abcdef_not-a-real-secret');
  await page.click('#connect');
  await page.locator('#login-error').filter({ hasText: /token/ }).waitFor({ timeout: 10000 });
  check(true, `a wrong token is refused: "${(await page.textContent('#login-error')).trim()}"`);

  await page.fill('#token', token);
  await page.click('#connect');
  await page.locator('#app').waitFor({ state: 'visible', timeout: 10000 });
  // From here on nothing may fail (the refusals above logged their 401s).
  errors.length = 0;
  await page.waitForFunction((n) => document.querySelectorAll('#nodes tbody tr').length === n, nodes, { timeout: 10000 });
  check(true, `the nodes table lists the ${nodes} nodes`);
  const alive = await page.locator('#nodes tbody tr.alive').count();
  check(alive === nodes, `all ${nodes} nodes are alive (${alive})`);
  for (const s of sites) {
    check(await page.locator(`#map g.site[data-site="${s}"]`).count() === 1, `the map shows site ${s}`);
  }
  check(await page.locator('#map g.link').count() > 0, 'the map draws the links between sites');

  const row = page.locator(`#jobs tbody tr[data-job="${jobId}"]`);
  await row.locator('td.status', { hasText: 'running' }).waitFor({ timeout: 20000 });
  check(true, `job ${jobId} shows as running`);
  await row.click();
  await page.locator('#job').waitFor({ state: 'visible', timeout: 10000 });
  await page.waitForFunction(() => document.querySelectorAll('#gantt rect.task.running').length > 0, null, { timeout: 10000 });
  const running = await page.locator('#gantt rect.task.running').count();
  check(running > 0, `the timeline shows ${running} running tasks, each on the node it runs on`);
  const ganttNodes = await page.locator('#gantt .gantt-node').allTextContents();
  check(ganttNodes.length > 0, `the timeline has a row per node used (${ganttNodes.join(', ')})`);
  await page.screenshot({ path: `${shots}/dashboard-running.png`, fullPage: true });
  // Seen running: the tasks may end now.
  if (process.env.GATE) writeFileSync(process.env.GATE, 'go');

  // Live: the same page, no reload, until the job ends.
  await row.locator('td.status', { hasText: 'succeeded' }).waitFor({ timeout: 60000 });
  await page.waitForFunction((n) => document.querySelectorAll('#gantt rect.task.succeeded').length === n, tasks,
    { timeout: 10000 });
  check(true, `job ${jobId} turns succeeded without a reload, with ${tasks} succeeded bars`);
  const summary = await page.textContent('#job-summary');
  check(summary.includes(`${tasks} of ${tasks} tasks succeeded`), `the job's summary says so: "${summary}"`);
  const cell = page.locator(`#wan tbody tr[data-from="${wanFrom}"] td[data-to="${wanTo}"]`);
  await cell.filter({ hasText: wanText }).waitFor({ timeout: 15000 });
  check(true, `the WAN matrix shows ${wanText} from ${wanFrom} to ${wanTo}`);
  await page.screenshot({ path: `${shots}/dashboard-finished.png`, fullPage: true });
  const all = [...failures, ...errors];
  check(all.length === 0, `no failed request or script error on the page${all.length ? `: ${all.join('; ')}` : ''}`);
} catch (e) {
  failed = true;
  console.error(`FAIL ${e.message}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
