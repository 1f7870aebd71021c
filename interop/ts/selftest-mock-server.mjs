#!/usr/bin/env node
// A tiny, dependency-free stand-in for `mcp-tasks serve --demo`, used ONLY to
// self-test tasks-interop.mjs while the real server is not available. It
// implements the behaviour the interop script expects from the real demo
// tools (2025-11-25 tasks), including input requests inside tasks
// (elicitation/create and sampling/createMessage while the task is
// input_required). It is not a reference implementation.
//
//   stdio: node selftest-mock-server.mjs serve --demo --stdio --store memory:
//   http:  node selftest-mock-server.mjs serve --demo --listen 127.0.0.1:PORT
//          (POST /mcp answers with application/json, except tasks/result,
//          which answers with an SSE stream that carries the task's input
//          requests and then the result; GET /mcp is the standalone SSE
//          stream that carries progress notifications and the input requests
//          of tasks that have no open tasks/result stream)
//
// MOCK_BREAK=<name>[,<name>...] deliberately breaks behaviours so the
// self-test can prove the interop script notices:
//   no-progress            never send notifications/progress
//   no-get-sse             GET /mcp answers 405
//   no-input-required      status stays "working" while input is outstanding
//   no-related-task-meta   input requests carry no _meta related-task
//   sequential-inputs      multi_input asks for color only after name was answered
//   ignore-capabilities    send input requests even if the client did not declare the capability
//   wrong-haiku            write_haiku returns a changed text instead of the sampled one

import http from 'node:http';
import { randomUUID } from 'node:crypto';

const args = process.argv.slice(2);
const BREAK = new Set((process.env.MOCK_BREAK ?? '').split(',').filter(Boolean));

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
    { name: 'protocol_error_job', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } },
    {
        name: 'confirm_delete',
        inputSchema: { type: 'object', properties: { filename: { type: 'string' } }, required: ['filename'] },
        execution: { taskSupport: 'required' }
    },
    {
        name: 'write_haiku',
        inputSchema: { type: 'object', properties: { topic: { type: 'string' } }, required: ['topic'] },
        execution: { taskSupport: 'required' }
    },
    { name: 'multi_input', inputSchema: { type: 'object' }, execution: { taskSupport: 'required' } }
];

const tasks = new Map(); // taskId -> entry {task, session, outcome, waiters, ac, pending: Map<id, {msg, delivered, resolve}>, resultStreams: Set}
let nextServerRequestId = 1000;

function now() {
    return new Date().toISOString();
}

function rpcError(code, message) {
    const e = new Error(message);
    e.code = code;
    return e;
}

function textResult(text, isError = false) {
    return { result: { content: [{ type: 'text', text }], ...(isError ? { isError: true } : {}) } };
}

function touch(entry, status) {
    entry.task.status = status;
    entry.task.lastUpdatedAt = now();
}

// ---- input requests (server -> client) inside a task

/** Send one server->client request for `entry`; resolves with the client's JSON-RPC response message. */
function askClient(entry, method, params) {
    const id = nextServerRequestId++;
    const meta = BREAK.has('no-related-task-meta') ? {} : { _meta: { 'io.modelcontextprotocol/related-task': { taskId: entry.task.taskId } } };
    const msg = { jsonrpc: '2.0', id, method, params: { ...params, ...meta } };
    return new Promise(resolve => {
        entry.pending.set(id, { msg, delivered: false, resolve });
        if (BREAK.has('no-input-required')) return deliver(entry);
        touch(entry, 'input_required');
        deliver(entry);
    });
}

/** Deliver undelivered input requests: on an open tasks/result stream, else the GET stream (HTTP), else stdout (stdio). */
function deliver(entry) {
    for (const p of entry.pending.values()) {
        if (p.delivered) continue;
        const stream = [...entry.resultStreams][0];
        if (stream) stream(p.msg);
        else if (entry.session.sendOutOfBand(p.msg) === false) continue; // no GET stream yet: wait for a tasks/result
        p.delivered = true;
    }
}

/** A JSON-RPC response from the client: route it to the task that asked. */
function onClientResponse(msg) {
    for (const entry of tasks.values()) {
        const p = entry.pending.get(msg.id);
        if (!p) continue;
        entry.pending.delete(msg.id);
        if (entry.pending.size === 0 && entry.task.status === 'input_required') touch(entry, 'working');
        p.resolve(msg);
        return;
    }
    process.stderr.write(`mock: response for unknown request id ${JSON.stringify(msg.id)}\n`);
}

function elicit(entry, message, properties) {
    return askClient(entry, 'elicitation/create', {
        mode: 'form',
        message,
        requestedSchema: { type: 'object', properties, required: Object.keys(properties) }
    });
}

