#!/usr/bin/env node
// Interop checks for mcp-tasks using the OFFICIAL MCP TypeScript SDK v1
// (@modelcontextprotocol/sdk, pinned in package.json) and its experimental
// tasks client: client.experimental.tasks.{callToolStream,getTask,
// getTaskResult,listTasks,cancelTask}. Also input requests inside tasks
// (2025-11-25 input_required): the client declares elicitation + sampling
// and answers elicitation/create and sampling/createMessage.
//
// Usage:
//   node tasks-interop.mjs http  http://127.0.0.1:PORT/mcp
//   node tasks-interop.mjs stdio /path/to/mcp-tasks
//     (spawned as: mcp-tasks serve --demo --stdio --store memory:)
//
// Output: one line per check, `ok - NAME` or `not ok - NAME: REASON`,
// diagnostics on lines starting with `# `, and the final line
// `N passed, M failed`. Exit code 1 if any check failed (or usage error: 2).
//
// Environment:
//   MCP_INTEROP_TRACE=1   print every JSON-RPC message sent/received to stderr
//   MCP_INTEROP_STDIO_ARGS='serve --demo --stdio --store memory:'  override the
//                         args used to spawn the binary in stdio mode

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
    CallToolResultSchema,
    CreateMessageRequestSchema,
    ElicitRequestSchema,
    ErrorCode,
    McpError,
    RELATED_TASK_META_KEY,
    ResultSchema,
    TaskStatusNotificationSchema
} from '@modelcontextprotocol/sdk/types.js';

const SCRIPT_BUDGET_MS = 95_000; // whole script must stay below 100 s
const REQUEST_TIMEOUT_MS = 10_000; // per JSON-RPC request (SDK default is 60 s)
const TASK_TTL_MS = 300_000; // ttl we ask for on every task-augmented call

// ---------------------------------------------------------------- arguments
const [transportKind, target] = process.argv.slice(2);
if (!['http', 'stdio'].includes(transportKind) || !target) {
    console.error('usage: node tasks-interop.mjs http <url>   (e.g. http://127.0.0.1:8080/mcp)');
    console.error('       node tasks-interop.mjs stdio <path-to-mcp-tasks-binary>');
    process.exit(2);
}
const TRACE = process.env.MCP_INTEROP_TRACE === '1';

// ---------------------------------------------------------------- reporting
let passed = 0;
let failed = 0;
const startedAt = Date.now();

function diag(msg) {
    for (const line of String(msg).split('\n')) console.log(`# ${line}`);
}

function describeError(e) {
    if (e === undefined || e === null) return String(e);
    if (e instanceof McpError) {
        const data = e.data !== undefined ? ` data=${safeJson(e.data)}` : '';
        // e.message is already "MCP error <code>: <server message>"
        return `${e.message}${data}`;
    }
    if (e instanceof Error) {
        let s = `${e.name}: ${e.message}`;
        // Node's fetch wraps the interesting part (ECONNREFUSED ...) in .cause
        let c = e.cause;
        for (let depth = 0; c && depth < 3; depth++, c = c.cause) {
            s += ` (cause: ${c.code ? c.code + ' ' : ''}${c.message ?? String(c)})`;
        }
        if (e.code !== undefined && !(e instanceof McpError)) s += ` [code=${e.code}]`;
        return s;
    }
    return safeJson(e);
}

function safeJson(v) {
    try {
        return JSON.stringify(v);
    } catch {
        return String(v);
    }
}

class CheckFailure extends Error {}
function assert(cond, msg) {
    if (!cond) throw new CheckFailure(msg);
}

function withTimeout(promise, ms, what) {
    let timer;
    const t = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new CheckFailure(`timed out after ${ms} ms (${what})`)), ms);
    });
    return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

/**
 * Run one check, bounded in time. Returns true when it passed. `explain`
 * (optional) returns extra text appended to the failure reason, e.g. what
 * arrived on the wire before a timeout.
 */
async function check(name, timeoutMs, fn, explain) {
    const remaining = SCRIPT_BUDGET_MS - (Date.now() - startedAt);
    const budget = Math.max(1, Math.min(timeoutMs, remaining - 500));
    try {
        await withTimeout(Promise.resolve().then(fn), budget, name);
        passed++;
        console.log(`ok - ${name}`);
        return true;
    } catch (e) {
        failed++;
        let reason = e instanceof CheckFailure ? e.message : describeError(e);
        if (explain) {
            try {
                const more = explain();
                if (more) reason += ` [${more}]`;
            } catch {
                /* explanation is best effort */
            }
        }
        console.log(`not ok - ${name}: ${reason.replace(/\n/g, ' ')}`);
        return false;
    }
}

function skip(name, why) {
    failed++;
    console.log(`not ok - ${name}: skipped, ${why}`);
}

/** Expect `promise` to reject with an McpError carrying `code`. */
async function expectMcpError(promise, code, what) {
    let value;
    try {
        value = await promise;
    } catch (e) {
        if (e instanceof CheckFailure) throw e;
        assert(e instanceof McpError, `${what}: expected McpError ${code}, got ${describeError(e)}`);
        assert(e.code === code, `${what}: expected error code ${code}, got ${describeError(e)}`);
        return e;
    }
    throw new CheckFailure(`${what}: expected error ${code}, got success ${safeJson(value)}`);
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

function textOf(result) {
    return (result?.content ?? [])
        .filter(c => c.type === 'text')
        .map(c => c.text)
        .join('\n');
}

function isIsoDate(s) {
    return typeof s === 'string' && !Number.isNaN(Date.parse(s));
}

/**
 * Drain a callToolStream generator into a summary object. Stops early
 * (returning the generator, which stops the SDK's polling loop) when
 * `stopAfter` returns true for a message.
 */
async function drain(stream, stopAfter) {
    const out = { created: undefined, statuses: [], result: undefined, error: undefined, messages: [] };
    for await (const msg of stream) {
        out.messages.push(msg.type);
        if (msg.type === 'taskCreated') out.created = msg.task;
        else if (msg.type === 'taskStatus') out.statuses.push(msg.task);
        else if (msg.type === 'result') out.result = msg.result;
        else if (msg.type === 'error') out.error = msg.error;
        if (stopAfter?.(msg)) break; // `break` calls stream.return(): no further tasks/get polls
    }
    return out;
}

// ---------------------------------------------------------------- watchdog
let transport;
const watchdog = setTimeout(() => {
    failed++;
    console.log(`not ok - script watchdog: whole run exceeded ${SCRIPT_BUDGET_MS} ms, aborting`);
    finish(true);
}, SCRIPT_BUDGET_MS + 2_000);
watchdog.unref();

let finishing = false;
async function finish(fromWatchdog = false) {
    if (finishing) return;
    finishing = true;
    if (sdkErrors.length > 0) {
        diag('SDK onerror reports (protocol-level complaints from the client side):');
        for (const e of sdkErrors.slice(0, 10)) diag(`  ${e}`);
    }
    if (failed > 0 && wire.stderrTail.length > 0) {
        diag('last lines of server stderr:');
        for (const l of wire.stderrTail.slice(-20)) diag(`  ${l}`);
    }
    if (!fromWatchdog) {
        if (transportKind === 'http' && transport?.sessionId) {
            // best effort: HTTP DELETE with Mcp-Session-Id (405 is accepted by the SDK)
            try {
                await withTimeout(transport.terminateSession(), 3_000, 'terminateSession');
            } catch (e) {
                diag(`session DELETE failed: ${describeError(e)}`);
            }
        }
        try {
            await withTimeout(client.close(), 5_000, 'client.close');
        } catch (e) {
            diag(`close failed: ${describeError(e)}`);
        }
    } else if (transportKind === 'stdio') {
        for (const t of [transport, ...extraTransports]) {
            if (!t?.pid) continue;
            try {
                process.kill(t.pid, 'SIGKILL');
            } catch {
                /* already gone */
            }
        }
    }
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed > 0 ? 1 : 0);
}

