#!/usr/bin/env node
// Interop checks for mcp-tasks using the OFFICIAL MCP Tasks client,
// @modelcontextprotocol/ext-tasks (pinned in package.json), on top of the
// official TypeScript SDK v2 client, @modelcontextprotocol/client (also
// pinned), against `mcp-tasks serve --demo` over Streamable HTTP.
//
// Usage:
//   node ext-tasks-interop.mjs 2025 http://127.0.0.1:PORT/mcp
//   node ext-tasks-interop.mjs 2026 http://127.0.0.1:PORT/mcp
//
// 2025: the SDK Client connects with its default version negotiation
//       ('legacy': initialize, protocol 2025-11-25, a session); ext-tasks
//       sees `capabilities.tasks` and drives the 2025-11-25 tasks wire
//       (tools/call + params.task, tasks/get, tasks/result, tasks/cancel;
//       elicitation/sampling arrive as server->client requests tagged with
//       related-task _meta and go through the Client's fallback handler).
// 2026: the SDK Client is pinned to 2026-07-28 (server/discover, no
//       session); ext-tasks sees the io.modelcontextprotocol/tasks extension
//       and drives the 2026-07-28 tasks wire (flat CreateTaskResult,
//       tasks/get with result/error/inputRequests inline, tasks/update,
//       tasks/cancel) through `rawDispatch`, a host request coordinator this
//       script builds on the SDK transport, as ext-tasks' README requires.
//
// Output: one line per check, `PASS name` or `FAIL name: why`, diagnostics
// as `# ...` lines, and the final line `N passed, M failed`. Exit code 1 if
// any check failed, 2 for bad usage.
//
// Environment:
//   MCP_INTEROP_TRACE=1      print every JSON-RPC message in/out to stderr,
//                            with the HTTP stream that carried it
//   EXT_TASKS_ONLY=a,b       run only these checks (connect always runs)
//   EXT_TASKS_REPEAT=N       run each selected check N times (default 1)

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
    InputCorrelationError,
    TaskFailedError,
    createApplicationInputHandler,
    createTaskSessionEndpointId,
    createTaskSessionFromClient,
    resultFromTaskOutcome
} from '@modelcontextprotocol/ext-tasks/client';

const CHECK_TIMEOUT_MS = 20_000; // bound of every check
const REQUEST_TIMEOUT_MS = 10_000; // every JSON-RPC request
const SCRIPT_BUDGET_MS = 170_000; // watchdog for the whole run

// ---------------------------------------------------------------- arguments
const [wire, url] = process.argv.slice(2);
if (!['2025', '2026'].includes(wire) || !url) {
    console.error('usage: node ext-tasks-interop.mjs <2025|2026> <server url>   (e.g. http://127.0.0.1:8080/mcp)');
    process.exit(2);
}
const MODERN = wire === '2026';
const PROTOCOL_VERSION = MODERN ? '2026-07-28' : '2025-11-25';
const TRACE = process.env.MCP_INTEROP_TRACE === '1';
const ONLY = (process.env.EXT_TASKS_ONLY ?? '')
    .split(',')
    .map(s => s.trim())
    .filter(Boolean);
const REPEAT = Math.max(1, Number.parseInt(process.env.EXT_TASKS_REPEAT ?? '1', 10) || 1);

const CLIENT_CAPABILITIES = { elicitation: { form: {} }, sampling: {} };
const CANNED_HAIKU = 'Tasks wait in the queue\nresults arrive when they will\nthe client polls on';

// ---------------------------------------------------------------- reporting
let passed = 0;
let failed = 0;
const startedAt = Date.now();

function diag(msg) {
    for (const line of String(msg).split('\n')) console.log(`# ${line}`);
}

function safeJson(v) {
    try {
        return JSON.stringify(v);
    } catch {
        return String(v);
    }
}

