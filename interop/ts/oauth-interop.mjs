#!/usr/bin/env node
// OAuth interop for mcp-tasks with the OFFICIAL MCP TypeScript SDK v1 client
// (@modelcontextprotocol/sdk, pinned in package.json) and its ClientCredentialsProvider:
//
//   1. the client connects with no token; our 401 names the protected-resource metadata, from which
//      the SDK finds the authorization server, gets a token (client credentials, RFC 8707 resource)
//      and connects;
//   2. it runs a task (slow_compute) as that user;
//   3. it calls `deploy`, which needs a scope its token lacks: the SDK reads our 403
//      insufficient_scope and tries to step up, but SDK 1.32.2 asks a client-credentials
//      authorization server for the provider's own configured scope only (`fetchToken` sends
//      `clientMetadata.scope`, not the challenge's), so it gets the same scope and gives up;
//   4. the same user steps up the way such a client can: a provider configured with the wider
//      scope, a transport on the same session id; the deploy task completes on that session, and
//      the user's first task is still there.
//
// Usage: node oauth-interop.mjs SERVER_URL ISSUER CLIENT_ID CLIENT_SECRET
// The server runs `deploy` (scopes = ["tasks:deploy"]) and the demo tools
// (crates/cli/tests/oauth_interop.rs sets it up).
//
// Output: `ok - NAME` or `not ok - NAME: REASON` per check, `# ` diagnostics, and the final line
// `N passed, M failed`; exit code 1 when a check failed, 2 on a usage error.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, issuer, clientId, clientSecret] = process.argv.slice(2);
if (!url || !issuer || !clientId || !clientSecret) {
    console.error('usage: node oauth-interop.mjs SERVER_URL ISSUER CLIENT_ID CLIENT_SECRET');
    process.exit(2);
}
const TIMEOUT_MS = 10_000;

let passed = 0;
let failed = 0;
const diag = msg => console.log(`# ${msg}`);
async function check(name, fn) {
    try {
        await Promise.race([
            fn(),
            new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out after ${TIMEOUT_MS} ms`)), TIMEOUT_MS).unref())
        ]);
        passed++;
        console.log(`ok - ${name}`);
    } catch (e) {
        failed++;
        console.log(`not ok - ${name}: ${e?.stack ?? e}`);
    }
}
function assert(cond, msg) {
    if (!cond) throw new Error(msg);
}
const textOf = r => (r?.content ?? []).map(c => c.text ?? '').join('');

/** Runs `name` as a task through the SDK's tasks client until its result. */
async function runTask(client, name, args) {
    const out = { created: undefined, statuses: [], result: undefined, error: undefined };
    const stream = client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, {
        task: { ttl: 300_000 },
        timeout: TIMEOUT_MS
    });
    for await (const msg of stream) {
        if (msg.type === 'taskCreated') out.created = msg.task;
        else if (msg.type === 'taskStatus') out.statuses.push(msg.task.status);
        else if (msg.type === 'result') out.result = msg.result;
        else if (msg.type === 'error') out.error = msg.error;
    }
    return out;
}

const provider = new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer, scope: 'tasks' });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
const client = new Client({ name: 'mcp-tasks-oauth-interop', version: '0.0.0' });
let sessionId;

await check('connect: the SDK finds the authorization server from our 401 and gets a token (client credentials)', async () => {
    await client.connect(transport, { timeout: TIMEOUT_MS });
    const tokens = provider.tokens();
    assert(tokens?.access_token, 'the provider holds no token after connecting');
    assert(tokens.scope === 'tasks', `first token's scope: expected "tasks", got ${JSON.stringify(tokens.scope)}`);
    sessionId = transport.sessionId;
    assert(sessionId, 'no session id');
    diag(`session ${sessionId}, token scope "${tokens.scope}"`);
});

await check('tools/list lists deploy to a caller without its scope', async () => {
    const { tools } = await client.listTools(undefined, { timeout: TIMEOUT_MS });
    const names = tools.map(t => t.name);
    assert(names.includes('deploy') && names.includes('slow_compute'), `tools: ${names.join(', ')}`);
});

await check('slow_compute runs as a task of the token user (callToolStream)', async () => {
    const out = await runTask(client, 'slow_compute', { seconds: 1, label: 'oauth' });
    assert(out.created?.taskId, `no task created: ${out.error}`);
    assert(!out.error, `error: ${out.error}`);
    assert(out.statuses.at(-1) === 'completed', `statuses: ${out.statuses.join(',')}`);
    assert(textOf(out.result).includes('oauth'), `result: ${JSON.stringify(out.result)}`);
});

await check('deploy without its scope: the SDK reads our 403 as insufficient_scope and tries to step up', async () => {
    const out = await runTask(client, 'deploy', { service: 'web' });
    assert(!out.created, `a task was created without the scope: ${JSON.stringify(out.created)}`);
    assert(String(out.error).includes('Server returned 403 after trying upscoping'), `error: ${out.error}`);
});

// Step up: the same user (client), a token with the wider scope, the same session.
const wider = new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer, scope: 'tasks tasks:deploy' });
const resumed = new StreamableHTTPClientTransport(new URL(url), { authProvider: wider, sessionId });
const stepped = new Client({ name: 'mcp-tasks-oauth-interop', version: '0.0.0' });

await check('deploy with a fresh token of the wider scope on the same session: the task completes', async () => {
    // With a session id the SDK does not initialize again: the session goes on.
    await stepped.connect(resumed, { timeout: TIMEOUT_MS });
    // The SDK keeps the capabilities it learned at initialize; a resumed client has none, so list
    // the tools to learn which run as tasks.
    await stepped.listTools(undefined, { timeout: TIMEOUT_MS });
    const out = await runTask(stepped, 'deploy', { service: 'web' });
    assert(!out.error, `error: ${out.error}`);
    assert(out.created?.taskId, 'no task created');
    assert(out.statuses.at(-1) === 'completed', `statuses: ${out.statuses.join(',')}`);
    assert(textOf(out.result).includes('deployed web'), `result: ${JSON.stringify(out.result)}`);
    const scope = wider.tokens()?.scope;
    assert(scope === 'tasks tasks:deploy', `the new token's scope: ${JSON.stringify(scope)}`);
    assert(resumed.sessionId === sessionId, `session changed: ${sessionId} -> ${resumed.sessionId}`);
});

await check("the user's first task is still theirs on the session after the step-up (tasks/list)", async () => {
    const { tasks } = await stepped.experimental.tasks.listTasks(undefined, { timeout: TIMEOUT_MS });
    assert(tasks.length === 2, `expected the user's 2 tasks, got ${tasks.length}`);
});

try {
    await resumed.terminateSession();
    await stepped.close();
    await client.close();
} catch (e) {
    diag(`close: ${e}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
