#!/usr/bin/env node
// Smoke test and rough single-client latency of the rmcp peer (2026-07-28 wire + the tasks
// extension `io.modelcontextprotocol/tasks`).
//
//   node smoke.mjs                 start the built binary, run, stop it
//   node smoke.mjs --json          the same with the server's --json (JSON replies instead of SSE)
//   node smoke.mjs http://127.0.0.1:PORT/mcp   use a running server
//   --n N   requests per timed loop (default 300); --quiet  no transcript
// The binary: $PEER_RMCP_BIN, else $CARGO_TARGET_DIR/release/mcp-peer-rmcp, else
// ~/.cache/mcp-tasks/peers-target/release/mcp-peer-rmcp (where build.sh puts it).
//
// No initialize on this wire: every request carries MCP-Protocol-Version, Mcp-Method (and Mcp-Name
// for tools/call and tasks/*) headers and params._meta with the protocol version and the client's
// capabilities (declaring the tasks extension). One round is printed as a transcript: tools/call
// noop -> CreateTaskResult, tasks/get until completed (the result is inline), tasks/cancel once;
// then N x create and N x get, each timed on one keep-alive connection.

import os from 'node:os';
import path from 'node:path';
import { Client, replyOf, show, timeLoop, fmt, check, parseArgs, startServer } from '../smoke-lib.mjs';

const opts = parseArgs(process.argv.slice(2));
const bin =
    process.env.PEER_RMCP_BIN ??
    path.join(process.env.CARGO_TARGET_DIR ?? path.join(os.homedir(), '.cache/mcp-tasks/peers-target'), 'release/mcp-peer-rmcp');
const server = opts.url ? null : await startServer(bin, opts.serverArgs);
const url = opts.url ?? server.url;
const VERSION = '2026-07-28';
const EXT = 'io.modelcontextprotocol/tasks';
const META = {
    'io.modelcontextprotocol/protocolVersion': VERSION,
    'io.modelcontextprotocol/clientCapabilities': { extensions: { [EXT]: {} } }
};

const c = new Client(url);
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

try {
    console.log(`# rmcp peer at ${url}\n`);
    const create = await rpc('tools/call', { name: 'noop', arguments: {} }, 'noop', 'create: tools/call noop (a task, as the request declares the extension)');
    check(create.result?.resultType === 'task', `not a task: ${JSON.stringify(create)}`);
    const taskId = create.result.taskId;
    let got;
    for (let i = 0; i < 100; i++) {
        got = await rpc('tasks/get', { taskId }, taskId, i === 0 ? 'get: tasks/get (result inline once completed)' : undefined);
        check(got.result?.status, `tasks/get: ${JSON.stringify(got)}`);
        if (['completed', 'failed', 'cancelled'].includes(got.result.status)) break;
        await new Promise(r => setTimeout(r, 10));
    }
    check(got.result.status === 'completed', `task ended ${got.result.status}`);
    check(got.result.result?.content?.[0]?.text === 'ok', `no inline result: ${JSON.stringify(got)}`);
    const cancel = await rpc('tasks/cancel', { taskId }, taskId, opts.quiet ? undefined : 'tasks/cancel (the task is already completed)');
    check(cancel.result, `tasks/cancel: ${JSON.stringify(cancel)}`);

    const ids = [];
    const sCreate = await timeLoop(opts.n, async () => {
        const r = await rpc('tools/call', { name: 'noop', arguments: {} }, 'noop');
        ids.push(r.result.taskId);
    });
    const sGet = await timeLoop(opts.n, async i => {
        const r = await rpc('tasks/get', { taskId: ids[i] }, ids[i]);
        check(r.result?.status === 'completed', `tasks/get: ${JSON.stringify(r)}`);
    });
    console.log(`# single client, sequential, keep-alive (${opts.serverArgs.includes('--json') ? 'JSON' : 'SSE'} replies)`);
    console.log(fmt('create', sCreate));
    console.log(fmt('get (+result)', sGet));
    console.log('\nsmoke: ok');
} finally {
    c.close();
    if (server) await server.stop();
}