function describeError(e) {
    if (e === undefined || e === null) return String(e);
    if (e instanceof Error) {
        let s = `${e.name}: ${e.message}`;
        if (e.code !== undefined) s += ` [code ${e.code}]`;
        if (e.data !== undefined) s += ` [data ${safeJson(e.data)}]`;
        let c = e.cause;
        for (let depth = 0; c && depth < 4; depth++, c = c.cause) {
            if (c instanceof Error) {
                // zod errors: their message is a JSON dump of .issues; print the issues compactly
                const inner = Array.isArray(c.issues) ? `${c.name}: ${compactIssues(c.issues).join('; ')}` : `${c.name}: ${c.message}`;
                s += ` (cause: ${inner})`;
            } else {
                s += ` (cause: ${safeJson(c)})`;
            }
        }
        return s;
    }
    return safeJson(e);
}

/** Flattens zod issues (including the branches of a union) to "path: message" strings. */
function compactIssues(issues, prefix = '') {
    const out = [];
    for (const issue of issues) {
        const path = [prefix, ...(issue.path ?? [])].filter(p => p !== '').join('.');
        if (issue.code === 'invalid_union' && Array.isArray(issue.errors)) {
            const branches = issue.errors.map(branch => compactIssues(branch, path).join(', '));
            out.push(`one of [${branches.join(' | ')}]`);
        } else {
            out.push(`${path || '(root)'}: ${issue.message}`);
        }
    }
    return out;
}

class CheckFailure extends Error {}
function assert(cond, msg) {
    if (!cond) throw new CheckFailure(msg);
}

function textOf(result) {
    return (result?.content ?? [])
        .filter(c => c?.type === 'text')
        .map(c => c.text)
        .join('\n');
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

/**
 * Runs one check bounded by CHECK_TIMEOUT_MS. The check gets an AbortSignal
 * that fires on the timeout (it is passed to the client's calls so nothing
 * keeps polling afterwards) and a `note` function for diagnostics that are
 * printed with a failure.
 */
async function check(name, fn) {
    const controller = new AbortController();
    const notes = [];
    const note = s => notes.push(s);
    let timer;
    const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => {
            const err = new CheckFailure(`timed out after ${CHECK_TIMEOUT_MS} ms`);
            controller.abort(err);
            reject(err);
        }, CHECK_TIMEOUT_MS);
    });
    try {
        await Promise.race([Promise.resolve().then(() => fn(controller.signal, note)), timeout]);
        passed++;
        console.log(`PASS ${name}`);
        for (const n of notes) diag(`  ${n}`);
        return true;
    } catch (e) {
        failed++;
        const reason = e instanceof CheckFailure ? e.message : describeError(e);
        console.log(`FAIL ${name}: ${reason.replace(/\n/g, ' ')}`);
        for (const n of notes) diag(`  ${n}`);
        return false;
    } finally {
        clearTimeout(timer);
        if (!controller.signal.aborted) controller.abort(new Error('check finished'));
    }
}

// ---------------------------------------------------------------- wire log
// Every JSON-RPC message the client receives, in the order the SDK handed it
// to the client (transport.onmessage), with the HTTP stream that carried it
// (found by a fetch tap). Used to explain failures of the input checks.
const wireLog = [];
let wireSeq = 0;
const streamOfMessage = new Map(); // message key -> stream label

function messageKey(msg) {
    if (!msg || typeof msg !== 'object') return undefined;
    if ('method' in msg && 'id' in msg) return `req:${msg.id}:${msg.method}`;
    if ('id' in msg) return `res:${msg.id}`;
    return undefined;
}

function summarize(msg) {
    if (!msg || typeof msg !== 'object') return safeJson(msg);
    const related = msg.params?._meta?.['io.modelcontextprotocol/related-task']?.taskId;
    if ('method' in msg) {
        const id = 'id' in msg ? ` id=${msg.id}` : '';
        const task = related ? ` related-task=${related}` : msg.params?.taskId ? ` taskId=${msg.params.taskId}` : '';
        return `${msg.method}${id}${task}`;
    }
    if ('error' in msg) return `error response id=${msg.id} ${safeJson(msg.error)}`;
    const r = msg.result ?? {};
    const task = r.task?.taskId ?? r.taskId;
    const what = task ? ` taskId=${task}${r.status || r.task?.status ? ` status=${r.status ?? r.task?.status}` : ''}` : '';
    return `response id=${msg.id}${what}`;
}

