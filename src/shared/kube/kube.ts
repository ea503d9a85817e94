// A thin REST client over the API server: the few verbs the controller needs, with the
// credentials of kube-config.ts (in-cluster or a kubeconfig file).
import * as https from 'https';
import * as tls from 'tls';
import { ClusterAccess } from './kube-config';
import { Fields, unwrap } from './protobuf';

export class ApiError extends Error {
  constructor(readonly code: number, readonly body: string, method: string, path: string) {
    super(`${method} ${path}: HTTP ${code}: ${body.slice(0, 300)}`);
  }
}

export const MERGE_PATCH = 'application/merge-patch+json';
export const APPLY_PATCH = 'application/apply-patch+yaml';
/** The API server's protobuf encoding, which built-in kinds (not custom resources) support. */
export const PROTOBUF = 'application/vnd.kubernetes.protobuf';
/**
 * An object's metadata only (PartialObjectMetadata, GA since Kubernetes 1.15), as protobuf:
 * what a reader that needs no spec nor status asks, so that the API server sends neither.
 */
export const PROTOBUF_METADATA = `${PROTOBUF};as=PartialObjectMetadata;g=meta.k8s.io;v=v1`;
/** The same for a list (the API server names the list kind apart). */
export const PROTOBUF_METADATA_LIST = `${PROTOBUF};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`;
/**
 * What a write asks back: only the object's metadata, else the whole object. No caller reads
 * what a write returns, and a patched realistic Node is 14 KB of JSON (2.6 KB as metadata),
 * received, decrypted and encoded by the API server thousands of times in a rollout. Errors
 * still come as a JSON Status (the server does not convert those).
 */
export const WRITE_ACCEPT = 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json';
/**
 * The same for a write whose answer is a list (a collection DELETE): the API server refuses
 * PartialObjectMetadata for a list with 406, whatever else the Accept header offers.
 */
export const LIST_WRITE_ACCEPT = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json';

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

/**
 * Splits a stream of newline-terminated lines. Each chunk is scanned once and kept as it came
 * until its line ends: appending chunks to one string and searching it from the start again
 * costs time in proportion to the square of a line's length (a Node event is some 15 KB, sent
 * in many TLS records).
 */
export class LineSplitter {
  private parts: Buffer[] = [];

  /** The lines this chunk completes (blank ones skipped). */
  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    let newline: number;
    while ((newline = chunk.indexOf(10, start)) >= 0) {
      const tail = chunk.subarray(start, newline);
      const line = this.parts.length === 0 ? tail.toString('utf8') : Buffer.concat([...this.parts, tail]).toString('utf8');
      this.parts = [];
      if (line.trim()) lines.push(line);
      start = newline + 1;
    }
    if (start < chunk.length) this.parts.push(chunk.subarray(start));
    return lines;
  }
}

/**
 * Splits a protobuf watch stream into its frames: each is a 4-byte big-endian length and
 * that many bytes (a metav1.WatchEvent).
 */
export class FrameSplitter {
  private parts: Buffer[] = [];
  private size = 0;

  push(chunk: Buffer): Buffer[] {
    this.parts.push(chunk);
    this.size += chunk.length;
    const frames: Buffer[] = [];
    // Chunks are joined only once a whole frame has arrived (a Node's frame spans many).
    while (this.size >= 4) {
      if (this.parts[0].length < 4) this.parts = [Buffer.concat(this.parts)];
      const length = this.parts[0].readUInt32BE(0);
      if (this.size < 4 + length) break;
      const all = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts);
      frames.push(all.subarray(4, 4 + length));
      const rest = all.subarray(4 + length);
      this.parts = rest.length > 0 ? [rest] : [];
      this.size = rest.length;
    }
    return frames;
  }
}

/**
 * The TLS context of every connection, made once. Given as `ca`, `cert` and `key` instead,
 * the PEM texts would be part of the agent's name for each request: https.Agent decodes and
 * joins them into that name about three times a request (a rollout makes tens of thousands),
 * and makes a context per new connection.
 */
