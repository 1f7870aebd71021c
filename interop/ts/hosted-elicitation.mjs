#!/usr/bin/env node
// The official MCP TypeScript SDK v1 client (pinned in package.json) hosting a task for the server:
// it declares capabilities.tasks.requests.elicitation.create with a task store, so a server may ask
// its question as a task the client runs. The client answers elicitation/create with a
// CreateTaskResult; the SDK then serves the server's tasks/get and tasks/result from its store.
//
// Usage: node hosted-elicitation.mjs http://127.0.0.1:PORT/mcp
// Prints `ok - NAME` / `not ok - NAME: REASON` lines and `N passed, M failed`; exit 1 on a failure.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';

const url = process.argv[2];
if (!url) {
    console.error('usage: node hosted-elicitation.mjs <url>');
    process.exit(2);
}
setTimeout(() => {
    console.log('not ok - the script took over 60 s');
    process.exit(1);
}, 60_000).unref();

let passed = 0;
let failed = 0;
const check = (name, ok, why) => {
    if (ok) {
        passed++;
        console.log(`ok - ${name}`);
    } else {
        failed++;
        console.log(`not ok - ${name}: ${why}`);
    }
};

const asked = [];
const taskStore = new InMemoryTaskStore();
const client = new Client(
    { name: 'mcp-tasks-interop-hosting', version: '0.1.0' },
    {
        capabilities: {
            elicitation: { form: {} },
            tasks: { list: {}, cancel: {}, requests: { elicitation: { create: {} } } }
        },
        taskStore
    }
);
client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
    asked.push(request.params);
    const answer = { action: 'accept', content: { confirm: true } };
    if (request.params.task && extra.taskStore) {
        const task = await extra.taskStore.createTask({ ttl: extra.taskRequestedTtl });
        // The answer comes a moment later, as a person's would: the server polls meanwhile.
        setTimeout(() => {
            extra.taskStore.storeTaskResult(task.taskId, 'completed', answer).catch(e => console.log(`# ${e}`));
        }, 700);
        return { task };
    }
    return answer;
});

try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    await client.listTools();
    const stream = client.experimental.tasks.callToolStream(
        { name: 'confirm_delete', arguments: { filename: 'hosted.txt' } },
        CallToolResultSchema,
        { task: { ttl: 60_000 } }
    );
    let result;
    for await (const msg of stream) {
        if (msg.type === 'result') result = msg.result;
        else if (msg.type === 'error') throw msg.error;
    }
    check('the server asked its question as a task', asked.length === 1 && asked[0].task !== undefined, JSON.stringify(asked));
    const text = result?.content?.[0]?.text ?? '';
    check('the answer the client task gave reached the tool', text.startsWith('Deleted hosted.txt'), JSON.stringify(result));
} catch (e) {
    check('the call ran', false, e?.stack ?? String(e));
}
console.log(`${passed} passed, ${failed} failed`);
await client.close().catch(() => {});
process.exit(failed ? 1 : 0);