function trace(line) {
    if (TRACE) process.stderr.write(`[${((Date.now() - startedAt) / 1000).toFixed(3)}] ${line}\n`);
}

/** Records the messages of one HTTP response (JSON or SSE) under a stream label. */
async function recordStream(label, response) {
    const type = (response.headers.get('content-type') ?? '').split(';')[0].trim();
    try {
        if (type === 'application/json') {
            const data = await response.json();
            for (const m of Array.isArray(data) ? data : [data]) {
                const k = messageKey(m);
                if (k) streamOfMessage.set(k, label);
                trace(`<-- [via ${label}] ${safeJson(m)}`);
            }
        } else if (type === 'text/event-stream' && response.body) {
            const decoder = new TextDecoder();
            let buf = '';
            for await (const chunk of response.body) {
                buf += decoder.decode(chunk, { stream: true });
                let idx;
                while ((idx = buf.search(/\r?\n\r?\n/)) >= 0) {
                    const event = buf.slice(0, idx);
                    buf = buf.slice(idx).replace(/^\r?\n\r?\n/, '');
                    const data = event
                        .split(/\r?\n/)
                        .filter(l => l.startsWith('data:'))
                        .map(l => l.slice(5).replace(/^ /, ''))
                        .join('\n');
                    if (!data) continue;
                    try {
                        const m = JSON.parse(data);
                        const k = messageKey(m);
                        if (k) streamOfMessage.set(k, label);
                        trace(`<-- [via ${label}] ${data}`);
                    } catch {
                        /* not JSON: ignore */
                    }
                }
            }
        }
    } catch {
        /* the tap is best effort: a closed stream ends it */
    }
}

/** A fetch for the SDK transport that copies what it sees into the wire log. */
function tappedFetch(tag) {
    return async (input, init = {}) => {
        const method = init.method ?? 'GET';
        let label = `${tag}GET stream`;
        if (method === 'POST' && typeof init.body === 'string') {
            try {
                const body = JSON.parse(init.body);
                const first = Array.isArray(body) ? body[0] : body;
                label = first?.method
                    ? `${tag}POST ${first.method}${first.id !== undefined ? ` id=${first.id}` : ''}`
                    : `${tag}POST response id=${first?.id}`;
                trace(`--> [${label}] ${init.body}`);
            } catch {
                /* not JSON */
            }
        } else if (method !== 'GET') {
            label = `${tag}${method}`;
        }
        const response = await fetch(input, init);
        if (method === 'POST' && !response.ok) trace(`<-- [${label}] HTTP ${response.status}`);
        if (response.body && (method === 'GET' || method === 'POST')) {
            const [mine, theirs] = response.body.tee();
            void recordStream(label, new Response(mine, { headers: response.headers }));
            return new Response(theirs, { status: response.status, statusText: response.statusText, headers: response.headers });
        }
        return response;
    };
}

/** Records, in order, every message the SDK hands to the client. Install after connect. */
function tapOnMessage(transport, tag) {
    const inner = transport.onmessage;
    transport.onmessage = (msg, extra) => {
        wireLog.push({ seq: ++wireSeq, t: Date.now() - startedAt, tag, msg });
        inner?.(msg, extra);
    };
}

/** The messages (in client order) that mention taskId, or answer a request that created it. */
function orderFor(taskId, sinceSeq) {
    return wireLog
        .filter(e => e.seq > sinceSeq)
        .filter(e => {
            const s = safeJson(e.msg);
            return s.includes(taskId) || e.msg?.method === 'elicitation/create' || e.msg?.method === 'sampling/createMessage';
        })
        .map(e => {
            const stream = streamOfMessage.get(messageKey(e.msg));
            return `#${e.seq} +${e.t}ms ${e.tag}${summarize(e.msg)}${stream ? ` [via ${stream}]` : ''}`;
        });
}

