import * as fs from 'fs';
import * as https from 'https';

/** A minimal API client for tests (the product's client is ESM, which jest cannot load). */
export class Rest {
  constructor(private readonly server: string, private readonly token: string, private readonly caFile: string) {}

  request(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<any> {
    const url = new URL(path, this.server);
    return new Promise((resolve, reject) => {
      const req = https.request(url, {
        method,
        ca: fs.readFileSync(this.caFile),
        agent: false,
        headers: { Authorization: `Bearer ${this.token}`, Accept: 'application/json', ...(body ? { 'Content-Type': contentType } : {}) },
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
}

/** Polls until `check` returns a truthy value; fails with `describe()` after the timeout. */
export async function eventually<T>(check: () => Promise<T | undefined | false>, timeoutMs: number,
  describe: () => Promise<string> | string): Promise<T> {
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
    await new Promise(r => setTimeout(r, 250));
  }
}
