#!/usr/bin/env node
// The official MCP TypeScript SDK v1 client (@modelcontextprotocol/sdk, pinned in package.json) through
// the mcp-tasks gateway, as a client that speaks tasks (2025-11-25, client.experimental.tasks): the
// gateway fronts interop/python/upstream_server.py (FastMCP) with its tools prefixed `py_`.
//
// Usage: node gateway-client.mjs GATEWAY_URL MARKER_DIR
//        node gateway-client.mjs 'stdio:["mcp-tasks","wrap","--prefix","py","--","python",…]' MARKER_DIR
//          (the gateway started over stdio as a host starts it: `mcp-tasks wrap`)
// Output: one line per check, `ok - NAME` or `not ok - NAME: REASON`; the last line is exactly
// `N passed, M failed`. Exit code 1 if any check failed.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, markerDir] = process.argv.slice(2);
let passed = 0;
let failed = 0;
const sleep = ms => new Promise(r => setTimeout(r, ms));
const textOf = r => (r?.content ?? []).filter(c => c.type === 'text').map(c => c.text).join(' ');

async function check(name, fn) {
    try {
        await fn();
        passed++;
        console.log(`ok - ${name}`);
    } catch (e) {
        failed++;
        console.log(`not ok - ${name}: ${e?.message ?? e}`);
    }
}
function assert(cond, why) {
    if (!cond) throw new Error(why);
}

// Runs a call as a task to its end: the stream's messages, the task id and the result.
async function asTask(client, name, args, { onprogress, stopAfterCreated } = {}) {
    const out = { created: undefined, statuses: [], result: undefined, error: undefined };
    const stream = client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, {
        task: { ttl: 300_000 },
        onprogress,
        timeout: 30_000
    });
    for await (const m of stream) {
        if (m.type === 'taskCreated') out.created = m.task;
        else if (m.type === 'taskStatus') out.statuses.push(m.task);
        else if (m.type === 'result') out.result = m.result;
        else if (m.type === 'error') out.error = m.error;
        if (stopAfterCreated && out.created) break;
    }
    return out;
}

const watchdog = setTimeout(() => {
    console.log('not ok - watchdog: the run took over 90 s');
    console.log(`${passed} passed, ${failed + 1} failed`);
    process.exit(1);
}, 90_000);
watchdog.unref();

const client = new Client(
    { name: 'gateway-interop-ts', version: '0.1.0' },
    { capabilities: { elicitation: { form: {} } } }
);
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Bea' } }));
if (url.startsWith('stdio:')) {
    const [command, ...args] = JSON.parse(url.slice('stdio:'.length));
    await client.connect(new StdioClientTransport({ command, args, env: { ...process.env }, stderr: 'inherit' }));
} else {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
}

await check('the upstream tools are listed as task tools', async () => {
    const { tools } = await client.listTools();
    const count = tools.find(t => t.name === 'py_count');
    assert(count, `no py_count in ${tools.map(t => t.name)}`);
    assert(count.execution?.taskSupport === 'optional', JSON.stringify(count.execution));
});

await check('a task of an upstream tool reports progress and completes', async () => {
    const progress = [];
    const out = await asTask(client, 'py_count', { n: 5, delay: 0.2 }, { onprogress: p => progress.push(p) });
    assert(out.created, `no task: ${out.error?.message}`);
    assert(!out.error, out.error?.message);
    assert(textOf(out.result) === 'counted to 5', JSON.stringify(out.result));
    const seen = progress.length + out.statuses.filter(s => s.statusMessage).length;
    assert(seen >= 1, 'no progress');
});

await check("the upstream's elicitation is answered inside the task", async () => {
    const out = await asTask(client, 'py_ask_name', {});
    assert(!out.error, out.error?.message);
    assert(textOf(out.result) === 'hello Bea', JSON.stringify(out.result));
});

await check('cancelling the task cancels the upstream call', async () => {
    const out = await asTask(client, 'py_wait', { seconds: 60 }, { stopAfterCreated: true });
    assert(out.created, `no task: ${out.error?.message}`);
    await sleep(500);
    const cancelled = await client.experimental.tasks.cancelTask(out.created.taskId);
    assert(cancelled.status === 'cancelled', JSON.stringify(cancelled));
    const marker = join(markerDir, 'cancelled');
    for (let i = 0; i < 100 && !existsSync(marker); i++) await sleep(100);
    assert(existsSync(marker), 'the upstream handler was not cancelled');
});

await check('a plain call of an upstream tool still works', async () => {
    const r = await client.callTool({ name: 'py_count', arguments: { n: 2, delay: 0.05 } });
    assert(textOf(r) === 'counted to 2', JSON.stringify(r));
});

await client.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