// ---------------------------------------------------------------- 2026: raw dispatch
/**
 * The "host request coordinator" that ext-tasks' README asks for on a
 * 2026-07-28 Tasks server (`rawDispatch: hostRequestCoordinator.dispatch`):
 * the SDK Client's codec rejects `resultType: "task"` and does not know
 * tasks/get|update|cancel, so ext-tasks sends those requests through a
 * host-owned path. This one owns its own request ids (strings, so they never
 * collide with the Client's numeric ids), sends on the Client's own
 * StreamableHTTPClientTransport (which derives MCP-Protocol-Version,
 * Mcp-Method and Mcp-Name from the framed body) and takes the matching
 * response out of the transport's message stream before the Client sees it.
 */
function createRequestCoordinator(transport, tag) {
    let next = 0;
    const pending = new Map();
    const inner = transport.onmessage;
    transport.onmessage = (msg, extra) => {
        if (msg && typeof msg === 'object' && !('method' in msg) && 'id' in msg && pending.has(msg.id)) {
            const settle = pending.get(msg.id);
            pending.delete(msg.id);
            settle(msg);
            return;
        }
        inner?.(msg, extra);
    };
    return {
        async dispatch(request, options = {}) {
            const id = `${tag}ext-tasks-${++next}`;
            const message = { jsonrpc: '2.0', id, ...request };
            let timer;
            const answered = new Promise((resolve, reject) => {
                pending.set(id, resolve);
                timer = setTimeout(() => reject(new Error(`no response to ${request.method} within ${REQUEST_TIMEOUT_MS} ms`)), REQUEST_TIMEOUT_MS);
            });
            const aborted = new Promise((_, reject) => {
                if (options.signal?.aborted) reject(options.signal.reason);
                options.signal?.addEventListener('abort', () => reject(options.signal.reason), { once: true });
            });
            try {
                await transport.send(message, {
                    ...(options.context?.headers ? { headers: options.context.headers } : {}),
                    ...(options.signal ? { requestSignal: options.signal } : {})
                });
                const response = await Promise.race([answered, aborted]);
                return 'error' in response ? { kind: 'error', error: response.error } : { kind: 'result', result: response.result };
            } finally {
                clearTimeout(timer);
                pending.delete(id);
            }
        }
    };
}

// ---------------------------------------------------------------- clients
const sessionsToClose = [];
const inputCalls = []; // every call of the input handler: {kind, params, context}
const sessionErrors = []; // everything a session reported through onError

const onInputRequest = createApplicationInputHandler({
    elicitation: async (request, context) => {
        inputCalls.push({ kind: 'elicitation', params: request.params, context: { ...context, signal: undefined } });
        const props = request.params?.requestedSchema?.properties ?? {};
        if ('confirm' in props) return { action: 'accept', content: { confirm: true } };
        return { action: 'decline' };
    },
    sampling: async (request, context) => {
        inputCalls.push({ kind: 'sampling', params: request.params, context: { ...context, signal: undefined } });
        return {
            role: 'assistant',
            content: { type: 'text', text: CANNED_HAIKU },
            model: 'canned-model',
            stopReason: 'endTurn'
        };
    },
    roots: async (request, context) => {
        inputCalls.push({ kind: 'roots', params: request.params, context: { ...context, signal: undefined } });
        return { roots: [] };
    }
});

let endpointId;

/**
 * A connected SDK Client plus an ext-tasks session on it, as the ext-tasks
 * README shows: connect first, then createTaskSessionFromClient (with
 * rawDispatch + v2RequestFraming on a 2026-07-28 server).
 */
