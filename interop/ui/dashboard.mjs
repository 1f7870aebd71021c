#!/usr/bin/env node
// Uses the mcp-tasks dashboard as a person would, in Debian's headless Chromium driven by
// playwright-core: logs in with an operator's key, sees a running task's progress advance, filters
// by status, opens the task, checks that the table fits 1280 and 1400 px wide screens (a long
// message cut, its full text on hover), clicks Cancel and sees it cancelled, opens a task with a
// webhook and sees its delivery and sends it again, opens the event subscriptions, sees one with
// its delivered event and ends it, opens a journaled task (the demo's pipeline), sees its steps
// and runs it again from one of them; saves screenshots (SCREENSHOT.png, SCREENSHOT-1280.png /
// -1400.png with the long message, SCREENSHOT-subscriptions.png).
//
// Usage: node dashboard.mjs BASE_URL OPERATOR_KEY TASK_ID SCREENSHOT.png HOOKED_TASK_ID SUBSCRIPTION_ID PIPELINE_TASK_ID
// Output: one line per check, `ok - NAME` or `not ok - NAME: REASON`; the last line is exactly
// `N passed, M failed`. Exit code 1 if any check failed.

import { chromium } from 'playwright-core';

const [base, key, taskId, screenshot, hookedId, subId, pipelineId] = process.argv.slice(2);
let passed = 0;
let failed = 0;
async function check(name, fn) {
    try {
        await fn();
        passed++;
        console.log(`ok - ${name}`);
    } catch (e) {
        failed++;
        console.log(`not ok - ${name}: ${String(e?.message ?? e).split('\n')[0]}`);
    }
}
function assert(cond, why) {
    if (!cond) throw new Error(why);
}

const watchdog = setTimeout(() => {
    console.log('not ok - watchdog: the run took over 60 s');
    console.log(`${passed} passed, ${failed + 1} failed`);
    process.exit(1);
}, 60_000);
watchdog.unref();

const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
const row = () => page.locator(`tr.task[data-id="${taskId}"]`);
const progressText = async () => (await row().locator('td.progress').innerText()).trim();

await check('the dashboard asks for an operator key, and the key logs in', async () => {
    await page.goto(`${base}/ui`);
    await page.locator('#login').waitFor({ state: 'visible', timeout: 10_000 });
    await page.fill('#key', key);
    await Promise.all([page.waitForURL(`${base}/ui`), page.click('#login button')]);
    await page.locator('#app').waitFor({ state: 'visible', timeout: 10_000 });
    // Logged in with a key: there is something to log out of.
    await page.locator('#logout').waitFor({ state: 'visible', timeout: 10_000 });
});

await check("a running task's progress advances without a reload", async () => {
    await row().waitFor({ timeout: 10_000 });
    const first = await progressText();
    let now = first;
    for (let i = 0; i < 50 && now === first; i++) {
        await page.waitForTimeout(200);
        now = await progressText();
    }
    assert(now !== first, `progress stayed at ${first}`);
    const width = await row().locator('.bar i').evaluate(e => e.style.width);
    assert(width && width !== '0%', `bar width ${width}`);
});

await check('the summary strip counts it as working', async () => {
    await page.waitForFunction(() => Number(document.getElementById('n-working').textContent) >= 1, null, { timeout: 10_000 });
});

await check('filtering by status shows only matching tasks', async () => {
    await page.selectOption('#f-status', 'completed');
    await page.waitForFunction(id => !document.querySelector(`tr.task[data-id="${id}"]`), taskId, { timeout: 10_000 });
    const statuses = await page.locator('tr.task .badge').allInnerTexts();
    assert(statuses.every(s => s === 'completed'), `statuses ${statuses}`);
    await page.selectOption('#f-status', 'working');
    await row().waitFor({ timeout: 10_000 });
});

await check('opening the task shows its arguments, history and progress', async () => {
    await row().click();
    await page.locator('#detail h2').waitFor({ timeout: 10_000 });
    const text = await page.locator('#detail').innerText();
    assert(text.includes('"seconds": 60'), `no arguments in ${text}`);
    assert(text.includes('working'), `no history in ${text}`);
    await page.screenshot({ path: screenshot });
});