// ---------------------------------------------------------------- transport
let targetUrl;
if (transportKind === 'http') {
    try {
        targetUrl = new URL(target);
    } catch (e) {
        console.error(`invalid URL ${JSON.stringify(target)}: ${e.message}`);
        process.exit(2);
    }
}
const viaKey = (method, id) => `${method}#${safeJson(id)}`;

/**
 * Incremental SSE parser for the wire tap: calls onMsg(parsedJson) for every
 * `data:` payload. Only used for diagnostics (which HTTP stream carried a
 * server->client request); the SDK parses the same bytes itself.
 */
function sseTap(onMsg) {
    const decoder = new TextDecoder();
    let buf = '';
    return chunk => {
        buf += decoder.decode(chunk, { stream: true });
        let m;
        while ((m = /\r\n\r\n|\n\n|\r\r/.exec(buf))) {
            const block = buf.slice(0, m.index);
            buf = buf.slice(m.index + m[0].length);
            const data = block
                .split(/\r\n|\n|\r/)
                .filter(l => l.startsWith('data:'))
                .map(l => l.slice(5).replace(/^ /, ''))
                .join('\n');
            if (!data) continue;
            try {
                onMsg(JSON.parse(data));
            } catch {
                /* not JSON: the SDK will complain through onerror */
            }
        }
    };
}

/**
 * fetch() for StreamableHTTPClientTransport that records, for every
 * server->client request, which HTTP stream carried it ("GET stream" or
 * "POST tasks/result id=N stream"), and the HTTP status the server gave to
 * each POST that carried one of our JSON-RPC responses.
 */
function tappedFetch(wire, tag, { noGet = false } = {}) {
    return async (url, init) => {
        const method = (init?.method ?? 'GET').toUpperCase();
        if (method === 'GET' && noGet) {
            // pretend the server has no standalone GET stream (the SDK accepts 405)
            if (TRACE) process.stderr.write(`${tag}[http] GET stream suppressed by the interop script\n`);
            return new Response(null, { status: 405, statusText: 'Method Not Allowed (suppressed by interop script)' });
        }
        let label = method === 'GET' ? 'GET stream' : method;
        let body;
        if (method === 'POST' && typeof init?.body === 'string') {
            try {
                body = JSON.parse(init.body);
            } catch {
                /* leave unlabelled */
            }
        }
        if (body && !Array.isArray(body)) {
            if (body.method && body.id !== undefined) label = `POST ${body.method} id=${safeJson(body.id)} stream`;
            else if (body.method) label = `POST ${body.method}`;
            else label = `POST response id=${safeJson(body.id)}`;
        }
        const res = await fetch(url, init);
        if (body && !Array.isArray(body) && !body.method && body.id !== undefined) {
            const rec = { id: body.id, status: res.status, body: undefined };
            if (!res.ok) rec.body = await res.clone().text().catch(() => '');
            wire.postedResponses.push(rec);
            if (TRACE) process.stderr.write(`${tag}[http] POST carrying response id=${safeJson(body.id)} -> HTTP ${res.status}\n`);
        }
        const ct = (res.headers.get('content-type') ?? '').toLowerCase();
        if (!res.body || !ct.includes('text/event-stream')) return res;
        const feed = sseTap(msg => {
            if (msg && typeof msg === 'object' && typeof msg.method === 'string' && msg.id !== undefined) {
                wire.via.set(viaKey(msg.method, msg.id), label);
            }
        });
        const tap = new TransformStream({
            transform(chunk, controller) {
                feed(chunk);
                controller.enqueue(chunk);
            }
        });
        return new Response(res.body.pipeThrough(tap), { status: res.status, statusText: res.statusText, headers: res.headers });
    };
}

const extraTransports = []; // transports of additional connections (killed by the watchdog)

/**
 * A new transport to the target (HTTP: a new session; stdio: a new server
 * process) with a wire tap. `tag` prefixes trace lines ('' for the main one).
 * opts.noGet (HTTP): never open the standalone GET SSE stream.
 */
function makeTransport(tag, opts = {}) {
    const wire = { inbound: [], outbound: [], via: new Map(), postedResponses: [], serverRequests: [], stderrTail: [] };
    let t;
    if (transportKind === 'http') {
        t = new StreamableHTTPClientTransport(targetUrl, {
            fetch: tappedFetch(wire, tag, opts),
            // no reconnect storms against a dead server
            reconnectionOptions: {
                initialReconnectionDelay: 500,
                maxReconnectionDelay: 2_000,
                reconnectionDelayGrowFactor: 1.5,
                maxRetries: 2
            }
        });
    } else {
        const args = (process.env.MCP_INTEROP_STDIO_ARGS ?? 'serve --demo --stdio --store memory:').split(/\s+/).filter(Boolean);
        // SDK quirk: StdioClientTransport only hands the child a filtered env
        // (HOME, LOGNAME, PATH, SHELL, TERM, USER) plus `env`; pass ours through
        // so RUST_LOG, RUST_BACKTRACE etc. reach the server.
        const env = Object.fromEntries(Object.entries(process.env).filter(([, v]) => v !== undefined));
        t = new StdioClientTransport({ command: target, args, env, stderr: 'pipe' });
        t.stderr?.on('data', chunk => {
            const lines = chunk.toString('utf8').split('\n').filter(l => l.length > 0);
            wire.stderrTail.push(...lines);
            if (wire.stderrTail.length > 200) wire.stderrTail = wire.stderrTail.slice(-100);
            if (TRACE) for (const l of lines) process.stderr.write(`${tag}[server stderr] ${l}\n`);
        });
    }
    // Wire tap: Protocol.connect() chains a previously installed
    // transport.onmessage before its own handler, so this sees every inbound
    // message; transport.send is wrapped to see every outbound one.
    t.onmessage = msg => {
        wire.inbound.push(msg);
        let via = '';
        if (typeof msg?.method === 'string' && msg.id !== undefined) {
            // a server->client request: remember where it arrived
            const v = transportKind === 'stdio' ? 'stdio' : (wire.via.get(viaKey(msg.method, msg.id)) ?? 'unknown HTTP stream');
            wire.serverRequests.push({ method: msg.method, id: msg.id, params: msg.params, via: v, at: Date.now() });
            via = `[via ${v}] `;
        }
        if (TRACE) process.stderr.write(`${tag}<-- ${via}${safeJson(msg)}\n`);
    };
    const origSend = t.send.bind(t);
    t.send = (msg, opts) => {
        wire.outbound.push(msg);
        if (TRACE) process.stderr.write(`${tag}--> ${safeJson(msg)}\n`);
        return origSend(msg, opts);
    };
    return { transport: t, wire };
}