// Runs a tool; `notify(progress,total)` sends progress; returns {result} or {error}.
async function runTool(name, a, notify, signal, entry) {
    const caps = entry?.session.caps ?? {};
    const canElicit = caps.elicitation !== undefined || BREAK.has('ignore-capabilities');
    const canSample = caps.sampling !== undefined || BREAK.has('ignore-capabilities');
    if (name === 'greet') return textResult(`Hello, ${a?.name}!`);
    if (name === 'slow_compute') {
        return new Promise(resolve => {
            const secs = Number(a?.seconds ?? 1);
            let elapsed = 0;
            const iv = setInterval(() => {
                elapsed++;
                if (!BREAK.has('no-progress')) notify(elapsed, secs);
                if (elapsed >= secs) {
                    clearInterval(iv);
                    resolve(textResult(`computed for ${secs}s${a?.label ? ` [${a.label}]` : ''}`));
                }
            }, 1000);
            signal.onabort = () => clearInterval(iv);
        });
    }
    if (name === 'failing_job') return new Promise(r => setTimeout(() => r(textResult('job failed on purpose', true)), 1000));
    if (name === 'protocol_error_job')
        return new Promise(r => setTimeout(() => r({ error: { code: -32603, message: 'protocol_error_job failed on purpose' } }), 1000));
    if (['confirm_delete', 'write_haiku', 'multi_input'].includes(name)) await new Promise(r => setTimeout(r, 200));
    if (name === 'confirm_delete') {
        if (!canElicit) return textResult('confirm_delete needs a client with the elicitation capability', true);
        const resp = await elicit(entry, `Delete ${a?.filename}?`, { confirm: { type: 'boolean', description: 'Really delete?' } });
        if (resp.error) return textResult(`elicitation failed: ${resp.error.message}`, true);
        const ok = resp.result?.action === 'accept' && resp.result?.content?.confirm === true;
        return textResult(ok ? `Deleted ${a?.filename}` : `Kept ${a?.filename}`);
    }
    if (name === 'write_haiku') {
        if (!canSample) return textResult('write_haiku needs a client with the sampling capability', true);
        const resp = await askClient(entry, 'sampling/createMessage', {
            messages: [{ role: 'user', content: { type: 'text', text: `Write a haiku about ${a?.topic}.` } }],
            maxTokens: 100
        });
        if (resp.error) return textResult(`sampling failed: ${resp.error.message}`, true);
        const text = resp.result?.content?.text ?? '';
        return textResult(BREAK.has('wrong-haiku') ? text.toUpperCase() : text);
    }
    if (name === 'multi_input') {
        if (!canElicit) return textResult('multi_input needs a client with the elicitation capability', true);
        const askName = () => elicit(entry, 'Your name?', { name: { type: 'string' } });
        const askColor = () => elicit(entry, 'Favourite color?', { color: { type: 'string' } });
        let n, c;
        if (BREAK.has('sequential-inputs')) {
            n = await askName();
            c = await askColor();
        } else [n, c] = await Promise.all([askName(), askColor()]);
        if (n.error || c.error) return textResult('elicitation failed', true);
        return textResult(`name=${n.result?.content?.name}, color=${c.result?.content?.color}`);
    }
    return { error: { code: -32602, message: `unknown tool ${name}` } };
}

function finishTask(entry, outcome) {
    if (['completed', 'failed', 'cancelled'].includes(entry.task.status)) return;
    entry.outcome = outcome;
    touch(entry, outcome.error || outcome.result?.isError ? 'failed' : 'completed');
    for (const w of entry.waiters.splice(0)) w();
}

