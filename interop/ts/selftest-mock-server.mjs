#!/usr/bin/env node
// A tiny, dependency-free stand-in for `mcp-tasks serve --demo`, used ONLY to
// self-test tasks-interop.mjs while the real server is not available. It
// implements the behaviour the interop script expects from the real demo
// tools (2025-11-25 tasks). It is not a reference implementation.
//
//   stdio: node selftest-mock-server.mjs serve --demo --stdio --store memory:
//   http:  node selftest-mock-server.mjs serve --demo --listen 127.0.0.1:PORT
//          (POST /mcp answers with application/json, GET /mcp is the
//          standalone SSE stream that carries progress notifications)
//
// MOCK_BREAK=<name> deliberately breaks one behaviour so the self-test can
// prove the interop script notices (e.g. MOCK_BREAK=no-progress).

import http from 'node:http';
import { randomUUID } from 'node:crypto';

const args = process.argv.slice(2);
const BREAK = process.env.MOCK_BREAK ?? '';

const TOOLS = [
    {
        name: 'greet',
        inputSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
        execution: { taskSupport: 'forbidden' }
    },
    {
        name: 'slow_compute',
        inputSchema: { type: 'object', properties: { seconds: { type: 'number' }, label: { type: 'string' } }, required: ['seconds'] },
        execution: { taskSupport: 'optional' }
    },
    { name: 'failing_job', inputSchema: { type: 'object' }, execution: { taskSupport: 'required' } },
    { name: 'protocol_error_job', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } }
];

const tasks = new Map(); // taskId -> {task, outcome: {result}|{error}|undefined, waiters: [], timer}

function now() {
    return new Date().toISOString();
}

function rpcError(code, message) {
    const e = new Error(message);
    e.code = code;
    return e;
}

// Runs a tool; `notify(progress,total)` sends progress; returns {result} or {error}.
function runTool(name, a, notify, signal) {
    return new Promise(resolve => {
        if (name === 'greet') return resolve({ result: { content: [{ type: 'text', text: `Hello, ${a?.name}!` }] } });
        if (name === 'slow_compute') {
            const secs = Number(a?.seconds ?? 1);
            let elapsed = 0;
            const iv = setInterval(() => {
                elapsed++;
                if (BREAK !== 'no-progress') notify(elapsed, secs);
                if (elapsed >= secs) {
                    clearInterval(iv);
                    resolve({ result: { content: [{ type: 'text', text: `computed for ${secs}s${a?.label ? ` [${a.label}]` : ''}` }] } });
                }
            }, 1000);
            signal.onabort = () => clearInterval(iv);
            return;
        }
        if (name === 'failing_job')
            return setTimeout(() => resolve({ result: { content: [{ type: 'text', text: 'job failed on purpose' }], isError: true } }), 1000);
        if (name === 'protocol_error_job')
            return setTimeout(() => resolve({ error: { code: -32603, message: 'protocol_error_job failed on purpose' } }), 1000);
        resolve({ error: { code: -32602, message: `unknown tool ${name}` } });
    });
}

function finishTask(entry, outcome) {
    if (['completed', 'failed', 'cancelled'].includes(entry.task.status)) return;
    entry.outcome = outcome;
    entry.task.status = outcome.error || outcome.result?.isError ? 'failed' : 'completed';
    entry.task.lastUpdatedAt = now();
    for (const w of entry.waiters.splice(0)) w();
}

