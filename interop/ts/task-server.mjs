#!/usr/bin/env node
// A server no one here wrote, for the client's tests: the official MCP TypeScript SDK v1
// (@modelcontextprotocol/sdk, pinned in package.json) serving task tools over Streamable HTTP on the
// 2025-11-25 wire, with its experimental tasks API (InMemoryTaskStore, registerToolTask), the way
// the SDK's own examples (dist/esm/examples/server/simpleStreamableHttp.js) write them.
//
// Tools (task tools with taskSupport "required", and one plain tool):
//   count {seconds}   counts the seconds, its status message saying "i of n", then "counted to n"
//   fail {}           ends failed with a tool error ("fail: on purpose")
//   ask {}            asks the user to confirm (form elicitation through the task's queue), then
//                     reports the answer
//   confirm_as_task {} (a plain tool) asks the same as a task the client runs, when the client
//                     declared tasks.requests.elicitation.create; says "as a task: …" or "inline: …"
//
// Usage: node task-server.mjs — prints `listening on http://127.0.0.1:PORT/mcp` on stdout.

import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';

const taskStore = new InMemoryTaskStore();
const sleep = ms => new Promise(r => setTimeout(r, ms));

// Stores a result unless the task already ended (a cancel wins).
async function finish(store, taskId, status, result) {
    const t = await store.getTask(taskId);
    if (t && ['completed', 'failed', 'cancelled'].includes(t.status)) return;
    await store.storeTaskResult(taskId, status, result);
}

// The SDK passes (args, extra) to tools with an input schema and (extra) alone to the others.
const split = a => (a.length > 1 ? [a[0], a[a.length - 1]] : [{}, a[0]]);
const handlers = run => ({
    async createTask(...a) {
        const [args, extra] = split(a);
        const task = await extra.taskStore.createTask({ ttl: extra.taskRequestedTtl, pollInterval: 200 });
        run(args, extra, task).catch(err => process.stderr.write(`task ${task.taskId}: ${err}\n`));
        return { task };
    },
    async getTask(...a) {
        const [, extra] = split(a);
        return await extra.taskStore.getTask(extra.taskId);
    },
    async getTaskResult(...a) {
        const [, extra] = split(a);
        return await extra.taskStore.getTaskResult(extra.taskId);
    }
});

const getServer = () => {
    const server = new McpServer(
        { name: 'mcp-tasks-interop-ts-sdk-v1', version: '1.0.0' },
        {
            capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
            taskStore,
            taskMessageQueue: new InMemoryTaskMessageQueue()
        }
    );
    server.experimental.tasks.registerToolTask(
        'count',
        {
            description: 'Counts the seconds, saying how far it got',
            inputSchema: { seconds: z.number().int().min(0).max(600) },
            execution: { taskSupport: 'required' }
        },
        handlers(async ({ seconds }, extra, task) => {
            for (let i = 1; i <= seconds; i++) {
                await sleep(1000);
                const t = await extra.taskStore.getTask(task.taskId);
                if (!t || t.status !== 'working') return;
                await extra.taskStore.updateTaskStatus(task.taskId, 'working', `${i} of ${seconds}`);
            }
            await finish(extra.taskStore, task.taskId, 'completed', {
                content: [{ type: 'text', text: `counted to ${seconds}` }]
            });
        })
    );
    server.experimental.tasks.registerToolTask(
        'fail',
        { description: 'Fails on purpose', execution: { taskSupport: 'required' } },
        handlers(async (_args, extra, task) => {
            await sleep(200);
            await finish(extra.taskStore, task.taskId, 'failed', {
                content: [{ type: 'text', text: 'fail: on purpose' }],
                isError: true
            });
        })
    );
    server.experimental.tasks.registerToolTask(
        'ask',
        { description: 'Asks the user to confirm, then says what they answered', execution: { taskSupport: 'required' } },
        handlers(async (_args, extra, task) => {
            const stream = server.server.experimental.tasks.elicitInputStream({
                mode: 'form',
                message: 'Go ahead?',
                requestedSchema: {
                    type: 'object',
                    properties: { confirm: { type: 'boolean', title: 'Confirm' } },
                    required: ['confirm']
                }
            }, { relatedTask: { taskId: task.taskId } });
            let answer;
            for await (const msg of stream) {
                if (msg.type === 'result') answer = msg.result;
                else if (msg.type === 'error') throw msg.error;
            }
            const text = answer?.action === 'accept' ? `confirm=${answer.content?.confirm}` : `action=${answer?.action}`;
            await finish(extra.taskStore, task.taskId, 'completed', { content: [{ type: 'text', text }] });
        })
    );
    // A plain tool whose question goes to the client as a task the client runs (2025-11-25 "both
    // directions"), on the call's own stream: elicitation/create with params.task, then tasks/get
    // polls and tasks/result, all answered by the client.
    server.registerTool(
        'confirm_as_task',
        { description: 'Asks the user to confirm, as a task the client runs when it hosts tasks' },
        async extra => {
            const hosts = server.server.getClientCapabilities()?.tasks?.requests?.elicitation?.create;
            const stream = server.server.experimental.tasks.elicitInputStream(
                {
                    mode: 'form',
                    message: 'Go ahead?',
                    requestedSchema: {
                        type: 'object',
                        properties: { confirm: { type: 'boolean', title: 'Confirm' } },
                        required: ['confirm']
                    }
                },
                { relatedRequestId: extra.requestId, ...(hosts ? { task: { ttl: 60000 } } : {}) }
            );
            let answer;
            let asTask = false;
            for await (const msg of stream) {
                if (msg.type === 'taskCreated') asTask = true;
                else if (msg.type === 'result') answer = msg.result;
                else if (msg.type === 'error') throw msg.error;
            }
            const said = answer?.action === 'accept' ? `confirm=${answer.content?.confirm}` : `action=${answer?.action}`;
            return { content: [{ type: 'text', text: `${asTask ? 'as a task' : 'inline'}: ${said}` }] };
        }
    );
    return server;
};

const app = createMcpExpressApp();
const sessions = new Map();
const jsonError = (res, status, code, message) =>
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });

app.post('/mcp', async (req, res) => {
    try {
        const sessionId = req.headers['mcp-session-id'];
        const transport = sessionId ? sessions.get(sessionId) : undefined;
        if (transport) {
            await transport.handleRequest(req, res, req.body);
            return;
        }
        if (sessionId) return jsonError(res, 404, -32001, 'Session not found');
        if (!isInitializeRequest(req.body)) return jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
        const t = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: sid => sessions.set(sid, t)
        });
        t.onclose = () => t.sessionId && sessions.delete(t.sessionId);
        await getServer().connect(t);
        await t.handleRequest(req, res, req.body);
    } catch (error) {
        process.stderr.write(`error handling MCP request: ${error}\n`);
        if (!res.headersSent) jsonError(res, 500, -32603, 'Internal server error');
    }
});
const sessionRequest = async (req, res) => {
    const transport = sessions.get(req.headers['mcp-session-id']);
    if (!transport) return jsonError(res, 404, -32001, 'Session not found');
    await transport.handleRequest(req, res);
};
app.get('/mcp', sessionRequest);
app.delete('/mcp', sessionRequest);

const httpServer = app.listen(0, '127.0.0.1', error => {
    if (error) {
        process.stderr.write(`cannot listen: ${error}\n`);
        process.exit(1);
    }
    process.stdout.write(`listening on http://127.0.0.1:${httpServer.address().port}/mcp\n`);
});
const shutdown = () => {
    taskStore.cleanup();
    process.exit(0);
};
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);