async function openSession(tag) {
    const clientInfo = { name: `mcp-tasks-ext-tasks-interop${tag ? `-${tag.trim()}` : ''}`, version: '0.0.0' };
    const client = new Client(clientInfo, {
        capabilities: CLIENT_CAPABILITIES,
        ...(MODERN ? { versionNegotiation: { mode: { pin: PROTOCOL_VERSION } } } : {})
    });
    client.onerror = e => sessionErrors.push(`${tag}client onerror: ${describeError(e)}`);
    const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: tappedFetch(tag) });
    await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
    const options = {
        endpointId,
        onInputRequest,
        onError: e => sessionErrors.push(`${tag}${describeError(e)}${e instanceof InputCorrelationError ? ` (reason=${e.reason})` : ''}`)
    };
    if (MODERN) {
        const coordinator = createRequestCoordinator(transport, tag);
        options.rawDispatch = coordinator.dispatch;
        options.v2RequestFraming = { protocolVersion: PROTOCOL_VERSION, clientInfo, clientCapabilities: CLIENT_CAPABILITIES };
    }
    tapOnMessage(transport, tag); // outermost: sees the coordinator's responses too
    const session = createTaskSessionFromClient(client, options);
    const handle = { client, transport, session };
    sessionsToClose.push(handle);
    return handle;
}

async function closeSession(handle) {
    const i = sessionsToClose.indexOf(handle);
    if (i >= 0) sessionsToClose.splice(i, 1);
    try {
        await handle.session.close();
    } catch {
        /* best effort */
    }
    try {
        await handle.client.close();
    } catch {
        /* best effort */
    }
}

/** Describes an outcome for a failure message. */
function describeOutcome(outcome) {
    if (outcome.status === 'completed') return `completed: ${safeJson(outcome.result)}`;
    if (outcome.status === 'failed') return `failed: ${describeError(outcome.error)}`;
    return outcome.status;
}

/** Starts a tool call that must run as a task; returns the execution. */
async function callAsTask(session, name, args, signal) {
    const execution = await session.callTool(name, args, {
        task: { preference: 'require' },
        signal,
        requestTimeoutMs: REQUEST_TIMEOUT_MS
    });
    assert(execution.kind === 'task', `${name} did not run as a task (kind ${execution.kind})`);
    return execution;
}

/**
 * Settles an execution, recording the statuses it went through. When the
 * server said `completed` but the client still reports a failure, notes the
 * result the server inlined in tasks/get (2026-07-28), which is what the
 * client rejected.
 */
async function settle(execution, signal, note) {
    const statuses = [];
    const { outcome, lastTask } = await execution.settle({
        signal,
        onEvent: event => {
            if (event.type === 'task') statuses.push(event.task.status);
        }
    });
    const inline = lastTask?.raw?.result;
    if (note && outcome.status === 'failed' && lastTask?.status === 'completed' && inline && typeof inline === 'object') {
        note(`the server's tasks/get said completed with result (resultType ${safeJson(inline.resultType)}): ${safeJson(inline).slice(0, 240)}`);
    }
    return { outcome, lastTask, statuses };
}

// ---------------------------------------------------------------- checks
let main; // the session the checks share

