#!/usr/bin/env node
// Interop checks for mcp-tasks using the OFFICIAL MCP TypeScript SDK v1
// (@modelcontextprotocol/sdk, pinned in package.json) and its experimental
// tasks client: client.experimental.tasks.{callToolStream,getTask,
// getTaskResult,listTasks,cancelTask}.
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
    ErrorCode,
    McpError,
    TaskStatusNotificationSchema
} from '@modelcontextprotocol/sdk/types.js';

const SCRIPT_BUDGET_MS = 55_000; // whole script must stay below 60 s
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

/** Run one check, bounded in time. Returns true when it passed. */
async function check(name, timeoutMs, fn) {
    const remaining = SCRIPT_BUDGET_MS - (Date.now() - startedAt);
    const budget = Math.max(1, Math.min(timeoutMs, remaining - 500));
    try {
        await withTimeout(Promise.resolve().then(fn), budget, name);
        passed++;
        console.log(`ok - ${name}`);
        return true;
    } catch (e) {
        failed++;
        const reason = e instanceof CheckFailure ? e.message : describeError(e);
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
let stderrTail = [];
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
    if (failed > 0 && stderrTail.length > 0) {
        diag('last lines of server stderr:');
        for (const l of stderrTail.slice(-20)) diag(`  ${l}`);
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
    } else if (transportKind === 'stdio' && transport?.pid) {
        try {
            process.kill(transport.pid, 'SIGKILL');
        } catch {
            /* already gone */
        }
    }
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed > 0 ? 1 : 0);
}

// ---------------------------------------------------------------- transport
if (transportKind === 'http') {
    let url;
    try {
        url = new URL(target);
    } catch (e) {
        console.error(`invalid URL ${JSON.stringify(target)}: ${e.message}`);
        process.exit(2);
    }
    transport = new StreamableHTTPClientTransport(url, {
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
    transport = new StdioClientTransport({ command: target, args, env, stderr: 'pipe' });
    transport.stderr?.on('data', chunk => {
        const lines = chunk.toString('utf8').split('\n').filter(l => l.length > 0);
        stderrTail.push(...lines);
        if (stderrTail.length > 200) stderrTail = stderrTail.slice(-100);
        if (TRACE) for (const l of lines) process.stderr.write(`[server stderr] ${l}\n`);
    });
}

// Wire tap: Protocol.connect() chains a previously installed
// transport.onmessage before its own handler, so this sees every inbound
// message; transport.send is wrapped to see every outbound one.
const wire = { inbound: [], outbound: [] };
transport.onmessage = msg => {
    wire.inbound.push(msg);
    if (TRACE) process.stderr.write(`<-- ${safeJson(msg)}\n`);
};
const origSend = transport.send.bind(transport);
transport.send = (msg, opts) => {
    wire.outbound.push(msg);
    if (TRACE) process.stderr.write(`--> ${safeJson(msg)}\n`);
    return origSend(msg, opts);
};

const sdkErrors = [];
const client = new Client({ name: 'mcp-tasks-interop-ts', version: '0.1.0' }, { capabilities: {} });
client.onerror = e => {
    sdkErrors.push(describeError(e));
    if (TRACE) process.stderr.write(`[sdk onerror] ${describeError(e)}\n`);
};
// notifications/tasks/status is optional for servers (MAY); just record them.
const statusNotifications = [];
client.setNotificationHandler(TaskStatusNotificationSchema, n => {
    statusNotifications.push(n.params);
});

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
    'tasks/get on an unknown task id -> -32602'
];

main()
    .catch(e => {
        failed++;
        console.log(`not ok - unexpected script error: ${describeError(e)}`);
    })
    .finally(() => finish());