const mainConn = makeTransport('');
transport = mainConn.transport;
const wire = mainConn.wire;

const sdkErrors = [];
// The main client declares form elicitation and sampling, so the server may
// send it elicitation/create and sampling/createMessage inside tasks (the
// input_required flow). Client.setRequestHandler() refuses to register a
// handler for a capability that was not declared.
const CLIENT_CAPABILITIES = { elicitation: { form: {} }, sampling: {} };
const client = new Client({ name: 'mcp-tasks-interop-ts', version: '0.1.0' }, { capabilities: CLIENT_CAPABILITIES });
client.onerror = e => {
    sdkErrors.push(describeError(e));
    if (TRACE) process.stderr.write(`[sdk onerror] ${describeError(e)}\n`);
};

// ---------------------------------------------------------------- input requests (server -> client)
// Every elicitation/create and sampling/createMessage the main client gets
// is recorded here, with the raw params as they came off the wire and the
// stream that carried them. The check that expects input requests installs
// `inputResponder`; it returns the ElicitResult / CreateMessageResult, which
// the SDK validates and sends back as a JSON-RPC response (over HTTP: in a
// new POST, whatever stream carried the request).
let inputResponder;
/** The handler for elicitation/create and sampling/createMessage of a client whose transport has `w` as wire tap. */
function inputRequestHandler(w) {
    return async (request, extra) => {
        const raw = [...w.serverRequests].reverse().find(r => r.method === request.method && r.id === extra.requestId);
        const params = raw?.params ?? request.params;
        const rec = {
            method: request.method,
            id: extra.requestId,
            params,
            relatedTaskId: params?._meta?.[RELATED_TASK_META_KEY]?.taskId,
            via: raw?.via ?? '?',
            wire: w,
            at: Date.now(),
            answer: undefined,
            error: undefined
        };
        const responder = inputResponder;
        try {
            if (!responder) throw new McpError(ErrorCode.InvalidRequest, `interop client: unexpected ${request.method}, no check is waiting for one`);
            rec.answer = await responder(rec);
            rec.answeredAt = Date.now();
            return rec.answer;
        } catch (e) {
            rec.error = describeError(e);
            throw e;
        }
    };
}
client.setRequestHandler(ElicitRequestSchema, inputRequestHandler(wire));
client.setRequestHandler(CreateMessageRequestSchema, inputRequestHandler(wire));
// notifications/tasks/status is optional for servers (MAY); just record them.
const statusNotifications = [];
client.setNotificationHandler(TaskStatusNotificationSchema, n => {
    statusNotifications.push(n.params);
});

// ---------------------------------------------------------------- input-request helpers
let listedTools; // Map tool name -> execution.taskSupport, from tools/list (check 2)

function requireTool(name) {
    if (!listedTools) return; // tools/list failed; try anyway, the call will tell
    assert(listedTools.has(name), `server does not list tool ${name} (tools: ${[...listedTools.keys()].join(', ')})`);
    const ts = listedTools.get(name);
    assert(ts === 'required', `${name}.execution.taskSupport expected required, got ${safeJson(ts)}`);
}

/** Poll tasks/get until the status is one of `wanted` or `ms` passed; returns the last Task. */
async function waitForStatus(c, taskId, wanted, ms) {
    const deadline = Date.now() + ms;
    for (;;) {
        const t = await c.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
        if (wanted.includes(t.status) || Date.now() >= deadline) return t;
        await sleep(100);
    }
}

/**
 * Install the responder for the input requests of one check. Before calling
 * `answer(rec, ctx)` for a request, it asks tasks/get for the task's status
 * (waiting up to 2 s for input_required) and stores it in
 * rec.statusWhileOutstanding. The task id comes from the request's
 * related-task _meta, or, if the server left that out, from ctx.setTaskId().
 */
function expectInputRequests(answer, c = client) {
    const ctx = { recs: [], taskId: undefined, arrivalWaiters: [] };
    let resolveTaskId;
    const taskIdKnown = new Promise(r => (resolveTaskId = r));
    ctx.setTaskId = id => {
        ctx.taskId = id;
        resolveTaskId(id);
    };
    /** Resolves once `n` input requests have arrived. */
    ctx.arrived = n =>
        ctx.recs.length >= n ? Promise.resolve() : new Promise(r => ctx.arrivalWaiters.push({ n, r }));
    const responder = async rec => {
        // how many of this check's input requests were already answered when this one arrived
        rec.answeredBeforeArrival = ctx.recs.filter(r => r.answeredAt !== undefined).length;
        ctx.recs.push(rec);
        for (const w of ctx.arrivalWaiters.filter(w => ctx.recs.length >= w.n)) w.r();
        const taskId = rec.relatedTaskId ?? (await withTimeout(taskIdKnown, 5_000, 'task id for an input request without related-task _meta'));
        const t = await waitForStatus(c, taskId, ['input_required'], 2_000);
        rec.statusWhileOutstanding = t.status;
        return await answer(rec, ctx);
    };
    inputResponder = responder;
    ctx.done = () => {
        if (inputResponder === responder) inputResponder = undefined;
    };
    return ctx;
}

function describeInputs(recs) {
    if (!recs || recs.length === 0) return 'no input request arrived';
    return recs
        .map(r => {
            const rel = r.relatedTaskId ? `related-task ${r.relatedTaskId}` : `NO related-task _meta (_meta=${safeJson(r.params?._meta)})`;
            const st = r.statusWhileOutstanding ? `, tasks/get while outstanding: ${r.statusWhileOutstanding}` : '';
            const ans = r.answer ? `, answered ${r.answer.action ?? r.answer.model ?? 'ok'}` : r.error ? `, answer failed: ${r.error}` : ', not answered yet';
            const posted = r.wire.postedResponses.find(p => p.id === r.id);
            const http = posted ? `, answer POST -> HTTP ${posted.status}` : '';
            return `${r.method} id=${safeJson(r.id)} via ${r.via}, ${rel}${st}${ans}${http}`;
        })
        .join('; ');
}