await check('at 1280 and 1400 px wide the table fits: a long message is cut, its full text on hover', async () => {
    const title = await row().locator('td.msg').getAttribute('title');
    const shown = (await row().locator('td.msg').innerText()).trim();
    assert(title === shown, `the message cell's title is ${JSON.stringify(title)}, its text ${JSON.stringify(shown)}`);
    for (const width of [1280, 1400]) {
        await page.setViewportSize({ width, height: 800 });
        // A message longer than any screen, put in the row as the page would render it.
        const m = await page.evaluate(([id, text]) => {
            const cell = document.querySelector(`tr.task[data-id="${id}"] td.msg`);
            cell.textContent = text;
            cell.title = text;
            const panel = document.querySelector('main .panel');
            return {
                scroll: panel.scrollWidth, client: panel.clientWidth,
                cell: cell.getBoundingClientRect().right, panel: panel.getBoundingClientRect().right,
                cut: cell.scrollWidth > cell.clientWidth,
            };
        }, [taskId, 'step 3 of 60: copying the last shards of the nightly export to cold storage; '.repeat(6)]);
        assert(m.scroll <= m.client + 1, `at ${width} px the table is ${m.scroll} px wide in a ${m.client} px panel`);
        assert(m.cell <= m.panel + 1, `at ${width} px the message ends at ${m.cell}, past the panel's ${m.panel}`);
        assert(m.cut, `at ${width} px the long message is not cut`);
        await page.screenshot({ path: screenshot.replace(/\.png$/, `-${width}.png`) });
    }
    await page.setViewportSize({ width: 1280, height: 800 });
});

await check('Cancel cancels it, and the page shows it cancelled', async () => {
    await page.click('#cancel');
    await page.waitForFunction(() => document.getElementById('d-status')?.textContent === 'cancelled', null, { timeout: 10_000 });
    await page.selectOption('#f-status', '');
    await page.waitForFunction(id => document.querySelector(`tr.task[data-id="${id}"] .badge`)?.textContent === 'cancelled', taskId, { timeout: 10_000 });
});

await check("a task's webhook deliveries show how they stand, and Redeliver sends one again", async () => {
    await page.locator(`tr.task[data-id="${hookedId}"]`).click();
    await page.locator('#d-webhooks').waitFor({ timeout: 10_000 });
    const text = await page.locator('#d-webhooks').innerText();
    assert(text.includes('task.completed') && text.includes('pending'), `no pending delivery in ${text}`);
    assert(/refused|connect/i.test(text), `no reason in ${text}`);
    const sent = page.waitForResponse(r => r.url().includes('/redeliver') && r.request().method() === 'POST');
    await page.click('button.redeliver');
    const r = await sent;
    assert(r.status() === 202, `redeliver answered ${r.status()}`);
});

await check('the event subscriptions view lists one with its delivered event, and End ends it', async () => {
    await page.click('#view-subs');
    const sub = page.locator(`tr.sub[data-id="${subId}"]`);
    await sub.waitFor({ timeout: 10_000 });
    const line = await sub.innerText();
    assert(line.includes('task.finished') && line.includes('alice'), `the row says ${line}`);
    assert(/ok/.test(await sub.locator('td.state').innerText()), `delivery state ${line}`);
    await sub.click();
    await page.locator('#sd-deliveries').waitFor({ timeout: 10_000 });
    const deliveries = await page.locator('#sd-deliveries').innerText();
    assert(deliveries.includes('delivered'), `deliveries: ${deliveries}`);
    const text = await page.locator('#sub-detail').innerText();
    assert(!text.includes('whsec_'), 'the secret is not shown');
    await page.screenshot({ path: screenshot.replace(/\.png$/, '-subscriptions.png') });
    const ended = page.waitForResponse(r => r.url().includes(`/admin/api/subscriptions/${subId}`) && r.request().method() === 'DELETE');
    await page.click('#end-sub');
    const r = await ended;
    assert(r.status() === 200, `DELETE answered ${r.status()}`);
    await page.locator('#sub-ended').waitFor({ timeout: 10_000 });
    await page.waitForFunction(id => !document.querySelector(`tr.sub[data-id="${id}"]`), subId, { timeout: 10_000 });
    await page.click('#view-tasks');
    await row().waitFor({ timeout: 10_000 });
});

await check("a journaled task lists its steps (run, duration, output), and Retry from here runs it again from one", async () => {
    await page.locator(`tr.task[data-id="${pipelineId}"]`).click();
    const first = page.locator('button.rewind[data-seq="1"]');
    await first.waitFor({ timeout: 10_000 });
    const steps = await page.locator('#detail').innerText();
    assert(/item 0 \(attempt 1, \d+ ms,/.test(steps), `no step line in ${steps}`);
    assert(steps.includes('"item":0'), `no output in ${steps}`);
    page.once('dialog', d => d.accept());
    const sent = page.waitForResponse(r => r.url().includes('/journal/rewind?from=1') && r.request().method() === 'POST');
    await first.click();
    const r = await sent;
    assert(r.status() === 200, `rewind answered ${r.status()}`);
    await page.waitForFunction(() => /step\(s\) dropped; the task runs again/.test(document.getElementById('journal-note')?.textContent ?? ''), null, { timeout: 10_000 });
});

await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