// handle one request; `session` has caps and sendOutOfBand (notifications, GET stream)
async function handle(msg, session, resultStream) {
    const p = msg.params ?? {};
    switch (msg.method) {
        case 'initialize':
            session.caps = p.capabilities ?? {};
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
                token !== undefined &&
                session.sendOutOfBand({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress, total } });
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
                const entry = { task, session, outcome: undefined, waiters: [], ac, pending: new Map(), resultStreams: new Set() };
                tasks.set(task.taskId, entry);
                // start the tool after the CreateTaskResult went out
                setImmediate(() => runTool(p.name, p.arguments, notify, ac.signal, entry).then(o => finishTask(entry, o)));
                return { task: { ...task } };
            }
            if (ts === 'required') throw rpcError(-32601, `${p.name} requires task augmentation`);
            const o = await runTool(p.name, p.arguments, notify, new AbortController().signal, undefined);
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
            if (resultStream) {
                e.resultStreams.add(resultStream);
                deliver(e);
            }
            try {
                if (!e.outcome && e.task.status !== 'cancelled') await new Promise(r => e.waiters.push(r));
            } finally {
                if (resultStream) e.resultStreams.delete(resultStream);
            }
            if (e.task.status === 'cancelled') throw rpcError(-32602, 'task was cancelled');
            if (e.outcome.error) throw rpcError(e.outcome.error.code, e.outcome.error.message);
            return { ...e.outcome.result, _meta: { 'io.modelcontextprotocol/related-task': { taskId: p.taskId } } };
        }
        case 'tasks/list':
            return { tasks: [...tasks.values()].filter(e => e.session === session).map(e => ({ ...e.task })) };
        case 'tasks/cancel': {
            const e = tasks.get(p.taskId);
            if (!e) throw rpcError(-32602, `task not found: ${p.taskId}`);
            if (['completed', 'failed', 'cancelled'].includes(e.task.status))
                throw rpcError(-32602, `cannot cancel task in terminal status ${e.task.status}`);
            e.ac.abort();
            touch(e, 'cancelled');
            for (const w of e.waiters.splice(0)) w();
            return { ...e.task };
        }
        default:
            throw rpcError(-32601, `method not found: ${msg.method}`);
    }
}

async function respond(msg, session, resultStream) {
    try {
        return { jsonrpc: '2.0', id: msg.id, result: await handle(msg, session, resultStream) };
    } catch (e) {
        return { jsonrpc: '2.0', id: msg.id, error: { code: e.code ?? -32603, message: e.message } };
    }
}

if (args.includes('--stdio')) {
    const write = m => {
        process.stdout.write(JSON.stringify(m) + '\n');
        return true;
    };
    const session = { caps: {}, sendOutOfBand: write };
    let buf = '';
    process.stdin.on('data', chunk => {
        buf += chunk;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, i).trim();
            buf = buf.slice(i + 1);
            if (!line) continue;
            const msg = JSON.parse(line);
            if (msg.method && msg.id !== undefined) respond(msg, session, undefined).then(write);
            else if (!msg.method && msg.id !== undefined) onClientResponse(msg);
        }
    });
    process.stdin.on('end', () => process.exit(0));
} else {
    const listen = args[args.indexOf('--listen') + 1] ?? '127.0.0.1:0';
    const [host, port] = listen.split(':');
    const sessions = new Map(); // Mcp-Session-Id -> {caps, sse, sendOutOfBand}
    const sseEvent = m => `event: message\ndata: ${JSON.stringify(m)}\n\n`;
    const newSession = () => {
        const s = { id: randomUUID(), caps: {}, sse: undefined };
        s.sendOutOfBand = m => {
            if (!s.sse) return false;
            s.sse.write(sseEvent(m));
            return true;
        };
        sessions.set(s.id, s);
        return s;
    };
    const server = http.createServer((req, res) => {
        const session = sessions.get(req.headers['mcp-session-id']);
        if (req.method === 'GET') {
            if (BREAK.has('no-get-sse') || !session) {
                res.writeHead(BREAK.has('no-get-sse') ? 405 : 404).end();
                return;
            }
            res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
            res.write(': open\n\n');
            session.sse = res;
            req.on('close', () => {
                if (session.sse === res) session.sse = undefined;
            });
            // input requests waiting for a stream
            for (const e of tasks.values()) if (e.session === session) deliver(e);
            return;
        }
        if (req.method === 'DELETE') {
            if (session) sessions.delete(session.id);
            return res.writeHead(200).end();
        }
        if (req.method !== 'POST') return res.writeHead(405).end();
        let body = '';
        req.on('data', c => (body += c));
        req.on('end', async () => {
            const msg = JSON.parse(body);
            const s = msg.method === 'initialize' ? newSession() : session;
            if (!s) return res.writeHead(404).end('unknown or missing Mcp-Session-Id');
            const headers = { 'mcp-session-id': s.id };
            if (msg.id === undefined) return res.writeHead(202, headers).end(); // notification
            if (!msg.method) {
                onClientResponse(msg); // the client's answer to an input request
                return res.writeHead(202, headers).end();
            }
            if (msg.method === 'tasks/result') {
                res.writeHead(200, { ...headers, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
                const stream = m => res.write(sseEvent(m));
                const out = await respond(msg, s, stream);
                res.end(sseEvent(out));
                return;
            }
            const out = await respond(msg, s, undefined);
            res.writeHead(200, { ...headers, 'content-type': 'application/json' }).end(JSON.stringify(out));
        });
    });
    server.listen(Number(port), host, () => {
        console.error(`listening on http://${host}:${server.address().port}/mcp`);
    });
}
