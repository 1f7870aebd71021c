#!/usr/bin/env node
// A steady load of long, resumable tasks through the OFFICIAL MCP TypeScript SDK v1 client (its
// experimental tasks API), for the rolling-deploy test (crates/cli/tests/rolling_deploy.rs): while
// the replicas behind the balancer are stopped and started one by one, this creates COUNT tasks, one
// every SPACING ms, alternating the demo's `pipeline` (step journal) and the `process_items`
// command tool (checkpoints; LEDGER_DIR/ts-N.txt is its ledger), follows each to its end, and
// prints one JSON line: {"created": [...], "results": {taskId: {status, ...}}}.
//
// A server that is stopping refuses new calls (HTTP 503, Retry-After) and a balancer may lose a
// request in flight: creates and polls are tried again, as any client of a rolling service must.
//
// Usage: node rolling-load.mjs URL COUNT SPACING_MS LEDGER_DIR

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, countArg, spacingArg, ledgerDir] = process.argv.slice(2);
if (!url || !ledgerDir) {
    console.error('usage: node rolling-load.mjs URL COUNT SPACING_MS LEDGER_DIR');
    process.exit(2);
}
const count = Number(countArg);
const spacing = Number(spacingArg);
const sleep = ms => new Promise(r => setTimeout(r, ms));
const BUDGET_MS = 150_000;
const started = Date.now();

/** Tries `f` again (after 300 ms) while it throws and the budget lasts; the last error otherwise. */
async function retrying(what, f) {
    let last;
    while (Date.now() - started < BUDGET_MS) {
        try {
            return await f();
        } catch (e) {
            last = e;
            await sleep(300);
        }
    }
    throw new Error(`${what}: ${last?.message ?? last}`);
}

const client = new Client({ name: 'rolling-load-ts', version: '1.0.0' }, { capabilities: {} });
await retrying('connect', () => client.connect(new StreamableHTTPClientTransport(new URL(url))));
client.onerror = () => {}; // a dropped event stream during a restart is expected

async function create(i) {
    const args =
        i % 2 === 0
            ? { name: 'pipeline', arguments: { items: 8, seconds_per_item: 0.5 } }
            : { name: 'process_items', arguments: { items: 8, seconds: 0.5, ledger: `${ledgerDir}/ts-${i}.txt` } };
    return retrying(`create ${i}`, async () => {
        const stream = client.experimental.tasks.callToolStream(args, CallToolResultSchema, {
            task: { ttl: 600_000 },
            timeout: 10_000
        });
        for await (const msg of stream) {
            if (msg.type === 'taskCreated') return msg.task.taskId;
            if (msg.type === 'error') throw msg.error;
        }
        throw new Error('no task created');
    });
}

async function follow(taskId) {
    for (;;) {
        const t = await retrying(`get ${taskId}`, () => client.experimental.tasks.getTask(taskId, { timeout: 10_000 }));
        if (['completed', 'failed', 'cancelled'].includes(t.status)) {
            const out = { status: t.status, statusMessage: t.statusMessage ?? null };
            if (t.status === 'completed') {
                const r = await retrying(`result ${taskId}`, () =>
                    client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: 10_000 })
                );
                out.structuredContent = r.structuredContent ?? null;
                out.text = (r.content ?? []).map(c => c.text ?? '').join('\n');
            }
            return out;
        }
        if (Date.now() - started > BUDGET_MS) return { status: 'lost', statusMessage: `still ${t.status}` };
        await sleep(250);
    }
}

const created = [];
const follows = [];
for (let i = 0; i < count; i++) {
    const id = await create(i);
    created.push(id);
    follows.push(follow(id).then(r => [id, r]));
    await sleep(spacing);
}
const results = Object.fromEntries(await Promise.all(follows));
console.log(JSON.stringify({ created, results }));
await client.close();
