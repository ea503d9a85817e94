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

export class Kube {
  private readonly server: URL;
  /**
   * Connections are reused: a TLS handshake (and a new secure context) per request would
   * dominate the controller's CPU. The agent holds the TLS material; headers (the token,
   * which may rotate) are applied per request.
   */
  private agent?: https.Agent;

  /** @param onWrite called for every write (metrics count them) */
  constructor(readonly config: KubeConfig, private readonly onWrite: (verb: string) => void = () => undefined) {
    const cluster = config.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
  }

  async request<T = any>(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const options: https.RequestOptions = {
      method,
      hostname: this.server.hostname,
      port: this.server.port || 443,
      path,
      // An explicit length: a chunked DELETE body is refused by the API server.
      headers: { Accept: 'application/json', ...(payload ? { 'Content-Type': contentType, 'Content-Length': payload.length } : {}) },
      timeout: 30_000,
    };
    await this.config.applyToHTTPSOptions(options);
    const tls = options as https.RequestOptions & { ca?: any; cert?: any; key?: any };
    this.agent ??= new https.Agent({
      keepAlive: true, maxSockets: 32, ca: tls.ca, cert: tls.cert, key: tls.key, rejectUnauthorized: tls.rejectUnauthorized,
    });
    delete tls.ca;
    delete tls.cert;
    delete tls.key;
    options.agent = this.agent;
    if (method !== 'GET') this.onWrite(method);
    return new Promise<T>((resolve, reject) => {
      const req = https.request(options, res => {
        const chunks: Buffer[] = [];
        res.on('data', c => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if ((res.statusCode ?? 0) >= 300) return reject(new ApiError(res.statusCode ?? 0, text, method, path));
          resolve(text ? JSON.parse(text) : undefined);
        });
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
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