/**
 * Common assertions on the input requests one task sent: exactly `count` of
 * `method`, each delivered once, carrying related-task _meta with the task's
 * id, the task input_required while it was outstanding, and our answer
 * accepted by the server (over HTTP: the POST carrying it got a 2xx).
 */
function assertInputs(ctx, taskId, method, count) {
    const mine = ctx.recs.filter(r => r.relatedTaskId === undefined || r.relatedTaskId === taskId);
    const foreign = ctx.recs.filter(r => !mine.includes(r));
    if (foreign.length > 0) diag(`input requests for other tasks during this check: ${describeInputs(foreign)}`);
    for (const r of mine) {
        const copies = r.wire.serverRequests.filter(m => m.method === r.method && m.id === r.id);
        assert(copies.length === 1, `server delivered ${r.method} id=${safeJson(r.id)} ${copies.length} times (via ${copies.map(c => c.via).join(' and ')})`);
    }
    assert(mine.length === count, `expected ${count} ${method} request(s) for task ${taskId}, got ${mine.length}: ${describeInputs(ctx.recs)}`);
    for (const r of mine) {
        assert(r.method === method, `expected ${method}, got ${r.method} id=${safeJson(r.id)}`);
        assert(
            r.relatedTaskId === taskId,
            `${r.method} id=${safeJson(r.id)} has no params._meta["${RELATED_TASK_META_KEY}"] = {"taskId":"${taskId}"} (params._meta = ${safeJson(r.params?._meta)})`
        );
        assert(!r.error, `answering ${r.method} id=${safeJson(r.id)} failed on the client side: ${r.error}`);
        assert(
            r.statusWhileOutstanding === 'input_required',
            `while ${r.method} id=${safeJson(r.id)} was outstanding, tasks/get said status ${safeJson(r.statusWhileOutstanding)} (expected input_required)`
        );
        const posted = r.wire.postedResponses.find(p => p.id === r.id);
        assert(
            !posted || (posted.status >= 200 && posted.status < 300),
            `server answered the POST carrying our response to ${r.method} id=${safeJson(r.id)} with HTTP ${posted?.status}: ${posted?.body}`
        );
    }
    return mine;
}

/** Text of a sampling message's content (a block or an array of blocks). */
function samplingText(content) {
    const blocks = Array.isArray(content) ? content : [content];
    return blocks
        .filter(b => b?.type === 'text')
        .map(b => b.text)
        .join('');
}

/** Fill an elicitation form from `values`, by property name (fallbacks by type). */
function fillForm(requestedSchema, values) {
    const content = {};
    for (const [k, prop] of Object.entries(requestedSchema?.properties ?? {})) {
        if (k in values) content[k] = values[k];
        else if (prop?.type === 'boolean') content[k] = true;
        else if (prop?.type === 'number' || prop?.type === 'integer') content[k] = 1;
        else content[k] = 'x';
    }
    return content;
}

const CHECK_ACCEPT = 'confirm_delete: elicitation answered accept {confirm:true} -> input_required, then completed "Deleted <file>" (callToolStream)';
const CHECK_DECLINE = 'confirm_delete: elicitation answered decline -> completed "Kept <file>" (tasks/result right after creation)';
const CHECK_HAIKU = 'write_haiku: sampling/createMessage answered with a canned message -> result text is exactly the sampled text (callToolStream)';
const CHECK_MULTI = 'multi_input: two elicitation/create outstanding at once, both answered -> completed with both values (tasks/result)';
const CHECK_NOGET = 'confirm_delete on a session without GET stream: elicitation/create waits, then travels on the tasks/result SSE stream (http only)';
const CHECK_NOCAP = 'confirm_delete from a client without the elicitation capability -> isError result, no elicitation/create sent';

// ---------------------------------------------------------------- checks
const createdTaskIds = []; // every task id this client created
let completedTaskId;