// handle one request; `send` emits notifications out of band
async function handle(msg, send) {
    const p = msg.params ?? {};
    switch (msg.method) {
        case 'initialize':
            return {
                protocolVersion: '2025-11-25',
                capabilities: { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
                serverInfo: { name: 'selftest-mock', version: '0.0.0' }
            };
        case 'ping':
            return {};
        case 'tools/list':
            return { tools: TOOLS };
        case 'tools/call': {
            const tool = TOOLS.find(t => t.name === p.name);
            if (!tool) throw rpcError(-32602, `unknown tool ${p.name}`);
            const token = p._meta?.progressToken;
            const notify = (progress, total) =>
                token !== undefined && send({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress, total } });
            const ts = tool.execution.taskSupport;
            if (p.task) {
                if (ts === 'forbidden') throw rpcError(-32601, `${p.name} does not support tasks`);
                const ac = new AbortController();
                const task = {
                    taskId: randomUUID(),
                    status: 'working',
                    ttl: p.task.ttl ?? null,
                    createdAt: now(),
                    lastUpdatedAt: now(),
                    pollInterval: 500
                };
                const entry = { task, outcome: undefined, waiters: [], ac };
                tasks.set(task.taskId, entry);
                runTool(p.name, p.arguments, notify, ac.signal).then(o => finishTask(entry, o));
                return { task: { ...task } };
            }
            if (ts === 'required') throw rpcError(-32601, `${p.name} requires task augmentation`);
            const o = await runTool(p.name, p.arguments, notify, new AbortController().signal);
            if (o.error) throw rpcError(o.error.code, o.error.message);
            return o.result;
        }
        case 'tasks/get': {
            const e = tasks.get(p.taskId);
            if (!e) throw rpcError(-32602, `task not found: ${p.taskId}`);
            return { ...e.task };
        }
        case 'tasks/result': {
            const e = tasks.get(p.taskId);
            if (!e) throw rpcError(-32602, `task not found: ${p.taskId}`);
            if (!e.outcome && e.task.status !== 'cancelled') await new Promise(r => e.waiters.push(r));
            if (e.task.status === 'cancelled') throw rpcError(-32602, 'task was cancelled');
            if (e.outcome.error) throw rpcError(e.outcome.error.code, e.outcome.error.message);
            return { ...e.outcome.result, _meta: { 'io.modelcontextprotocol/related-task': { taskId: p.taskId } } };
        }
        case 'tasks/list':
            return { tasks: [...tasks.values()].map(e => ({ ...e.task })) };
        case 'tasks/cancel': {
            const e = tasks.get(p.taskId);
            if (!e) throw rpcError(-32602, `task not found: ${p.taskId}`);
            if (['completed', 'failed', 'cancelled'].includes(e.task.status))
                throw rpcError(-32602, `cannot cancel task in terminal status ${e.task.status}`);
            e.ac.abort();
            e.task.status = 'cancelled';
            e.task.lastUpdatedAt = now();
            for (const w of e.waiters.splice(0)) w();
            return { ...e.task };
        }
        default:
            throw rpcError(-32601, `method not found: ${msg.method}`);
    }
}

async function respond(msg, send) {
    try {
        return { jsonrpc: '2.0', id: msg.id, result: await handle(msg, send) };
    } catch (e) {
        return { jsonrpc: '2.0', id: msg.id, error: { code: e.code ?? -32603, message: e.message } };
    }
}

if (args.includes('--stdio')) {
    const write = m => process.stdout.write(JSON.stringify(m) + '\n');
    let buf = '';
    process.stdin.on('data', chunk => {
        buf += chunk;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, i).trim();
            buf = buf.slice(i + 1);
            if (!line) continue;
            const msg = JSON.parse(line);
            if (msg.method && msg.id !== undefined) respond(msg, write).then(write);
        }
    });
    process.stdin.on('end', () => process.exit(0));
} else {
    const listen = args[args.indexOf('--listen') + 1] ?? '127.0.0.1:0';
    const [host, port] = listen.split(':');
    let sse; // standalone GET stream (single session is enough here)
    const sessionId = randomUUID();
    const sendOutOfBand = m => sse?.write(`event: message\ndata: ${JSON.stringify(m)}\n\n`);
    const server = http.createServer((req, res) => {
        if (req.method === 'GET') {
            if (BREAK === 'no-get-sse') {
                res.writeHead(405).end();
                return;
            }
            res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
            res.write(': open\n\n');
            sse = res;
            req.on('close', () => {
                if (sse === res) sse = undefined;
            });
            return;
        }
        if (req.method === 'DELETE') return res.writeHead(200).end();
        if (req.method !== 'POST') return res.writeHead(405).end();
        let body = '';
        req.on('data', c => (body += c));
        req.on('end', async () => {
            const msg = JSON.parse(body);
            if (msg.method && msg.id === undefined) return res.writeHead(202, { 'mcp-session-id': sessionId }).end();
            const out = await respond(msg, sendOutOfBand);
            res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': sessionId }).end(JSON.stringify(out));
        });
    });
    server.listen(Number(port), host, () => {
        console.error(`listening on http://${host}:${server.address().port}/mcp`);
    });
}
