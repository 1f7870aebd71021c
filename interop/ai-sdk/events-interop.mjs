// MCP Events with the Vercel AI SDK's own client and its own verifying webhook receiver
// (@ai-sdk/mcp 2.0.99: experimental_events and experimental_createMCPEventWebhook), against an
// mcp-tasks server on 127.0.0.1. One JSON line per step on stdout, for the Rust test that drives
// it (crates/cli/tests/events.rs):
//
//   MCP_URL=http://127.0.0.1:PORT/mcp TOKEN=key [LEGACY=1] node events-interop.mjs
//
// {"listed": [names]}, then {"subscribed": {...}} once the subscription is verified and stored;
// the test then runs a task as the same principal; {"event": {...}, "status": N} when the receiver
// took it (the receiver's answer: 204), {"refreshed": {...}}, {"unsubscribed": true}. LEGACY=1 takes
// the 2025-11-25 initialize path (protocolVersionDiscovery: false). TERMINATE=1: after
// {"subscribed"}, waits for the server to end the subscription and prints {"terminated": {...},
// "status": N, "stored": rows} once the receiver's onTerminated ran. Exits 1 with {"error": "..."}.
import http from 'node:http';
import { Readable } from 'node:stream';
import {
  experimental_createMCPClient as createMCPClient,
  experimental_createMCPEventWebhook as createMCPEventWebhook,
} from '@ai-sdk/mcp';

const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fail = (e) => {
  say({ error: String(e && e.stack ? e.stack : e) });
  process.exit(1);
};
process.on('unhandledRejection', fail);

// The application's store of subscriptions (it holds the secret): in memory here.
const rows = new Map();
const store = {
  async get(k) { return rows.get(k); },
  async getById(id) { return [...rows.values()].find((s) => s.id === id); },
  async set(s) { rows.set(s.key, structuredClone(s)); },
  async update(k, p) { rows.set(k, { ...rows.get(k), ...p }); },
  async delete(k) { rows.delete(k); },
};

let gotEvent;
const firstEvent = new Promise((r) => (gotEvent = r));
let gotTerminated;
const termination = new Promise((r) => (gotTerminated = r));
const handle = createMCPEventWebhook({
  store,
  onEvent: async (e) => gotEvent(e),
  onTerminated: async (t) => gotTerminated(t),
});
const statuses = [];
const receiver = http.createServer(async (req, res) => {
  try {
    const r = await handle(new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers: req.headers,
      duplex: 'half',
      body: req.method === 'POST' ? Readable.toWeb(req) : undefined,
    }));
    statuses.push({ id: req.headers['webhook-id'], status: r.status });
    res.writeHead(r.status, Object.fromEntries(r.headers)).end(Buffer.from(await r.arrayBuffer()));
  } catch (e) {
    res.writeHead(500).end();
    fail(e);
  }
});
await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
const hook = `http://127.0.0.1:${receiver.address().port}/hooks`;

const client = await createMCPClient({
  transport: {
    type: 'http',
    url: process.env.MCP_URL,
    headers: { Authorization: `Bearer ${process.env.TOKEN}` },
  },
  experimental_events: { store },
  ...(process.env.LEGACY ? { protocolVersionDiscovery: false } : {}),
});

const listed = await client.experimental_events.list();
say({ listed: listed.events.map((e) => e.name) });

const sub = await client.experimental_events.subscribe({
  name: 'task.finished',
  arguments: {},
  ttlMs: 3_600_000,
  delivery: { mode: 'webhook', url: hook, allowInsecureLocalhost: true },
});
say({ subscribed: sub });

if (process.env.TERMINATE) {
  const t = await Promise.race([termination, new Promise((r) => setTimeout(() => r(null), 30_000))]);
  if (!t) fail(`no terminated envelope in 30 s; the receiver answered ${JSON.stringify(statuses)}`);
  for (let i = 0; i < 50 && !statuses.some((s) => s.id === t.messageId); i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  say({
    terminated: t,
    status: statuses.find((s) => s.id === t.messageId)?.status,
    stored: rows.size,
  });
  await client.close();
  receiver.close();
  process.exit(0);
}

// onEvent gets {event, subscription}: the occurrence and the stored subscription it came for.
const got = await Promise.race([
  firstEvent,
  new Promise((r) => setTimeout(() => r(null), 30_000)),
]);
if (!got) fail(`no event in 30 s; the receiver answered ${JSON.stringify(statuses)}`);
const event = got.event;
if (got.subscription.id !== sub.id) fail(`an event for ${got.subscription.id}, not ${sub.id}`);
// The receiver's answer is written after onEvent returns: wait for it.
for (let i = 0; i < 50 && !statuses.some((s) => s.id === event.eventId); i++) {
  await new Promise((r) => setTimeout(r, 20));
}
say({ event, status: statuses.find((s) => s.id === event.eventId)?.status, answers: statuses });

const refreshed = await client.experimental_events.refresh({ id: sub.id });
say({ refreshed });
await client.experimental_events.unsubscribe({ id: sub.id });
say({ unsubscribed: true, stored: rows.size });
await client.close();
receiver.close();
process.exit(0);
