#!/usr/bin/env node
// Smoke test and rough single-client latency of the turul peers: mcp-peer-turul-2025 (MCP 2025-11-25,
// core tasks) and mcp-peer-turul-2026 (MCP 2026-07-28 + the tasks extension), on either task store.
//
//   node smoke.mjs [--wire 2025|2026] [--store memory|sqlite]   start the built binary, run, stop it
//   node smoke.mjs --wire 2026 http://127.0.0.1:PORT/mcp         use a running server
//   --n N   requests per timed loop (default 300); --quiet  no transcript
//   TTL_MS  params.task.ttl sent with each 2025 create (default 60000)
// Other words (--store sqlite, --db PATH) go to the server. The binary: $PEER_TURUL_2025_BIN or
// $PEER_TURUL_2026_BIN, else $CARGO_TARGET_DIR/release/mcp-peer-turul-<wire>, else
// ~/.cache/mcp-tasks/peers-target/release/mcp-peer-turul-<wire> (where build.sh puts it).
//
// 2025: one round as a transcript (initialize, notifications/initialized, tools/call noop as a task,
// tasks/get until completed, tasks/result, tasks/list, tasks/cancel), then N x create, N x get,
// N x result on one keep-alive connection, then DELETE (the session ends).
// 2026: no initialize; every request carries MCP-Protocol-Version, Mcp-Method, Mcp-Name and
// params._meta declaring the tasks extension. One round (tools/call noop, tasks/get until completed
// with the result inline, tasks/cancel), then N x create and N x get.

import os from 'node:os';
import path from 'node:path';
import { Client, replyOf, show, timeLoop, fmt, check, parseArgs, startServer } from '../smoke-lib.mjs';

const argv = process.argv.slice(2);
let wire = '2025';
const w = argv.indexOf('--wire');
if (w >= 0) {
    wire = argv[w + 1];
    argv.splice(w, 2);
}
check(wire === '2025' || wire === '2026', `--wire is 2025 or 2026, not ${wire}`);
const opts = parseArgs(argv);
const bin =
    process.env[`PEER_TURUL_${wire}_BIN`] ??
    path.join(
        process.env.CARGO_TARGET_DIR ?? path.join(os.homedir(), '.cache/mcp-tasks/peers-target'),
        `release/mcp-peer-turul-${wire}`
    );
const server = opts.url ? null : await startServer(bin, opts.serverArgs);
const url = opts.url ?? server.url;
const store = opts.serverArgs.includes('sqlite') ? 'sqlite' : 'memory';
const TERMINAL = ['completed', 'failed', 'cancelled'];
const c = new Client(url);

async function smoke2025() {
    const VERSION = '2025-11-25';
    const TTL_MS = Number(process.env.TTL_MS ?? 60000);
    let session;
    const headers = () => ({
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        ...(session ? { 'Mcp-Session-Id': session, 'MCP-Protocol-Version': VERSION } : {})
    });
    async function rpc(method, params, title) {
        const id = c.nextId++;
        const body = { jsonrpc: '2.0', id, method, ...(params ? { params } : {}) };
        const h = headers();
        const res = await c.post(h, body);
        if (title && !opts.quiet) show(title, h, body, res);
        const reply = replyOf(res, id);
        if (res.headers['mcp-session-id']) session = res.headers['mcp-session-id'];
        return reply;
    }

    const init = await rpc(
        'initialize',
        { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: 'smoke', version: '1' } },
        'initialize'
    );
    check(init.result?.protocolVersion === VERSION, `initialize: ${JSON.stringify(init)}`);
    check(init.result?.capabilities?.tasks?.requests?.tools?.call, 'no tasks capability for tools/call');
    check(session, 'no Mcp-Session-Id');
    {
        const h = headers();
        const body = { jsonrpc: '2.0', method: 'notifications/initialized' };
        const res = await c.post(h, body);
        if (!opts.quiet) show('notifications/initialized', h, body, res);
        check(res.status === 202, `notifications/initialized: HTTP ${res.status}`);
    }

    const create = await rpc('tools/call', { name: 'noop', arguments: {}, task: { ttl: TTL_MS } }, 'create: tools/call noop as a task');
    const taskId = create.result?.task?.taskId;
    check(taskId, `no task id: ${JSON.stringify(create)}`);
    let status;
    for (let i = 0; i < 100; i++) {
        const got = await rpc('tasks/get', { taskId }, i === 0 ? 'get: tasks/get' : undefined);
        status = got.result?.status;
        check(status, `tasks/get: ${JSON.stringify(got)}`);
        if (TERMINAL.includes(status)) break;
        await new Promise(r => setTimeout(r, 10));
    }
    check(status === 'completed', `task ended ${status}`);
    const result = await rpc('tasks/result', { taskId }, 'result: tasks/result');
    check(result.result?.content?.[0]?.text === 'ok', `tasks/result: ${JSON.stringify(result)}`);
    const list = await rpc('tasks/list', undefined, opts.quiet ? undefined : 'tasks/list');
    check(list.result?.tasks?.some(t => t.taskId === taskId), 'tasks/list lacks the task');
    const cancel = await rpc('tasks/cancel', { taskId }, opts.quiet ? undefined : 'tasks/cancel (the task is already completed)');
    check(cancel.error?.code === -32602, `cancel of a completed task is not -32602: ${JSON.stringify(cancel)}`);

    const ids = [];
    const sCreate = await timeLoop(opts.n, async () => {
        const r = await rpc('tools/call', { name: 'noop', arguments: {}, task: { ttl: TTL_MS } });
        check(r.result?.task?.taskId, `tools/call: ${JSON.stringify(r)}`);
        ids.push(r.result.task.taskId);
    });
    const sGet = await timeLoop(opts.n, async i => {
        const r = await rpc('tasks/get', { taskId: ids[i] });
        check(TERMINAL.includes(r.result?.status) || r.result?.status === 'working', `tasks/get: ${JSON.stringify(r)}`);
    });
    const sResult = await timeLoop(opts.n, async i => {
        const r = await rpc('tasks/result', { taskId: ids[i] });
        check(r.result?.content?.[0]?.text === 'ok', `tasks/result: ${JSON.stringify(r)}`);
    });
    console.log(`# single client, sequential, keep-alive (turul 2025-11-25, ${store} store)`);
    console.log(fmt('create', sCreate));
    console.log(fmt('get', sGet));
    console.log(fmt('result', sResult));
    // turul answers a DELETE without an Accept header with HTTP 400.
    const del = await c.request('DELETE', { Accept: 'application/json, text/event-stream', 'Mcp-Session-Id': session, 'MCP-Protocol-Version': VERSION });
    check(del.status >= 200 && del.status < 300, `DELETE: HTTP ${del.status} ${del.text}`);
}

