import * as fs from 'fs';
import * as https from 'https';

/** A minimal API client for tests (the product's client is ESM, which jest cannot load). */
export class Rest {
  private readonly agent: https.Agent | false;

  /**
   * @param keepAlive reuse connections (a benchmark's stand-ins, which send thousands of
   *   requests as kubelets do over their one connection each; a TLS handshake per request
   *   would load the API server with work no real cluster has)
   */
  constructor(private readonly server: string, private readonly token: string, private readonly caFile: string, keepAlive = false) {
    this.agent = keepAlive ? new https.Agent({ keepAlive: true, maxSockets: 64, ca: fs.readFileSync(caFile) }) : false;
  }

  request(method: string, path: string, body?: unknown, contentType = 'application/json', accept = 'application/json'): Promise<any> {
    const url = new URL(path, this.server);
    return new Promise((resolve, reject) => {
      const req = https.request(url, {
        method,
        ca: fs.readFileSync(this.caFile),
        agent: this.agent,
        headers: { Authorization: `Bearer ${this.token}`, Accept: accept, ...(body ? { 'Content-Type': contentType } : {}) },
      }, res => {
        const chunks: Buffer[] = [];
        res.on('data', c => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          if ((res.statusCode ?? 0) >= 300) reject(Object.assign(new Error(`${method} ${path}: ${res.statusCode} ${text.slice(0, 300)}`), { code: res.statusCode }));
          else resolve(text ? JSON.parse(text) : undefined);
        });
      });
      req.on('error', reject);
      if (body) req.write(JSON.stringify(body));
      req.end();
    });
  }

  get(path: string): Promise<any> {
    return this.request('GET', path);
  }

  patch(path: string, body: unknown): Promise<any> {
    return this.request('PATCH', path, body, 'application/merge-patch+json');
  }

  /**
   * A JSON watch: `onEvent` for each event until the server ends it (resolves) or it fails
   * (rejects); `stop()` ends it early.
   */
  watch(path: string, onEvent: (event: { type: string; object: any }) => void, accept = 'application/json'): { done: Promise<void>; stop: () => void } {
    let req: ReturnType<typeof https.request> | undefined;
    let stopped = false;
    const done = new Promise<void>((resolve, reject) => {
      req = https.request(new URL(path, this.server), {
        ca: fs.readFileSync(this.caFile),
        agent: false,
        headers: { Authorization: `Bearer ${this.token}`, Accept: accept },
      }, res => {
        if ((res.statusCode ?? 0) >= 300) return reject(new Error(`WATCH ${path}: ${res.statusCode}`));
        let rest = '';
        res.on('data', (chunk: Buffer) => {
          const lines = (rest + chunk.toString('utf8')).split('\n');
          rest = lines.pop()!;
          for (const line of lines) if (line.trim()) onEvent(JSON.parse(line));
        });
        res.on('end', () => resolve());
        res.on('error', e => (stopped ? resolve() : reject(e)));
      });
      req.on('error', e => (stopped ? resolve() : reject(e)));
      req.end();
    });
    return { done, stop: () => { stopped = true; req?.destroy(); } };
  }
}

/**
 * Polls until `check` returns a truthy value (a check that throws is tried again); after the
 * timeout fails with the last error and `describe()`. Returns the value.
 */
export async function eventually<T>(check: () => Promise<T | undefined | false>, timeoutMs: number,
  describe: () => Promise<string> | string, intervalMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms${lastError ? ` (last error: ${String(lastError)})` : ''}\n${await describe()}`);
    await new Promise(r => setTimeout(r, intervalMs));
  }
}
