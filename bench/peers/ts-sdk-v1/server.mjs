#!/usr/bin/env node
// Benchmark peer: the official MCP TypeScript SDK v1 (@modelcontextprotocol/sdk, pinned in
// package.json) serving one task tool, `noop`, over Streamable HTTP on the 2025-11-25 wire.
//
// Written the way the SDK's own examples do it (dist/esm/examples/server/simpleStreamableHttp.js
// and jsonResponseStreamableHttp.js): express from createMcpExpressApp(), one McpServer and one
// StreamableHTTPServerTransport per session, a shared InMemoryTaskStore, the tool registered with
// server.experimental.tasks.registerToolTask; tasks/get, tasks/result, tasks/list and tasks/cancel
// are the SDK's own handlers (installed by Protocol when a taskStore is given).
//
// Usage: node server.mjs [--port N] [--json]
//   --port N  port on 127.0.0.1 (0 or absent: ephemeral)
//   --json    enableJsonResponse: replies to POSTs as application/json instead of an SSE stream
//             (the SDK's default, and that of its tasks example, is SSE)
// Prints exactly one line on stdout: `listening on http://127.0.0.1:PORT/mcp`. Errors go to stderr.

import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';

function parseArgs(argv) {
    const opts = { port: 0, json: false };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === '--port') {
            opts.port = Number.parseInt(argv[++i] ?? '', 10);
        } else if (a.startsWith('--port=')) {
            opts.port = Number.parseInt(a.slice('--port='.length), 10);
        } else if (a === '--json') {
            opts.json = true;
        } else if (a === '-h' || a === '--help') {
            process.stderr.write('usage: server.mjs [--port N] [--json]\n');
            process.exit(0);
        } else {
            process.stderr.write(`unknown argument: ${a}\n`);
            process.exit(2);
        }
    }
    if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) {
        process.stderr.write('--port needs an integer in 0..65535\n');
        process.exit(2);
    }
    return opts;
}

const opts = parseArgs(process.argv.slice(2));

// One store for all sessions, as in the SDK's example; a task belongs to the session that made it.
const taskStore = new InMemoryTaskStore();

const getServer = () => {
    const server = new McpServer(
        { name: 'mcp-tasks-peer-ts-sdk-v1', version: '1.0.0' },
        {
            capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
            taskStore,
            taskMessageQueue: new InMemoryTaskMessageQueue()
        }
    );
    // taskSupport 'required': `noop` is only ever called as a task. With 'optional', a call without
    // params.task is run by the SDK's handleAutomaticTaskPolling, which sleeps pollInterval (1 s)
    // between store reads, so a load generator that forgot params.task would silently measure a
    // 1-second timer instead of failing.
    server.experimental.tasks.registerToolTask(
        'noop',
        {
            description: 'Does nothing and returns "ok" at once (runs as a task)',
            execution: { taskSupport: 'required' }
        },
        {
            async createTask({ taskStore, taskRequestedTtl }) {
                const task = await taskStore.createTask({ ttl: taskRequestedTtl });
                // The work, started in the background like the SDK's `delay` example; it has
                // nothing to wait for, so it finishes right after the task is created.
                (async () => {
                    await taskStore.storeTaskResult(task.taskId, 'completed', {
                        content: [{ type: 'text', text: 'ok' }]
                    });
                })().catch(err => process.stderr.write(`noop: ${err}\n`));
                return { task };
            },
            async getTask(extra) {
                return await extra.taskStore.getTask(extra.taskId);
            },
            async getTaskResult(extra) {
                return await extra.taskStore.getTaskResult(extra.taskId);
            }
        }
    );
    return server;
};

const app = createMcpExpressApp();

// Session bookkeeping as in the SDK's examples: close sessions idle for IDLE_MS, at most
// MAX_SESSIONS open at once.
const IDLE_MS = 30 * 60000;
const MAX_SESSIONS = 1000;
const sessions = new Map();
const trackResponse = (session, res) => {
    if (!res.socket || res.destroyed) return;
    session.open++;
    res.on('close', () => {
        session.open--;
        session.lastActive = Date.now();
    });
};
setInterval(() => {
    const cutoff = Date.now() - IDLE_MS;
    for (const { transport, open, lastActive } of sessions.values()) {
        if (open === 0 && lastActive < cutoff) transport.close().catch(() => {});
    }
}, 60000).unref();

const jsonError = (res, status, code, message) =>
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });

app.post('/mcp', async (req, res) => {
    try {
        const sessionId = req.headers['mcp-session-id'];
        const session = sessionId ? sessions.get(sessionId) : undefined;
        if (session) {
            trackResponse(session, res);
            await session.transport.handleRequest(req, res, req.body);
            return;
        }
        if (sessionId) {
            jsonError(res, 404, -32001, 'Session not found');
            return;
        }
        if (!isInitializeRequest(req.body)) {
            jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
            return;
        }
        if (sessions.size >= MAX_SESSIONS) {
            jsonError(res, 503, -32000, 'Too many open sessions');
            return;
        }
        const transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            enableJsonResponse: opts.json,
            onsessioninitialized: sid => {
                sessions.set(sid, { transport, open: 0, lastActive: Date.now() });
            }
        });
        transport.onclose = () => {
            const sid = transport.sessionId;
            if (sid) sessions.delete(sid);
        };
        await getServer().connect(transport);
        await transport.handleRequest(req, res, req.body);
    } catch (error) {
        process.stderr.write(`error handling MCP request: ${error}\n`);
        if (!res.headersSent) jsonError(res, 500, -32603, 'Internal server error');
    }
});

// GET (standalone SSE stream) and DELETE (end the session) are the transport's own.
const sessionRequest = async (req, res) => {
    const sessionId = req.headers['mcp-session-id'];
    if (!sessionId) {
        res.status(400).send('Missing session ID');
        return;
    }
    const session = sessions.get(sessionId);
    if (!session) {
        jsonError(res, 404, -32001, 'Session not found');
        return;
    }
    trackResponse(session, res);
    try {
        await session.transport.handleRequest(req, res);
    } catch (error) {
        process.stderr.write(`error handling MCP ${req.method}: ${error}\n`);
        if (!res.headersSent) res.status(500).send('Internal server error');
    }
};
app.get('/mcp', sessionRequest);
app.delete('/mcp', sessionRequest);

const httpServer = app.listen(opts.port, '127.0.0.1', error => {
    if (error) {
        process.stderr.write(`cannot listen: ${error}\n`);
        process.exit(1);
    }
    process.stdout.write(`listening on http://127.0.0.1:${httpServer.address().port}/mcp\n`);
});

const shutdown = () => {
    for (const { transport } of sessions.values()) transport.close().catch(() => {});
    taskStore.cleanup();
    httpServer.close();
    process.exit(0);
};
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);
