import { spawn } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as path from 'path';
import { buildSync } from 'esbuild';
import * as tar from 'tar';

// The node installer as users run it: the esbuild bundle of src/installer/main.ts, run by
// node in a child process, with artifacts served over HTTP on 127.0.0.1.

/** Where buildInstaller(dir) writes the bundle. */
export function bundlePath(dir: string): string {
  return path.join(dir, 'rcm-node-installer.js');
}

/** Bundles the installer into `dir`; returns the bundle's path. */
export function buildInstaller(dir: string): string {
  const out = bundlePath(dir);
  buildSync({ entryPoints: [path.join(__dirname, '..', '..', 'src', 'installer', 'main.ts')], bundle: true, platform: 'node', target: 'node20', outfile: out, logLevel: 'error' });
  return out;
}

export interface InstallerRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** The JSON result file, when the installer wrote one. */
  readonly result: any;
  readonly ms: number;
}

/** Runs `node bundle command args...` with only PATH (and `env`) in its environment. */
export function runBundle(bundle: string, command: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<InstallerRun> {
  const resultFile = path.join(path.dirname(bundle), `result-${crypto.randomBytes(4).toString('hex')}.json`);
  const started = Date.now();
  return new Promise(resolve => {
    const child = spawn(process.execPath, [bundle, command, `--result-file=${resultFile}`, ...args], { env: { PATH: process.env.PATH, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', d => { stdout += d; });
    child.stderr.on('data', d => { stderr += d; });
    child.on('exit', code => {
      const result = fs.existsSync(resultFile) ? JSON.parse(fs.readFileSync(resultFile, 'utf8')) : undefined;
      fs.rmSync(resultFile, { force: true });
      resolve({ code: code ?? -1, stdout, stderr, result, ms: Date.now() - started });
    });
  });
}

export function sha256(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

/** A .tar.gz holding `files` (name in the archive -> bytes). */
export async function tarGz(dir: string, files: Record<string, Buffer>): Promise<Buffer> {
  const src = fs.mkdtempSync(path.join(dir, 'tar-'));
  for (const [name, data] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(src, name)), { recursive: true });
    fs.writeFileSync(path.join(src, name), data, { mode: 0o755 });
  }
  const out = `${src}.tgz`;
  await tar.c({ gzip: true, file: out, cwd: src, portable: true }, fs.readdirSync(src));
  fs.rmSync(src, { recursive: true, force: true });
  return fs.readFileSync(out);
}

export interface ArtifactServer {
  /** http://127.0.0.1:PORT */
  readonly base: string;
  /** Serves `data` at /name. */
  put(name: string, data: Buffer): string;
  /** Answers /name with a custom handler (slow servers and the like). */
  handle(name: string, handler: http.RequestListener): string;
  close(): Promise<void>;
}

export async function startArtifactServer(): Promise<ArtifactServer> {
  const handlers = new Map<string, http.RequestListener>();
  const server = http.createServer((req, res) => {
    const handler = handlers.get((req.url ?? '/').slice(1));
    if (handler) return handler(req, res);
    res.writeHead(404).end('not found');
  });
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as any).port}`;
  return {
    base,
    put: (name, data) => {
      handlers.set(name, (_req, res) => res.writeHead(200, { 'content-length': data.length }).end(data));
      return `${base}/${name}`;
    },
    handle: (name, handler) => {
      handlers.set(name, handler);
      return `${base}/${name}`;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise(r => server.close(r));
    },
  };
}

/** The test shim (see shimBinary) as a tarball served by `server`: where most installer tests start. */
export async function publishShim(server: ArtifactServer, dir: string): Promise<{ url: string; sha256: string }> {
  const tgz = await tarGz(dir, { 'containerd-shim-rcmtest-v2': shimBinary() });
  return { url: server.put('shim.tgz', tgz), sha256: sha256(tgz) };
}

/** Two versions of the test shim (the second one byte longer), served by `server` as v1.tgz and v2.tgz. */
export async function publishShimVersions(server: ArtifactServer, dir: string): Promise<{ v1: string; v2: string }> {
  return {
    v1: server.put('v1.tgz', await tarGz(dir, { 'containerd-shim-rcmtest-v2': shimBinary() })),
    v2: server.put('v2.tgz', await tarGz(dir, { 'containerd-shim-rcmtest-v2': Buffer.concat([shimBinary(), Buffer.from([0])]) })),
  };
}

/** A real shim: containerd's runc shim under the name containerd-shim-NAME-v2. */
export function shimBinary(): Buffer {
  return fs.readFileSync('/usr/bin/containerd-shim-runc-v2');
}
