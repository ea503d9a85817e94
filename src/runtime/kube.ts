// A thin REST client over the API server: the few verbs the controller needs, with the
// credentials from @kubernetes/client-node's KubeConfig (in-cluster or a kubeconfig file).
import * as https from 'https';
import { KubeConfig } from '@kubernetes/client-node';

export class ApiError extends Error {
  constructor(readonly code: number, readonly body: string, method: string, path: string) {
    super(`${method} ${path}: HTTP ${code}: ${body.slice(0, 300)}`);
  }
}

export const MERGE_PATCH = 'application/merge-patch+json';
export const APPLY_PATCH = 'application/apply-patch+yaml';

/**
 * Client-side rate limit, as client-go's: a token bucket of `burst` tokens refilled at `qps`
 * per second; a request waits for a token. A controller must not flood the API server during
 * a rollout over thousands of nodes (API Priority and Fairness would throttle everyone else).
 */
export class TokenBucket {
  private tokens: number;
  private last = Date.now();
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly qps: number, private readonly burst: number) {
    this.tokens = burst;
  }

  take(): Promise<void> {
    // Callers are served in order: each waits for the one before it.
    const turn = this.queue.then(async () => {
      const now = Date.now();
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.qps);
      this.last = now;
      if (this.tokens < 1) {
        await new Promise(r => setTimeout(r, ((1 - this.tokens) / this.qps) * 1000));
        this.tokens = 1;
        this.last = Date.now();
      }
      this.tokens -= 1;
    });
    this.queue = turn;
    return turn;
  }
}

export interface WatchEvent {
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  readonly object: any;
}

export class Kube {
  private readonly server: URL;
  /**
   * Connections are reused: a TLS handshake (and a new secure context) per request would
   * dominate the controller's CPU. The agent holds the TLS material; headers (the token,
   * which may rotate) are applied per request.
   */
  private agent?: https.Agent;

  /**
   * @param onWrite called for every write (metrics count them)
   * @param limiter the client-side rate limit of every request but watches
   */
  constructor(readonly config: KubeConfig, private readonly onWrite: (verb: string) => void = () => undefined,
    private readonly limiter?: TokenBucket) {
    const cluster = config.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
  }

  private async options(method: string, path: string, headers: Record<string, string | number>, timeout: number): Promise<https.RequestOptions> {
    const options: https.RequestOptions = { method, hostname: this.server.hostname, port: this.server.port || 443, path, headers, timeout };
    await this.config.applyToHTTPSOptions(options);
    const tls = options as https.RequestOptions & { ca?: any; cert?: any; key?: any };
    this.agent ??= new https.Agent({
      keepAlive: true, maxSockets: 32, ca: tls.ca, cert: tls.cert, key: tls.key, rejectUnauthorized: tls.rejectUnauthorized,
    });
    delete tls.ca;
    delete tls.cert;
    delete tls.key;
    options.agent = this.agent;
    return options;
  }

  async request<T = any>(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    await this.limiter?.take();
    // An explicit length: a chunked DELETE body is refused by the API server.
    const headers = { Accept: 'application/json', ...(payload ? { 'Content-Type': contentType, 'Content-Length': payload.length } : {}) };
    const options = await this.options(method, path, headers, 30_000);
    if (method !== 'GET') this.onWrite(method);
    return new Promise<T>((resolve, reject) => {
      const req = https.request(options, res => {
        const chunks: Buffer[] = [];
        res.on('data', c => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if ((res.statusCode ?? 0) >= 300) return reject(new ApiError(res.statusCode ?? 0, text, method, path));
          // Only reads are parsed: no caller uses what a write returns (a patched Node is
          // 14 KB of JSON, thousands of times in a rollout).
          resolve(method === 'GET' && text ? JSON.parse(text) : undefined);
        });
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  /**
   * A watch: `onEvent` gets each event as it arrives (one JSON object per line). `done`
   * resolves when the server ends the watch and rejects on an HTTP error (an ApiError) or
   * when `onEvent` throws.
   */
  watch(path: string, onEvent: (event: WatchEvent) => void): { done: Promise<void>; abort: () => void } {
    let req: ReturnType<typeof https.request> | undefined;
    let aborted = false;
    const done = (async () => {
      await this.limiter?.take();
      // No idle timeout: a quiet watch is healthy; the server ends it after timeoutSeconds.
      const options = await this.options('GET', path, { Accept: 'application/json' }, 0);
      await new Promise<void>((resolve, reject) => {
        if (aborted) return resolve();
        req = https.request(options, res => {
          if ((res.statusCode ?? 0) >= 300) {
            const chunks: Buffer[] = [];
            res.on('data', c => chunks.push(c));
            res.on('end', () => reject(new ApiError(res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'), 'WATCH', path)));
            return;
          }
          let buffered = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            buffered += chunk;
            let newline: number;
            while ((newline = buffered.indexOf('\n')) >= 0) {
              const line = buffered.slice(0, newline);
              buffered = buffered.slice(newline + 1);
              if (!line.trim()) continue;
              try {
                onEvent(JSON.parse(line));
              } catch (e) {
                req?.destroy();
                reject(e);
                return;
              }
            }
          });
          res.on('end', () => resolve());
          res.on('error', e => (aborted ? resolve() : reject(e)));
        });
        req.on('error', e => (aborted ? resolve() : reject(e)));
        req.end();
      });
    })();
    return { done, abort: () => { aborted = true; req?.destroy(); } };
  }

  get<T = any>(path: string): Promise<T> {
    return this.request('GET', path);
  }

  create<T = any>(path: string, body: unknown): Promise<T> {
    return this.request('POST', path, body);
  }

  mergePatch<T = any>(path: string, patch: unknown): Promise<T> {
    return this.request('PATCH', path, patch, MERGE_PATCH);
  }

  /** Server-side apply with the controller's one field manager. */
  apply<T = any>(path: string, object: unknown, fieldManager: string): Promise<T> {
    return this.request('PATCH', `${path}?fieldManager=${encodeURIComponent(fieldManager)}&force=true`, object, APPLY_PATCH);
  }

  delete(path: string, body?: unknown): Promise<unknown> {
    return this.request('DELETE', path, body);
  }
}

export function isNotFound(e: unknown): boolean {
  return e instanceof ApiError && e.code === 404;
}

export function isConflictOrExists(e: unknown): boolean {
  return e instanceof ApiError && e.code === 409;
}

/**
 * Waits for a request whose object may be gone already, which is as good as done: true when
 * the request did it, false when the object was gone.
 */
export async function unlessNotFound(request: Promise<unknown>): Promise<boolean> {
  try {
    await request;
    return true;
  } catch (e) {
    if (!isNotFound(e)) throw e;
    return false;
  }
}