const CHECKS = [
    [
        'task with a result (slow_compute seconds 1)',
        'result',
        async (signal, note) => {
            const label = `ext-tasks-${wire}-${Date.now()}`;
            const execution = await callAsTask(main.session, 'slow_compute', { seconds: 1, label }, signal);
            const { outcome, statuses } = await settle(execution, signal, note);
            note(`task ${execution.handle.taskId}, statuses seen: ${statuses.join(' -> ')}`);
            assert(outcome.status === 'completed', `expected completed, got ${describeOutcome(outcome)}`);
            const text = textOf(resultFromTaskOutcome(outcome));
            assert(text.includes(label), `result text ${safeJson(text)} lacks the label ${label}`);
            assert(outcome.result.isError !== true, 'result has isError: true');
        }
    ],
    [
        'failing tool (failing_job, isError result)',
        'failing',
        async (signal, note) => {
            const execution = await callAsTask(main.session, 'failing_job', {}, signal);
            const { outcome, statuses, lastTask } = await settle(execution, signal, note);
            note(`task ${execution.handle.taskId}, statuses seen: ${statuses.join(' -> ')}; last statusMessage ${safeJson(lastTask?.statusMessage)}`);
            if (MODERN) {
                // 2026-07-28 tasks: a tool result with isError:true is a *completed* task.
                assert(outcome.status === 'completed', `expected completed with an isError result, got ${describeOutcome(outcome)}`);
                assert(outcome.result.isError === true, `expected isError: true, got ${safeJson(outcome.result)}`);
                assert(textOf(outcome.result).includes('failing_job failed on purpose'), `unexpected text ${safeJson(textOf(outcome.result))}`);
            } else {
                // 2025-11-25 tasks: the server ends the task `failed`. ext-tasks' v1 driver
                // then reports a failed outcome built from statusMessage and never calls
                // tasks/result, so the isError CallToolResult itself is not visible here.
                assert(outcome.status === 'failed', `expected failed, got ${describeOutcome(outcome)}`);
                assert(outcome.error instanceof TaskFailedError, `error is not a TaskFailedError: ${describeError(outcome.error)}`);
                assert(outcome.task?.status === 'failed', `terminal snapshot status ${outcome.task?.status}`);
                note(`outcome error: ${describeError(outcome.error)}`);
            }
        }
    ],
    [
        'JSON-RPC error (protocol_error_job)',
        'rpcerror',
        async (signal, note) => {
            const execution = await callAsTask(main.session, 'protocol_error_job', {}, signal);
            const { outcome, statuses } = await settle(execution, signal, note);
            note(`task ${execution.handle.taskId}, statuses seen: ${statuses.join(' -> ')}`);
            assert(outcome.status === 'failed', `expected failed, got ${describeOutcome(outcome)}`);
            assert(outcome.error instanceof TaskFailedError, `error is not a TaskFailedError: ${describeError(outcome.error)}`);
            note(`outcome error: ${describeError(outcome.error)}`);
            if (MODERN) {
                // 2026-07-28: the JSON-RPC error is inlined in tasks/get (`error`).
                assert(outcome.error.code === -32603, `expected code -32603, got ${describeError(outcome.error)}`);
                assert(/protocol_error_job failed on purpose/.test(outcome.error.message), `unexpected message ${safeJson(outcome.error.message)}`);
            } else {
                // 2025-11-25: ext-tasks ends a failed v1 task with statusMessage only
                // (no tasks/result call, so no JSON-RPC code).
                assert(outcome.task?.status === 'failed', `terminal snapshot status ${outcome.task?.status}`);
            }
        }
    ],
    [
        'cancel (slow_compute seconds 30, then cancel)',
        'cancel',
        async (signal, note) => {
            const execution = await callAsTask(main.session, 'slow_compute', { seconds: 30, label: 'to-cancel' }, signal);
            const taskId = execution.handle.taskId;
            await sleep(300);
            await execution.cancel(signal);
            const outcome = await execution.result();
            assert(outcome.status === 'cancelled', `expected a cancelled outcome, got ${describeOutcome(outcome)}`);
            // The server's view, through the package's task controller.
            const controller = main.session.task(taskId);
            let view = await controller.snapshot(signal);
            const seen = [view.status];
            for (let i = 0; i < 20 && view.status !== 'cancelled'; i++) {
                await sleep(100);
                view = await controller.snapshot(signal);
                seen.push(view.status);
            }
            note(`task ${taskId}, server status after cancel: ${seen.join(' -> ')}`);
            assert(view.status === 'cancelled', `server says ${view.status} after cancel`);
        }
    ],
    [
        'elicitation (confirm_delete, accepted through onInputRequest)',
        'elicitation',
        async (signal, note) => {
            const filename = `/tmp/ext-tasks-${wire}-${Date.now()}.txt`;
            const callsBefore = inputCalls.length;
            const errorsBefore = sessionErrors.length;
            const seqBefore = wireSeq;
            const execution = await callAsTask(main.session, 'confirm_delete', { filename }, signal);
            const taskId = execution.handle.taskId;
            const { outcome, statuses } = await settle(execution, signal, note);
            const calls = inputCalls.slice(callsBefore);
            const errors = sessionErrors.slice(errorsBefore);
            note(`task ${taskId}, statuses seen: ${statuses.join(' -> ')}`);
            const explain = () => {
                for (const e of errors) note(`session onError: ${e}`);
                for (const line of orderFor(taskId, seqBefore)) note(`order: ${line}`);
            };
            try {
                assert(errors.length === 0, `the session reported ${errors.length} error(s): ${errors.join(' | ')}; handler calls: ${calls.length}; outcome ${describeOutcome(outcome)}`);
                assert(calls.length === 1, `expected one input handler call, got ${calls.length}`);
                const [call] = calls;
                assert(call.kind === 'elicitation', `handler got ${call.kind}`);
                assert(call.context.scope === 'task' && call.context.taskId === taskId, `handler context ${safeJson(call.context)} is not task ${taskId}`);
                assert(call.params?.requestedSchema?.properties?.confirm?.type === 'boolean', `requestedSchema ${safeJson(call.params?.requestedSchema)}`);
                assert(outcome.status === 'completed', `expected completed, got ${describeOutcome(outcome)}`);
                const text = textOf(outcome.result);
                assert(text.includes(`Deleted ${filename}`), `result ${safeJson(text)} does not say Deleted ${filename}`);
                note(`delivered as ${call.context.delivery}`);
            } catch (e) {
                explain();
                throw e;
            }
        }
    ],
    [
        'sampling (write_haiku, canned answer through onInputRequest)',
        'sampling',
        async (signal, note) => {
            const topic = `interop ${wire}`;
            const callsBefore = inputCalls.length;
            const errorsBefore = sessionErrors.length;
            const seqBefore = wireSeq;
            const execution = await callAsTask(main.session, 'write_haiku', { topic }, signal);
            const taskId = execution.handle.taskId;
            const { outcome, statuses } = await settle(execution, signal, note);
            const calls = inputCalls.slice(callsBefore);
            const errors = sessionErrors.slice(errorsBefore);
            note(`task ${taskId}, statuses seen: ${statuses.join(' -> ')}`);
            try {
                assert(errors.length === 0, `the session reported ${errors.length} error(s): ${errors.join(' | ')}; handler calls: ${calls.length}; outcome ${describeOutcome(outcome)}`);
                assert(calls.length === 1, `expected one input handler call, got ${calls.length}`);
                const [call] = calls;
                assert(call.kind === 'sampling', `handler got ${call.kind}`);
                assert(call.context.scope === 'task' && call.context.taskId === taskId, `handler context ${safeJson(call.context)} is not task ${taskId}`);
                const first = call.params?.messages?.[0];
                const firstText = Array.isArray(first?.content) ? first.content[0]?.text : first?.content?.text;
                assert(firstText === `Write a haiku about ${topic}.`, `first message ${safeJson(first)}`);
                assert(outcome.status === 'completed', `expected completed, got ${describeOutcome(outcome)}`);
                assert(outcome.result.content?.[0]?.text === CANNED_HAIKU, `result ${safeJson(outcome.result)} is not the canned haiku`);
                note(`delivered as ${call.context.delivery}`);
            } catch (e) {
                for (const x of errors) note(`session onError: ${x}`);
                for (const line of orderFor(taskId, seqBefore)) note(`order: ${line}`);
                throw e;
            }
        }
    ],
    [
        'hand-off: start in client A, resume by task id in client B',
        'handoff',
        async (signal, note) => {
            const label = `handoff-${wire}-${Date.now()}`;
            const a = await openSession('[A] ');
            let stored;
            let taskId;
            try {
                const execution = await callAsTask(a.session, 'slow_compute', { seconds: 2, label }, signal);
                taskId = execution.handle.taskId;
                await execution.handoff(reference => {
                    stored = JSON.stringify(reference); // what an application would persist
                });
                // handoff() detaches: the local outcome ends (closed) without cancelling the task.
                // Wait for it before closing the session, whose close() would otherwise cancel
                // a still-unsettled execution.
                const local = await execution.result();
                note(`client A handed off task ${taskId} (local outcome ${local.status}: ${local.status === 'failed' ? local.error.message : ''}); reference ${stored}`);
            } finally {
                await closeSession(a);
            }
            const reference = JSON.parse(stored);
            assert(reference.taskId === taskId, `reference ${stored} does not carry task ${taskId}`);
            const b = await openSession('[B] ');
            try {
                const resumed = await b.session.resumeTask(reference, { signal, requestTimeoutMs: REQUEST_TIMEOUT_MS });
                assert(resumed.kind === 'task' && resumed.handle.taskId === taskId, `resumed execution is not task ${taskId}`);
                const { outcome, statuses } = await settle(resumed, signal, note);
                note(`client B statuses seen: ${statuses.join(' -> ')}`);
                assert(outcome.status === 'completed', `expected completed in client B, got ${describeOutcome(outcome)}`);
                const text = textOf(outcome.result);
                assert(text.includes(label), `result text ${safeJson(text)} lacks the label ${label}`);
            } finally {
                await closeSession(b);
            }
        }
    ]
];