function secureContextOf(access: ClusterAccess): tls.SecureContext {
  try {
    return tls.createSecureContext({ ca: access.ca, cert: access.cert, key: access.key });
  } catch (e) {
    throw new Error(`the API server's CA or the client certificate and key cannot be used: ${(e as Error).message}`);
  }
}

/**
 * An agent for one API server, with one TLS context for all its connections: any request may
 * take any of them. https.Agent names each request's pool of connections from its host, port
 * and two dozen TLS options, a string made anew for every request (some 2 KB of garbage each,
 * a rollout makes tens of thousands); here a request's pool (and TLS session) is named by its
 * host and port alone: the TLS options live on the agent, the same for every request.
 */
class OneServerAgent extends https.Agent {
  override getName(options: { host?: string | null; port?: number | string | null } = {}): string {
    return `${options.host}:${options.port}`;
  }
}

export class Kube {
  /**
   * Connections are reused: a TLS handshake (and a new secure context) per request would
   * dominate the controller's CPU. The agent holds the TLS material; the Authorization header
   * (a token that may rotate) is set per request.
   */
  private readonly agent: https.Agent;
  /** The API server's host name or address (an IPv6 one without its brackets). */
  private readonly hostname: string;

  /**
   * @param onWrite called for every write (metrics count them)
   * @param limiter the client-side rate limit of every request but watches
   */
  constructor(private readonly access: ClusterAccess, private readonly onWrite: (verb: string) => void = () => undefined,
    private readonly limiter?: TokenBucket) {
    this.hostname = access.server.hostname.replace(/^\[(.*)\]$/, '$1');
    this.agent = new OneServerAgent({
      keepAlive: true,
      maxSockets: 32,
      secureContext: secureContextOf(access),
      rejectUnauthorized: !access.insecure,
      ...(access.serverName ? { servername: access.serverName } : {}),
    });
  }

  private options(method: string, path: string, headers: Record<string, string | number>, timeout: number): https.RequestOptions {
    const authorization = this.access.authorization();
    return {
      method,
      hostname: this.hostname,
      port: this.access.server.port || 443,
      path,
      timeout,
      agent: this.agent,
      headers: authorization ? { ...headers, Authorization: authorization } : headers,
    };
  }

