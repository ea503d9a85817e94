import * as crypto from 'crypto';
import * as fs from 'fs';
import type { Writable } from 'stream';
import { pipeline } from 'stream/promises';
import { fetchFailed } from './errors';
import { get } from './proxy';
import { Logger } from '../shared/log';

export interface DownloadOptions {
  /**
   * The most one attempt may take in all: connecting (through a proxy too), the headers and
   * the whole body. A server that trickles a byte now and then never trips an idle timeout.
   */
  readonly timeoutMs: number;
  readonly retries: number;
  readonly maxSizeBytes: number;
  /** First backoff; doubles per attempt. */
  readonly backoffMs?: number;
}

/**
 * Something that reads the body as it arrives, beside the file (one per attempt: an attempt
 * that fails is abandoned with its reader). The body waits for it (back pressure), as for
 * the file.
 */
export interface BodyReader<T> {
  readonly input: Writable;
  readonly result: Promise<T>;
}

export interface Download<T = never> {
  readonly sha256: string;
  readonly bytes: number;
  readonly attempts: number;
  /** What the reader made of the body of the attempt that succeeded (exactly the bytes of the file). */
  readonly read?: Promise<T>;
}

class Permanent extends Error {}

/**
 * Downloads `url` into `file`, hashing as it streams. Retries network errors and 5xx with
 * exponential backoff; 4xx and oversized artifacts fail at once.
 */
export async function download<T = never>(url: string, file: string, options: DownloadOptions, log: Logger,
  reader?: () => BodyReader<T>): Promise<Download<T>> {
  const backoff = options.backoffMs ?? 1000;
  let lastError: Error | undefined;
  for (let attempt = 1; attempt <= options.retries + 1; attempt++) {
    try {
      const result = await downloadOnce(url, file, options, 0, reader);
      return { ...result, attempts: attempt };
    } catch (e) {
      lastError = e as Error;
      fs.rmSync(file, { force: true });
      if (e instanceof Permanent || attempt > options.retries) break;
      const wait = backoff * 2 ** (attempt - 1);
      log.warn('download failed, retrying', { url, attempt, error: lastError.message, retryInMs: wait });
      await new Promise(r => setTimeout(r, wait));
    }
  }
  const reason = lastError instanceof Permanent && /too large/.test(lastError.message) ? 'ArtifactTooLarge' : 'DownloadFailed';
  throw fetchFailed(reason, `downloading ${url} failed: ${lastError?.message}`);
}

type Attempt<T> = { sha256: string; bytes: number; read?: Promise<T> };

function downloadOnce<T>(url: string, file: string, options: DownloadOptions, redirects: number, reader: (() => BodyReader<T>) | undefined,
  deadline = Date.now() + options.timeoutMs): Promise<Attempt<T>> {
  return new Promise((resolveOnce, rejectOnce) => {
    let overall: NodeJS.Timeout | undefined;
    const resolve = (value: Attempt<T>) => { clearTimeout(overall); resolveOnce(value); };
    const reject = (error: Error) => { clearTimeout(overall); rejectOnce(error); };
    const remaining = Math.max(1, deadline - Date.now());
    const request = get(new URL(url), remaining, response => {
      const status = response.statusCode ?? 0;
      if (status >= 300 && status < 400 && response.headers.location) {
        response.resume();
        if (redirects >= 5) return reject(new Permanent('too many redirects'));
        const next = new URL(response.headers.location, url).toString();
        clearTimeout(overall); // the next hop keeps the same deadline
        return downloadOnce(next, file, options, redirects + 1, reader, deadline).then(resolve, reject);
      }
      if (status !== 200) {
        response.resume();
        const error = `HTTP ${status}`;
        return reject(status >= 400 && status < 500 && status !== 408 && status !== 429 ? new Permanent(error) : new Error(error));
      }
      const declared = Number(response.headers['content-length'] ?? 0);
      if (declared > options.maxSizeBytes) {
        response.destroy();
        return reject(new Permanent(`artifact too large: ${declared} bytes > limit ${options.maxSizeBytes}`));
      }
      const hash = crypto.createHash('sha256');
      const out = fs.createWriteStream(file, { mode: 0o600 });
      let bytes = 0;
      response.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (bytes > options.maxSizeBytes) {
          response.destroy(new Permanent(`artifact too large: more than ${options.maxSizeBytes} bytes`));
          return;
        }
        hash.update(chunk);
      });
      const body = reader?.();
      response.on('error', e => {
        out.destroy();
        body?.input.destroy();
        reject(e);
      });
      response.pipe(out);
      // A reader that stops early (it found what it looked for) is unpiped when it closes.
      if (body) response.pipe(body.input);
      out.on('finish', () => resolve({ sha256: hash.digest('hex'), bytes, read: body?.result }));
      out.on('error', reject);
    });
    // The whole attempt, not only silence, is bounded: destroying the request ends a
    // trickling body, a pending CONNECT through a proxy, or a server that never answers.
    overall = setTimeout(() => {
      const error = new Error(`timed out: the download did not finish within ${options.timeoutMs} ms`);
      reject(error); // first: a body already flowing may not report the destroy
      request.destroy(error);
    }, remaining);
    request.on('timeout', () => request.destroy(new Error(`timed out after ${options.timeoutMs} ms without data`)));
    request.on('error', reject);
  });
}

/**
 * Takes a local artifact (copied out of an image by an init container) into `file`, hashing
 * it as a download is: the same size limit and the same sha256 check follow.
 */
export async function takeLocal(source: string, file: string, maxSizeBytes: number): Promise<Download> {
  const stat = fs.statSync(source, { throwIfNoEntry: false });
  if (!stat) throw fetchFailed('DownloadFailed', `the artifact file ${source} is missing (was it copied out of the image?)`);
  if (!stat.isFile()) throw fetchFailed('UnsupportedArtifact', `the artifact ${source} is not a regular file`);
  if (stat.size > maxSizeBytes) throw fetchFailed('ArtifactTooLarge', `artifact too large: ${stat.size} bytes > limit ${maxSizeBytes}`);
  fs.copyFileSync(source, file);
  const hash = crypto.createHash('sha256');
  await pipeline(fs.createReadStream(file), hash);
  return { sha256: hash.digest('hex'), bytes: stat.size, attempts: 1 };
}
