// Shared by the peers' smoke scripts: start a peer (or use a URL), POST JSON-RPC with keep-alive on
// one connection, read a reply that comes as JSON or as an SSE stream, time a loop.
// Node >= 20, no dependencies.

import http from 'node:http';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

/** Command-line: [URL] [--n N] [--quiet] [--json] (other words are passed to the server). */
export function parseArgs(argv) {
    const out = { url: undefined, n: 300, quiet: false, serverArgs: [] };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === '--n') out.n = Number.parseInt(argv[++i], 10);
        else if (a === '--quiet') out.quiet = true;
        else if (/^https?:\/\//.test(a)) out.url = a;
        else out.serverArgs.push(a);
    }
    return out;
}

/** Starts `cmd args`, waits for `listening on URL` on its first stdout line; returns {url, stop}. */
export async function startServer(cmd, args) {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    const lines = createInterface({ input: child.stdout });
    const first = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${cmd} printed nothing within 60 s`)), 60000);
        child.once('error', reject);
        child.once('exit', code => reject(new Error(`${cmd} exited with ${code} before listening`)));
        lines.once('line', line => {
            clearTimeout(timer);
            resolve(line);
        });
    });
    lines.on('line', line => process.stderr.write(`server stdout (unexpected): ${line}\n`));
    const m = /^listening on (http:\/\/127\.0\.0\.1:\d+\/mcp)$/.exec(first);
    if (!m) throw new Error(`unexpected first line: ${JSON.stringify(first)}`);
    return {
        url: m[1],
        stop: () =>
            new Promise(resolve => {
                child.removeAllListeners('exit');
                child.once('exit', resolve);
                child.kill('SIGTERM');
            })
    };
}

/** One client: one keep-alive connection. */
export class Client {
    constructor(url) {
        this.url = new URL(url);
        this.agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
        this.nextId = 1;
    }

    /** POSTs `body` (an object) with `headers`; returns {status, headers, text}. */
    post(headers, body) {
        return this.request('POST', headers, Buffer.from(JSON.stringify(body)));
    }

    /** One request with an optional body (a Buffer); returns {status, headers, text}. */
    request(method, headers, payload = Buffer.alloc(0)) {
        return new Promise((resolve, reject) => {
            const req = http.request(
                {
                    agent: this.agent,
                    host: this.url.hostname,
                    port: this.url.port,
                    path: this.url.pathname,
                    method,
                    headers: { ...headers, 'Content-Length': payload.length }
                },
                res => {
                    const chunks = [];
                    res.on('data', c => chunks.push(c));
                    res.on('end', () =>
                        resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') })
                    );
                    res.on('error', reject);
                }
            );
            req.on('error', reject);
            req.end(payload);
        });
    }

    close() {
        this.agent.destroy();
    }
}

/** The JSON-RPC reply to `id` in a response body that is JSON or an SSE stream. */
export function replyOf(res, id) {
    const ct = res.headers['content-type'] ?? '';
    let messages;
    if (ct.startsWith('text/event-stream')) {
        messages = res.text
            .split(/\r?\n\r?\n/)
            .map(event =>
                event
                    .split(/\r?\n/)
                    .filter(l => l.startsWith('data:'))
                    .map(l => l.slice(5).replace(/^ /, ''))
                    .join('\n')
            )
            .filter(data => data.length > 0)
            .map(data => JSON.parse(data));
    } else if (res.text.length > 0) {
        messages = [JSON.parse(res.text)];
    } else {
        messages = [];
    }
    const reply = messages.find(m => m.id === id && ('result' in m || 'error' in m));
    if (!reply) throw new Error(`no reply to id ${id} (HTTP ${res.status}, ${ct}): ${res.text.slice(0, 300)}`);
    return reply;
}

/** Prints one exchange the way the README shows it. */
export function show(title, headers, body, res) {
    const lines = [`### ${title}`, '> POST /mcp'];
    for (const [k, v] of Object.entries(headers)) lines.push(`> ${k}: ${v}`);
    lines.push(`> ${JSON.stringify(body)}`);
    lines.push(`< HTTP ${res.status}`);
    for (const k of ['content-type', 'mcp-session-id']) if (res.headers[k]) lines.push(`< ${k}: ${res.headers[k]}`);
    for (const l of res.text.replace(/\n+$/, '').split('\n')) lines.push(`< ${l}`);
    console.log(lines.join('\n') + '\n');
}

/** Runs `fn(i)` n times, one after another; returns latency stats in ms. */
export async function timeLoop(n, fn) {
    const ms = [];
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) {
        const s = process.hrtime.bigint();
        await fn(i);
        ms.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
    const total = Number(process.hrtime.bigint() - t0) / 1e6;
    ms.sort((a, b) => a - b);
    const q = p => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))];
    return { n, mean: total / n, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: ms[ms.length - 1] };
}

export function fmt(name, s) {
    const f = x => x.toFixed(3).padStart(8);
    return `${name.padEnd(14)} n=${String(s.n).padEnd(5)} mean ${f(s.mean)} ms  p50 ${f(s.p50)}  p90 ${f(s.p90)}  p99 ${f(s.p99)}  max ${f(s.max)}`;
}

export function check(cond, message) {
    if (!cond) throw new Error(`check failed: ${message}`);
}