  /** `keepAnswer`: a write resolves to what it returned, as text (else to undefined, the answer unread). */
  async request<T = any>(method: string, path: string, body?: unknown, contentType = 'application/json', writeAccept = WRITE_ACCEPT, keepAnswer = false): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    await this.limiter?.take();
    // An explicit length: a chunked DELETE body is refused by the API server.
    const read = method === 'GET';
    const headers = { Accept: read ? 'application/json' : writeAccept, ...(payload ? { 'Content-Type': contentType, 'Content-Length': payload.length } : {}) };
    const options = this.options(method, path, headers, 30_000);
    if (!read) this.onWrite(method);
    return new Promise<T>((resolve, reject) => {
      const req = https.request(options, res => {
        const failed = (res.statusCode ?? 0) >= 300;
        // Only reads and errors are kept: what a write returns is drained unread.
        const chunks: Buffer[] = [];
        res.on('data', c => { if (read || failed || keepAnswer) chunks.push(c); });
        res.on('end', () => {
          const answer = chunks.length === 0 ? '' : Buffer.concat(chunks).toString('utf8');
          if (failed) return reject(new ApiError(res.statusCode ?? 0, answer, method, path));
          resolve(read && answer ? JSON.parse(answer) : keepAnswer ? answer as T : undefined as T);
        });
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  /**
   * A JSON watch: `onEvent` gets each event as it arrives (one JSON object per line) with the
   * length of its line (metrics count what each watch costs to parse). `done` resolves when
   * the server ends the watch and rejects on an HTTP error (an ApiError) or when `onEvent`
   * throws.
   */
  watch(path: string, onEvent: (event: WatchEvent, bytes: number) => void): { done: Promise<void>; abort: () => void } {
    const lines = new LineSplitter();
    return this.stream(path, 'application/json', chunk => {
      for (const line of lines.push(chunk)) onEvent(JSON.parse(line), line.length);
    });
  }

  /**
   * A protobuf watch (built-in kinds only): `onEvent` gets each event's type and its object,
   * still encoded (the `k8s` envelope included), with the frame's length. `accept`:
   * PROTOBUF_METADATA for the objects' metadata only.
   */
  watchProtobuf(path: string, onEvent: (type: WatchEvent['type'], object: Buffer, bytes: number) => void,
    accept = PROTOBUF): { done: Promise<void>; abort: () => void } {
    const frames = new FrameSplitter();
    return this.stream(path, accept, chunk => {
      for (const frame of frames.push(chunk)) {
        // metav1.WatchEvent: type = 1, object = 2 (a RawExtension: raw = 1).
        let type = '';
        let object: Buffer = Buffer.alloc(0);
        const f = new Fields(frame);
        while (f.next()) {
          if (f.no === 1) {
            type = f.text();
          } else if (f.no === 2) {
            const raw = f.nested();
            while (raw.next()) if (raw.no === 1) object = raw.bytes();
          }
        }
        onEvent(type as WatchEvent['type'], object, frame.length);
      }
    });
  }

  /** A GET of a built-in kind as protobuf: the object inside the envelope (`accept`: PROTOBUF_METADATA(_LIST) for metadata only). */
  async getProtobuf(path: string, accept = PROTOBUF): Promise<Buffer> {
    await this.limiter?.take();
    const options = this.options('GET', path, { Accept: accept }, 30_000);
    const body = await new Promise<Buffer>((resolve, reject) => {
      const req = https.request(options, res => {
        const chunks: Buffer[] = [];
        res.on('data', c => chunks.push(c));
        res.on('end', () => {
          const all = Buffer.concat(chunks);
          if ((res.statusCode ?? 0) >= 300) reject(new ApiError(res.statusCode ?? 0, all.toString('utf8'), 'GET', path));
          else resolve(all);
        });
      });
      req.on('timeout', () => req.destroy(new Error(`GET ${path}: timed out`)));
      req.on('error', reject);
      req.end();
    });
    return unwrap(body);
  }

  /** A long-running GET whose body is handed over chunk by chunk; `onChunk` may throw to end it. */
  private stream(path: string, accept: string, onChunk: (chunk: Buffer) => void): { done: Promise<void>; abort: () => void } {
    let req: ReturnType<typeof https.request> | undefined;
    let aborted = false;
    const done = (async () => {
      await this.limiter?.take();
      // No idle timeout: a quiet watch is healthy; the server ends it after timeoutSeconds.
      const options = this.options('GET', path, { Accept: accept }, 0);
      await new Promise<void>((resolve, reject) => {
        if (aborted) return resolve();
        req = https.request(options, res => {
          if ((res.statusCode ?? 0) >= 300) {
            const chunks: Buffer[] = [];
            res.on('data', c => chunks.push(c));
            res.on('end', () => reject(new ApiError(res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'), 'WATCH', path)));
            return;
          }
          res.on('data', (chunk: Buffer) => {
            try {
              onChunk(chunk);
            } catch (e) {
              req?.destroy();
              reject(e);
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

  /**
   * A merge patch that tells the object's resourceVersion after it: a cache that must know
   * when its watch shows this write compares the versions of the events it gets.
   */
  async mergePatchVersion(path: string, patch: unknown): Promise<string | undefined> {
    const answer = await this.request<string>('PATCH', path, patch, MERGE_PATCH, WRITE_ACCEPT, true);
    // The object's own metadata comes first in what a write returns (its metadata only, as asked).
    return /"resourceVersion":"([^"]*)"/.exec(answer)?.[1];
  }

  /** Server-side apply with the controller's one field manager. */
  apply<T = any>(path: string, object: unknown, fieldManager: string): Promise<T> {
    return this.request('PATCH', `${path}?fieldManager=${encodeURIComponent(fieldManager)}&force=true`, object, APPLY_PATCH);
  }

  delete(path: string, body?: unknown): Promise<unknown> {
    return this.request('DELETE', path, body);
  }

  /** A DELETE of a collection (a selector picks what goes): its answer is a list. */
  deleteCollection(path: string, body?: unknown): Promise<unknown> {
    return this.request('DELETE', path, body, 'application/json', LIST_WRITE_ACCEPT);
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
