#!/usr/bin/env node
// Smoke test and rough single-client latency of the ts-sdk-v1 peer (2025-11-25 wire).
//
//   node smoke.mjs                 start server.mjs here, run, stop it
//   node smoke.mjs --json          the same with the server's --json (JSON replies instead of SSE)
//   node smoke.mjs http://127.0.0.1:PORT/mcp   use a running server
//   --n N   requests per timed loop (default 300); --quiet  no transcript
//   TTL_MS  params.task.ttl sent with each create (default 60000)
//
// One round is printed as a transcript: initialize, notifications/initialized, tools/call noop as
// a task, tasks/get until completed, tasks/result; then tasks/list and tasks/cancel once; then
// N x create, N x get, N x result, each timed on one keep-alive connection; then DELETE (the
// session ends).

import { fileURLToPath } from 'node:url';
import { Client, replyOf, show, timeLoop, fmt, check, parseArgs, startServer } from '../smoke-lib.mjs';

const opts = parseArgs(process.argv.slice(2));
const here = fileURLToPath(new URL('.', import.meta.url));
const server = opts.url ? null : await startServer(process.execPath, [`${here}server.mjs`, ...opts.serverArgs]);
const url = opts.url ?? server.url;
const VERSION = '2025-11-25';
// Without params.task.ttl the SDK's InMemoryTaskStore keeps the task (and its result) forever.
const TTL_MS = Number(process.env.TTL_MS ?? 60000);

const c = new Client(url);
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

try {
    console.log(`# ts-sdk-v1 peer at ${url}\n`);
    const init = await rpc(
        'initialize',
        { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: 'smoke', version: '1' } },
        'initialize'
    );
    check(init.result?.protocolVersion === VERSION, `initialize: ${JSON.stringify(init)}`);
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
        if (['completed', 'failed', 'cancelled'].includes(status)) break;
        await new Promise(r => setTimeout(r, 10));
    }
    check(status === 'completed', `task ended ${status}`);
    const result = await rpc('tasks/result', { taskId }, 'result: tasks/result');
    check(result.result?.content?.[0]?.text === 'ok', `tasks/result: ${JSON.stringify(result)}`);
    const list = await rpc('tasks/list', undefined, opts.quiet ? undefined : 'tasks/list');
    check(list.result?.tasks?.some(t => t.taskId === taskId), 'tasks/list lacks the task');
    const cancel = await rpc('tasks/cancel', { taskId }, opts.quiet ? undefined : 'tasks/cancel (the task is already completed)');
    check(cancel.error?.code === -32602, 'cancel of a completed task is not -32602');

    const ids = [];
    const sCreate = await timeLoop(opts.n, async () => {
        const r = await rpc('tools/call', { name: 'noop', arguments: {}, task: { ttl: TTL_MS } });
        ids.push(r.result.task.taskId);
    });
    const sGet = await timeLoop(opts.n, async i => {
        const r = await rpc('tasks/get', { taskId: ids[i] });
        check(r.result?.status === 'completed', `tasks/get: ${JSON.stringify(r)}`);
    });
    const sResult = await timeLoop(opts.n, async i => {
        const r = await rpc('tasks/result', { taskId: ids[i] });
        check(r.result?.content?.[0]?.text === 'ok', `tasks/result: ${JSON.stringify(r)}`);
    });
    console.log(`# single client, sequential, keep-alive (${opts.serverArgs.includes('--json') ? 'JSON' : 'SSE'} replies)`);
    console.log(fmt('create', sCreate));
    console.log(fmt('get', sGet));
    console.log(fmt('result', sResult));
    // End the session (DELETE), as a well-behaved client does; the server then drops the session's
    // McpServer and transport.
    const del = await c.request('DELETE', { 'Mcp-Session-Id': session, 'MCP-Protocol-Version': VERSION });
    check(del.status === 200, `DELETE: HTTP ${del.status}`);
    console.log('\nsmoke: ok');
} finally {
    c.close();
    if (server) await server.stop();
}