// ---------------------------------------------------------------- run
const watchdog = setTimeout(() => {
    failed++;
    console.log(`FAIL watchdog: the whole run exceeded ${SCRIPT_BUDGET_MS} ms`);
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(1);
}, SCRIPT_BUDGET_MS);
watchdog.unref();

async function run() {
    endpointId = await createTaskSessionEndpointId('mcp-tasks-interop', { url });
    diag(`@modelcontextprotocol/ext-tasks client against ${url}, wire ${PROTOCOL_VERSION}`);
    const connected = await check(`connect (${PROTOCOL_VERSION})`, async (_signal, note) => {
        main = await openSession('');
        const version = main.client.getNegotiatedProtocolVersion();
        const era = main.client.getProtocolEra();
        note(`negotiated ${version} (era ${era}); session capabilities ${safeJson(main.session.capabilities)}`);
        assert(version === PROTOCOL_VERSION, `negotiated ${version}, expected ${PROTOCOL_VERSION}`);
        if (MODERN) {
            assert(main.session.capabilities.inputResponses === true, 'ext-tasks did not pick its V2 (2026-07-28) task protocol');
        } else {
            assert(main.session.capabilities.inventory === 'server-list' && main.session.capabilities.cancellation, 'ext-tasks did not pick its V1 (2025-11-25) task protocol with list+cancel');
        }
    });
    const selected = CHECKS.filter(([, key]) => ONLY.length === 0 || ONLY.includes(key));
    for (const [name, , fn] of selected) {
        for (let i = 1; i <= REPEAT; i++) {
            const label = REPEAT > 1 ? `${name} [${i}/${REPEAT}]` : name;
            if (!connected) {
                failed++;
                console.log(`FAIL ${label}: skipped, could not connect`);
                continue;
            }
            await check(label, fn);
        }
    }
    const leftover = sessionErrors.filter(e => !e.includes('InputCorrelationError'));
    if (leftover.length > 0) {
        diag('errors the client reported that no check asserts on (informational):');
        for (const e of leftover.slice(0, 10)) diag(`  ${e}`);
    }
    for (const handle of [...sessionsToClose]) await closeSession(handle);
}

run()
    .catch(e => {
        failed++;
        console.log(`FAIL harness: ${describeError(e)}`);
    })
    .finally(() => {
        console.log(`${passed} passed, ${failed} failed`);
        process.exit(failed > 0 ? 1 : 0);
    });