async function smoke2026() {
    const VERSION = '2026-07-28';
    const EXT = 'io.modelcontextprotocol/tasks';
    const META = {
        'io.modelcontextprotocol/protocolVersion': VERSION,
        'io.modelcontextprotocol/clientCapabilities': { extensions: { [EXT]: {} } }
    };
    async function rpc(method, params, name, title) {
        const id = c.nextId++;
        const body = { jsonrpc: '2.0', id, method, params: { ...params, _meta: META } };
        const h = {
            'Content-Type': 'application/json',
            Accept: 'application/json, text/event-stream',
            'MCP-Protocol-Version': VERSION,
            'Mcp-Method': method,
            ...(name ? { 'Mcp-Name': name } : {})
        };
        const res = await c.post(h, body);
        if (title && !opts.quiet) show(title, h, body, res);
        return replyOf(res, id);
    }

    const create = await rpc('tools/call', { name: 'noop', arguments: {} }, 'noop', 'create: tools/call noop (a task, as the request declares the extension)');
    check(create.result?.resultType === 'task', `not a task: ${JSON.stringify(create)}`);
    const taskId = create.result.taskId;
    let got;
    for (let i = 0; i < 100; i++) {
        got = await rpc('tasks/get', { taskId }, taskId, i === 0 ? 'get: tasks/get (result inline once completed)' : undefined);
        check(got.result?.status, `tasks/get: ${JSON.stringify(got)}`);
        if (TERMINAL.includes(got.result.status)) break;
        await new Promise(r => setTimeout(r, 10));
    }
    check(got.result.status === 'completed', `task ended ${got.result.status}`);
    check(got.result.result?.content?.[0]?.text === 'ok', `no inline result: ${JSON.stringify(got)}`);
    const cancel = await rpc('tasks/cancel', { taskId }, taskId, opts.quiet ? undefined : 'tasks/cancel (the task is already completed)');
    check(cancel.result, `tasks/cancel: ${JSON.stringify(cancel)}`);

    const ids = [];
    const sCreate = await timeLoop(opts.n, async () => {
        const r = await rpc('tools/call', { name: 'noop', arguments: {} }, 'noop');
        check(r.result?.taskId, `tools/call: ${JSON.stringify(r)}`);
        ids.push(r.result.taskId);
    });
    const sGet = await timeLoop(opts.n, async i => {
        const r = await rpc('tasks/get', { taskId: ids[i] }, ids[i]);
        check(r.result?.status === 'completed', `tasks/get: ${JSON.stringify(r)}`);
    });
    console.log(`# single client, sequential, keep-alive (turul 2026-07-28, ${store} store)`);
    console.log(fmt('create', sCreate));
    console.log(fmt('get (+result)', sGet));
}

try {
    console.log(`# turul peer (${wire}) at ${url}\n`);
    await (wire === '2025' ? smoke2025() : smoke2026());
    console.log('\nsmoke: ok');
} finally {
    c.close();
    if (server) await server.stop();
}