async function main() {
    // 1. initialize
    const connected = await check('initialize (protocol 2025-11-25, tasks capability)', 10_000, async () => {
        await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
        const initResp = wire.inbound.find(m => m.id !== undefined && m.result?.protocolVersion);
        const pv = initResp?.result?.protocolVersion;
        assert(pv === '2025-11-25', `expected protocolVersion 2025-11-25, server answered ${safeJson(pv)}`);
        const caps = client.getServerCapabilities();
        diag(`server: ${safeJson(client.getServerVersion())} capabilities: ${safeJson(caps)}`);
        diag(`client capabilities sent: ${safeJson(CLIENT_CAPABILITIES)}`);
        assert(caps?.tools, `capabilities.tools missing: ${safeJson(caps)}`);
        assert(caps?.tasks, `capabilities.tasks missing: ${safeJson(caps)}`);
        assert(caps.tasks.list, `capabilities.tasks.list missing: ${safeJson(caps.tasks)}`);
        assert(caps.tasks.cancel, `capabilities.tasks.cancel missing: ${safeJson(caps.tasks)}`);
        assert(caps.tasks.requests?.tools?.call, `capabilities.tasks.requests.tools.call missing: ${safeJson(caps.tasks)}`);
    });
    if (!connected) {
        // client.getServerCapabilities() is only set on success; if the
        // initialize handshake itself failed nothing else can run.
        if (!client.getServerCapabilities()) {
            diag(`could not connect to ${transportKind} target ${target}`);
            for (const n of REMAINING_CHECKS) skip(n, 'no MCP connection');
            return;
        }
    }

    // 2. tools/list with execution.taskSupport
    await check('tools/list shows execution.taskSupport', 10_000, async () => {
        // listTools() also fills the SDK's tool cache that callToolStream /
        // callTool consult (isToolTask / isToolTaskRequired).
        const { tools } = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
        const byName = Object.fromEntries(tools.map(t => [t.name, t]));
        listedTools = new Map(tools.map(t => [t.name, t.execution?.taskSupport]));
        diag(`tools: ${tools.map(t => `${t.name}=${t.execution?.taskSupport ?? '(absent)'}`).join(' ')}`);
        const want = {
            slow_compute: 'optional',
            failing_job: 'required',
            protocol_error_job: 'optional'
        };
        for (const [name, ts] of Object.entries(want)) {
            assert(byName[name], `tool ${name} not listed`);
            assert(byName[name].execution?.taskSupport === ts, `${name}.execution.taskSupport expected ${ts}, got ${safeJson(byName[name].execution)}`);
        }
        assert(byName.greet, 'tool greet not listed');
        const g = byName.greet.execution?.taskSupport;
        // absent means forbidden per spec, but the demo server states it explicitly
        assert(g === 'forbidden', `greet.execution.taskSupport expected forbidden, got ${safeJson(byName.greet.execution)}`);
    });

    // 3. greet as a normal (non-task) call
    await check('greet as a normal tools/call', 10_000, async () => {
        const result = await client.callTool({ name: 'greet', arguments: { name: 'Interop' } }, CallToolResultSchema, {
            timeout: REQUEST_TIMEOUT_MS
        });
        assert(!result.task, `normal call returned a task: ${safeJson(result)}`);
        assert(result.isError !== true, `isError: ${safeJson(result)}`);
        assert(textOf(result) === 'Hello, Interop!', `expected text "Hello, Interop!", got ${safeJson(result.content)}`);
    });

    // 4. slow_compute{seconds:2} as a task via callToolStream
    const label = `ts-interop-${process.pid}`;
    const slowProgress = [];
    await check('slow_compute{seconds:2} as task via callToolStream (taskCreated, taskStatus, result)', 15_000, async () => {
        const progress = slowProgress;
        const stream = client.experimental.tasks.callToolStream(
            { name: 'slow_compute', arguments: { seconds: 2, label } },
            CallToolResultSchema,
            {
                task: { ttl: TASK_TTL_MS },
                // The SDK puts progressToken (= the JSON-RPC id) into
                // params._meta and keeps this handler alive after the
                // CreateTaskResult, so progress sent for the task lands here.
                onprogress: p => progress.push(p),
                timeout: REQUEST_TIMEOUT_MS
            }
        );
        const out = await drain(stream);
        if (out.created) {
            createdTaskIds.push(out.created.taskId);
            completedTaskId = out.created.taskId;
        }
        assert(out.created, `no taskCreated message (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
        assert(out.created.status === 'working', `CreateTaskResult status expected working, got ${out.created.status}`);
        assert(out.statuses.length >= 1, 'no taskStatus message');
        assert(!out.error, `stream ended with error: ${describeError(out.error)}`);
        assert(out.result, `no result message (stream: ${out.messages.join(',')})`);
        const last = out.statuses[out.statuses.length - 1];
        assert(last.status === 'completed', `last taskStatus expected completed, got ${last.status}`);
        assert(out.result.isError !== true, `result isError: ${safeJson(out.result)}`);
        assert(textOf(out.result).includes(label), `result text does not contain label ${label}: ${safeJson(out.result.content)}`);
        diag(`slow_compute task ${out.created.taskId}: statuses=${out.statuses.map(s => s.status).join(',')}`);
    });

    // 4b. progress notifications for the task, on the original request's token
    await check('slow_compute task: notifications/progress reach onprogress of the original call', 5_000, async () => {
        // Over HTTP, progress after the CreateTaskResult travels on the
        // standalone GET SSE stream, which may race the last tasks/result
        // response; give stragglers a moment.
        for (let i = 0; i < 10 && slowProgress.length < 2; i++) await sleep(100);
        diag(`progress received: ${safeJson(slowProgress)}`);
        assert(
            slowProgress.length >= 1,
            `no notifications/progress reached onprogress` +
                (transportKind === 'http'
                    ? ' (over HTTP they can only arrive on the standalone GET SSE stream once the POST got its CreateTaskResult)'
                    : '')
        );
        for (const p of slowProgress) {
            assert(typeof p.progress === 'number', `progress not a number: ${safeJson(p)}`);
            assert(p.total === 2, `progress total expected 2, got ${safeJson(p)}`);
        }
        for (let i = 1; i < slowProgress.length; i++) {
            assert(slowProgress[i].progress > slowProgress[i - 1].progress, `progress not increasing: ${safeJson(slowProgress)}`);
        }
    });

    // 5. getTask on the finished task
    if (!completedTaskId) skip('tasks/get on finished task: completed with ttl/createdAt/lastUpdatedAt', 'no task id from slow_compute');
    else
        await check('tasks/get on finished task: completed with ttl/createdAt/lastUpdatedAt', 10_000, async () => {
            const t = await client.experimental.tasks.getTask(completedTaskId, { timeout: REQUEST_TIMEOUT_MS });
            assert(t.taskId === completedTaskId, `taskId mismatch: ${safeJson(t)}`);
            assert(t.status === 'completed', `status expected completed, got ${safeJson(t)}`);
            // ttl is number|null per spec; we asked for one, so a number is expected
            assert(typeof t.ttl === 'number' && t.ttl > 0, `ttl expected positive number, got ${safeJson(t.ttl)}`);
            assert(isIsoDate(t.createdAt), `createdAt not ISO 8601: ${safeJson(t.createdAt)}`);
            assert(isIsoDate(t.lastUpdatedAt), `lastUpdatedAt not ISO 8601: ${safeJson(t.lastUpdatedAt)}`);
            assert(Date.parse(t.lastUpdatedAt) >= Date.parse(t.createdAt), `lastUpdatedAt < createdAt: ${safeJson(t)}`);
        });

    // 6. slow_compute{seconds:30} then tasks/cancel
    await check('slow_compute{seconds:30} as task, tasks/cancel -> cancelled, second cancel -> -32602', 15_000, async () => {
        const stream = client.experimental.tasks.callToolStream(
            { name: 'slow_compute', arguments: { seconds: 30, label: `${label}-cancel` } },
            CallToolResultSchema,
            { task: { ttl: TASK_TTL_MS }, timeout: REQUEST_TIMEOUT_MS }
        );
        // stop consuming right after taskCreated so the SDK stops polling
        const out = await drain(stream, m => m.type === 'taskCreated' || m.type === 'error');
        assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
        const taskId = out.created.taskId;
        createdTaskIds.push(taskId);
        const cancelled = await client.experimental.tasks.cancelTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
        assert(cancelled.taskId === taskId, `tasks/cancel result taskId mismatch: ${safeJson(cancelled)}`);
        assert(cancelled.status === 'cancelled', `tasks/cancel result status expected cancelled, got ${safeJson(cancelled)}`);
        const t = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
        assert(t.status === 'cancelled', `tasks/get after cancel expected cancelled, got ${safeJson(t)}`);
        await expectMcpError(
            client.experimental.tasks.cancelTask(taskId, { timeout: REQUEST_TIMEOUT_MS }),
            ErrorCode.InvalidParams,
            'second tasks/cancel'
        );
        // still cancelled afterwards (no resurrection / late completion)
        await sleep(300);
        const t2 = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
        assert(t2.status === 'cancelled', `status changed after cancel: ${safeJson(t2)}`);
    });

    // 7. failing_job: isError result -> task failed, result retrievable
    await check('failing_job as task ends failed; tasks/result returns the isError CallToolResult', 15_000, async () => {
        // SDK quirk (v1.32.2, Protocol.requestStream): when polling sees
        // status "failed" it does NOT call tasks/result; it yields a
        // synthesized McpError(-32603, "Task <id> failed") instead. So the
        // stream only tells us the task failed, and the real isError
        // CallToolResult is fetched with getTaskResult() directly.
        const stream = client.experimental.tasks.callToolStream({ name: 'failing_job', arguments: {} }, CallToolResultSchema, {
            task: { ttl: TASK_TTL_MS },
            timeout: REQUEST_TIMEOUT_MS
        });
        const out = await drain(stream);
        assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
        const taskId = out.created.taskId;
        createdTaskIds.push(taskId);
        const last = out.statuses[out.statuses.length - 1];
        assert(last?.status === 'failed', `last taskStatus expected failed, got ${safeJson(last)}`);
        diag(`failing_job via callToolStream ended with: ${out.result ? 'result ' + safeJson(out.result) : describeError(out.error)}`);
        const t = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
        assert(t.status === 'failed', `tasks/get expected failed, got ${safeJson(t)}`);
        const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
        assert(result.isError === true, `tasks/result expected CallToolResult with isError:true, got ${safeJson(result)}`);
        assert(Array.isArray(result.content) && result.content.length > 0, `tasks/result has no content: ${safeJson(result)}`);
    });

    // 8. protocol_error_job: JSON-RPC error -> failed, tasks/result -> -32603
    await check('protocol_error_job as task ends failed; tasks/result rejects with -32603', 15_000, async () => {
        // Same SDK quirk as above: the stream ends with a synthesized
        // -32603 "Task <id> failed" without ever calling tasks/result, so
        // that error proves nothing about the server; check getTaskResult.
        const stream = client.experimental.tasks.callToolStream({ name: 'protocol_error_job', arguments: {} }, CallToolResultSchema, {
            task: { ttl: TASK_TTL_MS },
            timeout: REQUEST_TIMEOUT_MS
        });
        const out = await drain(stream);
        assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
        const taskId = out.created.taskId;
        createdTaskIds.push(taskId);
        const t = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
        assert(t.status === 'failed', `tasks/get expected failed, got ${safeJson(t)}`);
        const err = await expectMcpError(
            client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS }),
            ErrorCode.InternalError,
            'tasks/result'
        );
        diag(`protocol_error_job tasks/result error: ${describeError(err)}`);
    });

    // 9. tasks/list contains our tasks
    await check('tasks/list contains every task created by this client', 10_000, async () => {
        const seen = new Map();
        let cursor;
        for (let page = 0; page < 50; page++) {
            const res = await client.experimental.tasks.listTasks(cursor, { timeout: REQUEST_TIMEOUT_MS });
            for (const t of res.tasks) seen.set(t.taskId, t.status);
            cursor = res.nextCursor;
            if (!cursor) break;
        }
        assert(createdTaskIds.length > 0, 'this client created no tasks, nothing to look for');
        const missing = createdTaskIds.filter(id => !seen.has(id));
        assert(missing.length === 0, `missing task ids ${safeJson(missing)}; listed: ${safeJson([...seen.keys()])}`);
    });

    // 10. getTask on unknown id
    await check('tasks/get on an unknown task id -> -32602', 10_000, async () => {
        await expectMcpError(
            client.experimental.tasks.getTask('no-such-task-00000000-0000-0000-0000-000000000000', { timeout: REQUEST_TIMEOUT_MS }),
            ErrorCode.InvalidParams,
            'tasks/get unknown id'
        );
    });

    // ------------------------------------------------------------ input requests inside tasks
    // MCP 2025-11-25 input_required flow (SEP-1686 flow 2): while the task
    // runs, the server sends elicitation/create or sampling/createMessage
    // (with related-task _meta), the task is input_required until the client
    // answers, then it continues and completes.

    // 11. confirm_delete, accept {confirm:true}, end to end through the SDK's own callToolStream
    let ctxAccept;
    await check(
        CHECK_ACCEPT,
        15_000,
        async () => {
            requireTool('confirm_delete');
            const filename = `interop-${process.pid}-accept.txt`;
            ctxAccept = expectInputRequests(() => ({ action: 'accept', content: { confirm: true } }));
            try {
                // callToolStream polls tasks/get; when it sees input_required it
                // calls tasks/result once and yields that response as the result.
                // The input request itself reaches the ElicitRequestSchema handler
                // from whatever stream carried it.
                const stream = client.experimental.tasks.callToolStream({ name: 'confirm_delete', arguments: { filename } }, CallToolResultSchema, {
                    task: { ttl: TASK_TTL_MS },
                    timeout: REQUEST_TIMEOUT_MS
                });
                const out = await drain(stream, m => {
                    if (m.type === 'taskCreated') ctxAccept.setTaskId(m.task.taskId);
                    return false;
                });
                assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
                const taskId = out.created.taskId;
                diag(`confirm_delete(accept) task ${taskId}: statuses=${out.statuses.map(s => s.status).join(',')}; ${describeInputs(ctxAccept.recs)}`);
                assert(!out.error, `stream ended with error: ${describeError(out.error)}`);
                assert(out.result, `no result message (stream: ${out.messages.join(',')})`);
                const [rec] = assertInputs(ctxAccept, taskId, 'elicitation/create', 1);
                const p = rec.params ?? {};
                assert(p.mode === undefined || p.mode === 'form', `elicitation mode expected form (or absent), got ${safeJson(p.mode)}`);
                assert(typeof p.message === 'string' && p.message.length > 0, `elicitation message missing: ${safeJson(p)}`);
                assert(p.requestedSchema?.properties?.confirm?.type === 'boolean', `requestedSchema.properties.confirm is not a boolean: ${safeJson(p.requestedSchema)}`);
                assert(out.result.isError !== true, `result isError: ${safeJson(out.result)}`);
                assert(textOf(out.result).includes(`Deleted ${filename}`), `result text does not contain "Deleted ${filename}": ${safeJson(out.result.content)}`);
                const t = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
                assert(t.status === 'completed', `tasks/get after the result expected completed, got ${safeJson(t)}`);
            } finally {
                ctxAccept.done();
            }
        },
        () => describeInputs(ctxAccept?.recs)
    );

    // 12. confirm_delete, decline; tasks/result sent right after the CreateTaskResult
    let ctxDecline;
    await check(
        CHECK_DECLINE,
        15_000,
        async () => {
            requireTool('confirm_delete');
            const filename = `interop-${process.pid}-decline.txt`;
            ctxDecline = expectInputRequests(() => ({ action: 'decline' }));
            try {
                const stream = client.experimental.tasks.callToolStream({ name: 'confirm_delete', arguments: { filename } }, CallToolResultSchema, {
                    task: { ttl: TASK_TTL_MS },
                    timeout: REQUEST_TIMEOUT_MS
                });
                // stop the SDK's polling right after taskCreated and open tasks/result
                // ourselves, so over HTTP the request can travel on its SSE stream
                const out = await drain(stream, m => m.type === 'taskCreated' || m.type === 'error');
                assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
                const taskId = out.created.taskId;
                ctxDecline.setTaskId(taskId);
                const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
                diag(`confirm_delete(decline) task ${taskId}: ${describeInputs(ctxDecline.recs)}`);
                assertInputs(ctxDecline, taskId, 'elicitation/create', 1);
                assert(result.isError !== true, `tasks/result isError: ${safeJson(result)}`);
                assert(textOf(result).includes(`Kept ${filename}`), `result text does not contain "Kept ${filename}": ${safeJson(result.content)}`);
                const t = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
                assert(t.status === 'completed', `tasks/get after the result expected completed, got ${safeJson(t)}`);
            } finally {
                ctxDecline.done();
            }
        },
        () => describeInputs(ctxDecline?.recs)
    );

    // 13. write_haiku: sampling/createMessage answered with a canned CreateMessageResult
    let ctxHaiku;
    await check(
        CHECK_HAIKU,
        15_000,
        async () => {
            requireTool('write_haiku');
            const topic = 'task queues';
            const canned = `Queued work waits its turn\nan answer comes from elsewhere\nthe task completes (${process.pid})`;
            ctxHaiku = expectInputRequests(() => ({
                role: 'assistant',
                content: { type: 'text', text: canned },
                model: 'canned-model',
                stopReason: 'endTurn'
            }));
            try {
                const stream = client.experimental.tasks.callToolStream({ name: 'write_haiku', arguments: { topic } }, CallToolResultSchema, {
                    task: { ttl: TASK_TTL_MS },
                    timeout: REQUEST_TIMEOUT_MS
                });
                const out = await drain(stream, m => {
                    if (m.type === 'taskCreated') ctxHaiku.setTaskId(m.task.taskId);
                    return false;
                });
                assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
                const taskId = out.created.taskId;
                diag(`write_haiku task ${taskId}: statuses=${out.statuses.map(s => s.status).join(',')}; ${describeInputs(ctxHaiku.recs)}`);
                assert(!out.error, `stream ended with error: ${describeError(out.error)}`);
                assert(out.result, `no result message (stream: ${out.messages.join(',')})`);
                const [rec] = assertInputs(ctxHaiku, taskId, 'sampling/createMessage', 1);
                const msgs = rec.params?.messages;
                assert(Array.isArray(msgs) && msgs.length >= 1, `sampling messages missing: ${safeJson(rec.params)}`);
                assert(msgs[0].role === 'user', `sampling messages[0].role expected user, got ${safeJson(msgs[0])}`);
                const prompt = samplingText(msgs[0].content);
                assert(prompt === `Write a haiku about ${topic}.`, `sampling prompt expected ${safeJson(`Write a haiku about ${topic}.`)}, got ${safeJson(prompt)}`);
                assert(typeof rec.params.maxTokens === 'number' && rec.params.maxTokens > 0, `sampling maxTokens expected a positive number, got ${safeJson(rec.params.maxTokens)}`);
                assert(out.result.isError !== true, `result isError: ${safeJson(out.result)}`);
                const first = out.result.content?.[0];
                assert(first?.type === 'text' && first.text === canned, `result content[0] expected the sampled text ${safeJson(canned)}, got ${safeJson(out.result.content)}`);
            } finally {
                ctxHaiku.done();
            }
        },
        () => describeInputs(ctxHaiku?.recs)
    );

    // 14. multi_input: two elicitation/create outstanding at the same time
    let ctxMulti;
    await check(
        CHECK_MULTI,
        15_000,
        async () => {
            requireTool('multi_input');
            const values = { name: `Ada-${process.pid}`, color: `teal-${process.pid}` };
            ctxMulti = expectInputRequests(async (rec, ctx) => {
                // hold the first answer until the second request is there too
                // (or 3 s passed: then the server asks one after the other)
                await Promise.race([ctx.arrived(2), sleep(3_000)]);
                return { action: 'accept', content: fillForm(rec.params?.requestedSchema, values) };
            });
            try {
                const stream = client.experimental.tasks.callToolStream({ name: 'multi_input', arguments: {} }, CallToolResultSchema, {
                    task: { ttl: TASK_TTL_MS },
                    timeout: REQUEST_TIMEOUT_MS
                });
                const out = await drain(stream, m => m.type === 'taskCreated' || m.type === 'error');
                assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
                const taskId = out.created.taskId;
                ctxMulti.setTaskId(taskId);
                const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
                diag(`multi_input task ${taskId}: ${describeInputs(ctxMulti.recs)}`);
                const recs = assertInputs(ctxMulti, taskId, 'elicitation/create', 2);
                assert(recs[0].id !== recs[1].id, `both elicitation/create requests have id ${safeJson(recs[0].id)}`);
                const asked = recs.flatMap(r => Object.keys(r.params?.requestedSchema?.properties ?? {}));
                assert(asked.includes('name') && asked.includes('color'), `expected the requests to ask for name and color, they asked for ${safeJson(asked)}`);
                const late = recs.find(r => r.answeredBeforeArrival > 0);
                assert(!late, `elicitation/create id=${safeJson(late?.id)} arrived only after the other one was answered (not outstanding at once)`);
                assert(result.isError !== true, `tasks/result isError: ${safeJson(result)}`);
                const text = textOf(result);
                assert(text.includes(values.name) && text.includes(values.color), `result text does not contain both ${safeJson(values.name)} and ${safeJson(values.color)}: ${safeJson(result.content)}`);
                const t = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
                assert(t.status === 'completed', `tasks/get after the result expected completed, got ${safeJson(t)}`);
            } finally {
                ctxMulti.done();
            }
        },
        () => describeInputs(ctxMulti?.recs)
    );

    // 15. (http only) no GET stream: the request must wait for a tasks/result stream and travel on it
    let ctxNoGet;
    if (transportKind === 'http')
        await check(
            CHECK_NOGET,
            15_000,
            async () => {
                requireTool('confirm_delete');
                const conn = makeTransport('[noget] ', { noGet: true });
                const client3 = new Client({ name: 'mcp-tasks-interop-ts-noget', version: '0.1.0' }, { capabilities: CLIENT_CAPABILITIES });
                let closing3 = false;
                client3.onerror = e => {
                    if (!closing3) sdkErrors.push(`[noget] ${describeError(e)}`);
                };
                client3.setRequestHandler(ElicitRequestSchema, inputRequestHandler(conn.wire));
                const filename = `interop-${process.pid}-noget.txt`;
                ctxNoGet = expectInputRequests(() => ({ action: 'accept', content: { confirm: true } }), client3);
                try {
                    await client3.connect(conn.transport, { timeout: REQUEST_TIMEOUT_MS });
                    const stream = client3.experimental.tasks.callToolStream({ name: 'confirm_delete', arguments: { filename } }, CallToolResultSchema, {
                        task: { ttl: TASK_TTL_MS },
                        timeout: REQUEST_TIMEOUT_MS
                    });
                    const out = await drain(stream, m => m.type === 'taskCreated' || m.type === 'error');
                    assert(out.created, `no taskCreated (stream: ${out.messages.join(',')}; error: ${describeError(out.error)})`);
                    const taskId = out.created.taskId;
                    ctxNoGet.setTaskId(taskId);
                    // give the server time to want to ask; with no stream open it must hold the request
                    const t = await waitForStatus(client3, taskId, ['input_required'], 2_000);
                    await sleep(300);
                    assert(ctxNoGet.recs.length === 0, `input request arrived before any tasks/result was open: ${describeInputs(ctxNoGet.recs)}`);
                    assert(t.status === 'input_required', `with the elicitation/create undelivered, tasks/get said ${safeJson(t.status)} (expected input_required)`);
                    const result = await client3.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
                    diag(`confirm_delete(no GET stream) task ${taskId}: ${describeInputs(ctxNoGet.recs)}`);
                    const [rec] = assertInputs(ctxNoGet, taskId, 'elicitation/create', 1);
                    assert(/^POST tasks\/result /.test(rec.via), `elicitation/create arrived via ${rec.via}, expected the tasks/result SSE stream`);
                    assert(result.isError !== true, `tasks/result isError: ${safeJson(result)}`);
                    assert(textOf(result).includes(`Deleted ${filename}`), `result text does not contain "Deleted ${filename}": ${safeJson(result.content)}`);
                } finally {
                    ctxNoGet.done();
                    closing3 = true;
                    if (conn.transport.sessionId) await withTimeout(conn.transport.terminateSession(), 3_000, 'terminateSession (noget)').catch(() => {});
                    await withTimeout(client3.close(), 5_000, 'client.close (noget)').catch(() => {});
                }
            },
            () => describeInputs(ctxNoGet?.recs)
        );

    // 16. a second client that did NOT declare elicitation gets an isError result
    let nocap;
    const nocapStatuses = [];
    await check(
        CHECK_NOCAP,
        15_000,
        async () => {
            requireTool('confirm_delete');
            nocap = makeTransport('[nocap] ');
            extraTransports.push(nocap.transport);
            const client2 = new Client({ name: 'mcp-tasks-interop-ts-nocap', version: '0.1.0' }, { capabilities: {} });
            let closing2 = false; // the GET stream's AbortError on close is no finding
            client2.onerror = e => {
                if (!closing2) sdkErrors.push(`[nocap] ${describeError(e)}`);
            };
            try {
                await client2.connect(nocap.transport, { timeout: REQUEST_TIMEOUT_MS });
                const filename = `interop-${process.pid}-nocap.txt`;
                // Plain request with task augmentation: accepts both a
                // CreateTaskResult and a direct CallToolResult.
                const r = await client2.request({ method: 'tools/call', params: { name: 'confirm_delete', arguments: { filename } } }, ResultSchema, {
                    task: { ttl: TASK_TTL_MS },
                    timeout: REQUEST_TIMEOUT_MS
                });
                let result;
                if (r.task?.taskId) {
                    const taskId = r.task.taskId;
                    nocapStatuses.push(r.task.status);
                    const deadline = Date.now() + 10_000;
                    let t;
                    for (;;) {
                        t = await client2.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
                        if (nocapStatuses[nocapStatuses.length - 1] !== t.status) nocapStatuses.push(t.status);
                        if (['completed', 'failed', 'cancelled'].includes(t.status)) break;
                        assert(Date.now() < deadline, `task ${taskId} still ${t.status} after 10 s (statuses ${nocapStatuses.join(',')})`);
                        await sleep(Math.min(Math.max(t.pollInterval ?? 200, 100), 1_000));
                    }
                    assert(t.status !== 'cancelled', `task ended cancelled: ${safeJson(t)}`);
                    result = await client2.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
                    diag(`confirm_delete without elicitation capability: task ${taskId} statuses=${nocapStatuses.join(',')}, result ${safeJson(result)}`);
                } else {
                    result = CallToolResultSchema.parse(r);
                    diag(`confirm_delete without elicitation capability: direct (non-task) result ${safeJson(result)}`);
                }
                const sent = nocap.wire.serverRequests.filter(m => m.method === 'elicitation/create' || m.method === 'sampling/createMessage');
                assert(sent.length === 0, `server sent ${sent.map(m => `${m.method} id=${safeJson(m.id)} via ${m.via}`).join(', ')} to a client that did not declare the capability`);
                assert(result.isError === true, `expected a CallToolResult with isError:true, got ${safeJson(result)}`);
            } finally {
                closing2 = true;
                if (transportKind === 'http' && nocap.transport.sessionId) {
                    await withTimeout(nocap.transport.terminateSession(), 3_000, 'terminateSession (nocap)').catch(() => {});
                }
                await withTimeout(client2.close(), 5_000, 'client.close (nocap)').catch(() => {});
            }
        },
        () =>
            [
                nocapStatuses.length ? `statuses ${nocapStatuses.join(',')}` : '',
                nocap?.wire.serverRequests.length ? `server requests: ${nocap.wire.serverRequests.map(m => `${m.method} via ${m.via}`).join(', ')}` : '',
                nocap?.wire.stderrTail.length ? `server stderr: ${nocap.wire.stderrTail.slice(-3).join(' | ')}` : ''
            ]
                .filter(Boolean)
                .join('; ')
    );

    if (statusNotifications.length > 0) {
        diag(`notifications/tasks/status received: ${statusNotifications.map(s => `${s.taskId}:${s.status}`).join(' ')}`);
    }
}

const REMAINING_CHECKS = [
    'tools/list shows execution.taskSupport',
    'greet as a normal tools/call',
    'slow_compute{seconds:2} as task via callToolStream (taskCreated, taskStatus, result)',
    'slow_compute task: notifications/progress reach onprogress of the original call',
    'tasks/get on finished task: completed with ttl/createdAt/lastUpdatedAt',
    'slow_compute{seconds:30} as task, tasks/cancel -> cancelled, second cancel -> -32602',
    'failing_job as task ends failed; tasks/result returns the isError CallToolResult',
    'protocol_error_job as task ends failed; tasks/result rejects with -32603',
    'tasks/list contains every task created by this client',
    'tasks/get on an unknown task id -> -32602',
    CHECK_ACCEPT,
    CHECK_DECLINE,
    CHECK_HAIKU,
    CHECK_MULTI,
    ...(transportKind === 'http' ? [CHECK_NOGET] : []),
    CHECK_NOCAP
];

main()
    .catch(e => {
        failed++;
        console.log(`not ok - unexpected script error: ${describeError(e)}`);
    })
    .finally(() => finish());
