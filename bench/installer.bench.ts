// Benchmark (not a test): install wall time of rcm-node-installer, split into its phases,
// beside a bare baseline measured in the same run on the same containerd: curl + sha256sum +
// tar + restart, done by shell one-liners. With RCM_BENCH_BEFORE=<git revision>, the
// installer of that revision installs in the same rounds too. The installers run on the
// Node.js of the images (24, cached by scripts/provision.sh), or on RCM_BENCH_NODE, and, as in
// the installer image, this revision's from a compile cache made by one run of `--help`
// (RCM_BENCH_COMPILE_CACHE=0: without; the revision before had none in its image).
//
//   npx ts-node --transpile-only -P tsconfig.json bench/installer.bench.ts [rounds]
//   e.g. RCM_BENCH_BEFORE=9f246cb ... bench/installer.bench.ts 7
//
// Then payloads (RCM_BENCH_PAYLOAD_ROUNDS rounds, 3 by default; 0 skips them): the crun +
// WasmEdge payload of the end-to-end suite (187 MB unpacked, provisioned by
// scripts/provision.sh) and a small one (runc's shim alone, 12 MB), each installed as a payload
// beside a shell baseline doing the same download (curl), checksum (sha256sum), unpack
// (tar -xzf) and restart: wall time, peak RSS (the installer's own process, from a preload
// that reads getrusage at exit; the baseline's largest process: curl, sha256sum, tar, gzip)
// and bytes written to storage (/proc's write_bytes, with what each ran); and a larger one (the
// same plus two more copies of its largest library, 446 MB) to see whether the RSS keeps growing.
import { execFile, exec, execFileSync, spawn } from 'child_process';
import { promisify } from 'util';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import { buildSync } from 'esbuild';
import * as tar from 'tar';
import { ContainerdDaemon, startContainerd } from '../test/support/containerd-daemon';
import { NODE_24 } from '../test/support/tools';
import { buildWasmPayload, WASM_RUNTIME_DIR } from '../test/support/wasm';

const rounds = Number(process.argv[2] ?? 5);
const BEFORE = process.env.RCM_BENCH_BEFORE;
/** The installer runs on the images' Node.js (24), not on whatever runs this script. */
const NODE = process.env.RCM_BENCH_NODE ?? (fs.existsSync(NODE_24) ? NODE_24 : process.execPath);
const COMPILE_CACHE = process.env.RCM_BENCH_COMPILE_CACHE !== '0';
const PAYLOAD_ROUNDS = Number(process.env.RCM_BENCH_PAYLOAD_ROUNDS ?? 3);

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

// Asynchronous on purpose: the artifact server runs in this process.
const run = promisify(execFile);
const sh = (command: string) => promisify(exec)(command, { shell: '/bin/bash' });

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/** The installer bundle of `root`, built as `npx projen bundle:programs` builds the shipped one. */
function bundle(root: string, out: string): string {
  buildSync({
    entryPoints: [path.join(root, 'src/installer/main.ts')], bundle: true, platform: 'node', target: 'node20', format: 'cjs',
    sourcemap: 'inline', banner: { js: '#!/usr/bin/env node' }, outfile: out, logLevel: 'error',
  });
  return out;
}

/** The installer of an earlier revision, bundled the same way. */
function bundleAt(revision: string, work: string): string {
  const tree = path.join(work, `tree-${revision}`);
  fs.mkdirSync(tree);
  execFileSync('bash', ['-c', `git archive ${revision} src | tar -x -C ${tree}`]);
  fs.symlinkSync(path.resolve('node_modules'), path.join(tree, 'node_modules'));
  return bundle(tree, path.join(work, `rcm-node-installer-${revision}.js`));
}

/** One install's figures: the wall time seen from outside and the phases the installer reports (ms). */
type Figures = Record<string, number>;

/**
 * The phases of one install. The download starts beside the version query (detect), so the
 * fetch counts once, as the longer of the two; `other` is what the process spends outside
 * the named phases (writing and fsyncing the binary, the journal, the backup, the config
 * and the state, re-hashing the installed binary); `exit` is from the installer's end to
 * the process's exit as the caller sees it.
 */
function phases(wall: number, t: Record<string, number>): Figures {
  const fetch = Math.max(t.detectMs ?? 0, (t.downloadMs ?? 0) + (t.verifyMs ?? 0));
  const named = fetch + (t.lockWaitMs ?? 0) + (t.configMs ?? 0) + (t.preflightMs ?? 0) + (t.restartMs ?? 0);
  return {
    startup: t.startupMs ?? NaN,
    detect: t.detectMs ?? NaN,
    download: t.downloadMs,
    verify: t.verifyMs,
    lock: t.lockWaitMs ?? NaN,
    config: t.configMs,
    preflight: t.preflightMs ?? NaN,
    other: t.totalMs - named,
    restartCommand: t.restartCommandMs ?? NaN,
    untilServing: t.healthMs ?? NaN,
    restart: t.restartMs,
    exit: t.startupMs !== undefined ? wall - t.startupMs - t.totalMs : NaN,
    total: wall,
  };
}

async function main(): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-bench-'));
  fs.mkdirSync(path.join(work, 'lib'));
  const installer = bundle('.', path.join(work, 'lib', 'rcm-node-installer.js'));
  // As images/Dockerfile makes it: beside the bundle, by one run of --help.
  const cacheEnv = { NODE_COMPILE_CACHE: path.join(work, 'lib', 'compile-cache'), NODE_COMPILE_CACHE_PORTABLE: '1' };
  if (COMPILE_CACHE) execFileSync(NODE, [installer, '--help'], { stdio: 'ignore', env: { ...process.env, ...cacheEnv } });
  const before = BEFORE ? bundleAt(BEFORE, work) : undefined;
  fs.mkdirSync(path.join(work, 'shim'));
  fs.copyFileSync('/usr/bin/containerd-shim-runc-v2', path.join(work, 'shim', 'containerd-shim-bench-v2'));
  await tar.c({ gzip: true, file: path.join(work, 'shim.tgz'), cwd: path.join(work, 'shim') }, ['containerd-shim-bench-v2']);
  const artifact = fs.readFileSync(path.join(work, 'shim.tgz'));
  const sha256 = crypto.createHash('sha256').update(artifact).digest('hex');
  // shim.tgz, and the payloads' archives once they are made (served from their files).
  const served = new Map<string, string>();
  const server = http.createServer((req, res) => {
    const file = served.get(path.basename(req.url ?? ''));
    if (file === undefined) return void res.writeHead(200, { 'content-length': artifact.length }).end(artifact);
    res.writeHead(200, { 'content-length': fs.statSync(file).size });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as any).port}/shim.tgz`;
  const daemon = await startContainerd();
  // ctr waits for the socket to appear by itself: the loop only retries a refused connection.
  const waitReady = `until ctr --address ${daemon.socket} version >/dev/null 2>&1; do sleep 0.1; done`;

  let payloadReport: string[] = [];
  const rcm: Figures[] = [];
  const old: Figures[] = [];
  const base: Figures[] = [];
  const resultFile = path.join(work, 'result.json');
  const args = ['--host-root=/', `--install-root=${path.join(daemon.dir, 'opt', 'rcm')}`, `--config=${daemon.config}`,
    `--socket=${daemon.socket}`, '--distro=containerd', '--restart=command', `--restart-command=${daemon.restartCommand}`,
    '--handler=bench', `--result-file=${resultFile}`];
  // The node agent's way: one process for every install (started once, before the rounds),
  // with the flag the agent adds (it gathers a node's requests itself, before the installs).
  const agentBundle = path.join(work, 'lib', 'in-process-installer.js');
  buildSync({ entryPoints: ['bench/in-process-installer.ts'], bundle: true, platform: 'node', target: 'node20', format: 'cjs', outfile: agentBundle, logLevel: 'error' });
  const agentProcess = spawn(NODE, [agentBundle], { stdio: ['pipe', 'pipe', 'ignore'] });
  const answers: ((line: string) => void)[] = [];
  let buffered = '';
  agentProcess.stdout!.on('data', d => {
    buffered += d;
    for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
      answers.shift()?.(buffered.slice(0, i));
      buffered = buffered.slice(i + 1);
    }
  });
  const inProcess = (argv: string[]) => new Promise<{ ms: number; result: any }>(resolve => {
    answers.push(line => resolve(JSON.parse(line)));
    agentProcess.stdin!.write(JSON.stringify(argv) + '\n');
  });
  const agentRuns: Figures[] = [];
  const installInProcess = async (): Promise<Figures> => {
    const { ms, result } = await inProcess(['install', `--location=${url}`, `--sha256=${sha256}`, ...args, '--set-gather=0']);
    if (result.outcome !== 'installed') throw new Error(`in-process install: ${result.outcome}: ${result.message}`);
    await inProcess(['uninstall', ...args, '--set-gather=0']);
    return { total: ms };
  };
  const install = async (bundleFile: string): Promise<Figures> => {
    const env = { ...process.env, ...(COMPILE_CACHE && bundleFile === installer ? cacheEnv : {}) };
    const wall = await timed(() => run(NODE, [bundleFile, 'install', `--location=${url}`, `--sha256=${sha256}`, ...args], { env }));
    const figures = phases(wall, JSON.parse(fs.readFileSync(resultFile, 'utf8')).timings);
    await run(NODE, [bundleFile, 'uninstall', ...args], { env });
    return figures;
  };
  try {
    for (let i = 0; i < rounds; i++) {
      rcm.push(await install(installer));
      if (before) old.push(await install(before));
      agentRuns.push(await installInProcess());

      const dir = path.join(work, `baseline-${i}`);
      fs.mkdirSync(dir);
      const download = await timed(() => sh(`curl -sf ${url} -o ${dir}/shim.tgz`));
      const verify = await timed(() => sh(`echo "${sha256}  ${dir}/shim.tgz" | sha256sum -c - >/dev/null && tar -xzf ${dir}/shim.tgz -C ${dir}`));
      const restartCommand = await timed(() => sh(daemon.restartCommand));
      const untilServing = await timed(() => sh(waitReady));
      const restart = restartCommand + untilServing;
      base.push({ download, verify, restartCommand, untilServing, restart, total: download + verify + restart });
    }
    if (PAYLOAD_ROUNDS > 0) payloadReport = await payloads({ work, installer, cacheEnv, daemon, served, base: url.replace(/\/shim\.tgz$/, '') });
  } finally {
    agentProcess.kill();
    server.close();
    await daemon.stop();
    fs.rmSync(work, { recursive: true, force: true });
  }

  const rows: Array<[string, string]> = [
    ['startup', 'Node.js start-up, bundle load, flags'],
    ['detect', 'containerd --version (beside the download)'],
    ['download', 'rcm: with the archive check and the shim\'s hash as the body arrives'],
    ['verify', 'rcm: sha256 compared, what is left of the check; baseline: sha256sum, tar -x'],
    ['lock', 'waiting for the host lock'],
    ['config', 'computing the edit'],
    ['preflight', 'containerd config dump of the candidate'],
    ['other', 'writes, fsyncs, journal, state, hash re-check'],
    ['restartCommand', 'the restart command'],
    ['untilServing', 'until the health check passes'],
    ['restart', 'restart command + health check'],
    ['exit', 'result file, process exit'],
    ['total', 'wall time'],
  ];
  const cell = (figures: Figures[], phase: string) => {
    const values = figures.map(f => f[phase]).filter(v => v !== undefined && !Number.isNaN(v));
    return values.length ? median(values) : undefined;
  };
  const show = (v: number | undefined, width = 10) => (v === undefined ? '-' : v.toFixed(1)).padStart(width);
  const ratio = (a: number | undefined, b: number | undefined) => (a !== undefined && b ? `${(a / b).toFixed(2)}x` : '-').padStart(8);
  const nodeVersion = execFileSync(NODE, ['--version'], { encoding: 'utf8' }).trim();
  console.log(`rcm-node-installer install vs. bare baseline, median of ${rounds} rounds (ms), containerd 1.6 on loopback, installers on Node.js ${nodeVersion}`
    + (COMPILE_CACHE ? ', rcm from its compile cache as in its image' : ''));
  console.log(`${'phase'.padEnd(16)}${'rcm'.padStart(10)}${'baseline'.padStart(10)}${'ratio'.padStart(8)}`
    + `${before ? `${`before (${BEFORE})`.padStart(20)}${'ratio'.padStart(8)}` : ''}   what`);
  for (const [phase, what] of rows) {
    const a = cell(rcm, phase);
    const b = cell(base, phase);
    const c = before ? cell(old, phase) : undefined;
    console.log(`${phase.padEnd(16)}${show(a)}${show(b)}${ratio(a, b)}${before ? `${show(c, 20)}${ratio(c, b)}` : ''}   ${what}`);
  }
  const ratios = rcm.map((f, i) => f.total / base[i].total);
  console.log(`summary: rcm ${cell(rcm, 'total')!.toFixed(0)} ms, baseline ${cell(base, 'total')!.toFixed(0)} ms, ratio of medians `
    + `${(cell(rcm, 'total')! / cell(base, 'total')!).toFixed(2)}x, median of per-round ratios ${median(ratios).toFixed(2)}x`
    + (before ? `, before ${(cell(old, 'total')! / cell(base, 'total')!).toFixed(2)}x` : ''));
  const agentRatios = agentRuns.map((f, i) => f.total / base[i].total);
  console.log(`summary: node agent (the installer in its long-running process, --set-gather=0 as the agent runs it) ${cell(agentRuns, 'total')!.toFixed(0)} ms, `
    + `baseline ${cell(base, 'total')!.toFixed(0)} ms, ratio of medians ${(cell(agentRuns, 'total')! / cell(base, 'total')!).toFixed(2)}x, `
    + `median of per-round ratios ${median(agentRatios).toFixed(2)}x (the agent's gathering of a node's requests, 0.5 s after the last, comes before)`);
  console.log('Each row is its own median (the rows need not add up). The rcm total is the wall time of the whole process;');
  console.log('the baseline has no config edit, no preflight, no lock, journal, fsyncs or rollback, and its health check is "ctr version" alone.');
  for (const line of payloadReport) console.log(line);
}

/** One run's figures: times (ms), peak RSS (KiB), bytes written to storage. */
interface Usage {
  readonly ms: number;
  readonly maxRssKiB: number;
  readonly writeBytes: number;
}

/**
 * Runs a shell command under a small Python parent that reports, once it ended, the largest
 * resident set of the processes it ran (getrusage of the children) and the bytes they wrote
 * to storage (the parent's /proc io, into which the kernel adds each reaped child's).
 */
async function measured(command: string): Promise<Usage> {
  const script = [
    'import json, resource, subprocess, sys, time',
    't = time.monotonic()',
    'code = subprocess.run(["bash", "-c", sys.argv[1]]).returncode',
    'ms = (time.monotonic() - t) * 1000',
    'io = dict(l.split(": ") for l in open("/proc/self/io").read().split("\\n") if l)',
    'print(json.dumps({"code": code, "ms": ms, "maxRssKiB": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "writeBytes": int(io["write_bytes"])}))',
  ].join('\n');
  const { stdout } = await run('python3', ['-c', script, command], { maxBuffer: 1 << 20 });
  const r = JSON.parse(stdout);
  if (r.code !== 0) throw new Error(`baseline command failed (${r.code}): ${command}`);
  return r;
}

/** A preload for the installer: at exit, its own peak RSS and the bytes it (and what it ran) wrote to storage. */
const USAGE_HOOK = `const fs = require('fs');
process.on('exit', () => {
  const io = Object.fromEntries(fs.readFileSync('/proc/self/io', 'utf8').trim().split('\\n').map(l => l.split(': ')));
  fs.writeFileSync(process.env.RCM_BENCH_USAGE_FILE, JSON.stringify({ maxRssKiB: process.resourceUsage().maxRSS, writeBytes: Number(io.write_bytes) }));
});
`;

interface PayloadCase {
  readonly name: string;
  readonly file: string;
  readonly sha256: string;
  readonly archiveBytes: number;
  readonly unpackedBytes: number;
  readonly what: string;
}

/** The small payload: runc's shim alone, as a payload (the same code path as the large one). */
async function smallPayload(work: string): Promise<PayloadCase> {
  const dir = path.join(work, 'small-payload');
  fs.mkdirSync(path.join(dir, 'bin'), { recursive: true });
  fs.copyFileSync('/usr/bin/containerd-shim-runc-v2', path.join(dir, 'bin', 'containerd-shim-runc-v2'));
  const file = path.join(work, 'small-payload.tgz');
  await tar.c({ gzip: true, file, cwd: dir, portable: true }, ['bin']);
  const data = fs.readFileSync(file);
  return {
    name: 'small', file, sha256: crypto.createHash('sha256').update(data).digest('hex'), archiveBytes: data.length,
    unpackedBytes: fs.statSync(path.join(dir, 'bin', 'containerd-shim-runc-v2')).size, what: 'runc\'s shim alone',
  };
}

/**
 * A larger one, to see whether the peak RSS keeps growing: the crun + WasmEdge payload with
 * two more copies of its largest library (lib/extra-1, lib/extra-2).
 */
async function largerPayload(work: string): Promise<PayloadCase> {
  const dir = path.join(work, 'larger-payload');
  fs.cpSync(WASM_RUNTIME_DIR, dir, { recursive: true, verbatimSymlinks: true });
  fs.copyFileSync('/usr/bin/containerd-shim-runc-v2', path.join(dir, 'bin', 'containerd-shim-runc-v2'));
  for (const extra of ['extra-1', 'extra-2']) fs.copyFileSync(path.join(dir, 'lib', 'libLLVM.so.19.1'), path.join(dir, 'lib', extra));
  const file = path.join(work, 'larger-payload.tgz');
  await tar.c({ gzip: true, file, cwd: dir, portable: true }, fs.readdirSync(dir).sort());
  const unpackedBytes = fs.readdirSync(dir, { recursive: true }).map(String)
    .map(f => fs.lstatSync(path.join(dir, f))).filter(st => st.isFile()).reduce((sum, st) => sum + st.size, 0);
  fs.rmSync(dir, { recursive: true, force: true });
  const data = fs.readFileSync(file);
  return {
    name: 'crun + WasmEdge + 2 x libLLVM', file, sha256: crypto.createHash('sha256').update(data).digest('hex'), archiveBytes: data.length,
    unpackedBytes, what: 'the same with two more copies of libLLVM.so.19.1',
  };
}

/** The payload installs and their baselines; returns the report's lines (printed after the main table). */
async function payloads(ctx: { work: string; installer: string; cacheEnv: Record<string, string>; daemon: ContainerdDaemon;
  served: Map<string, string>; base: string; }): Promise<string[]> {
  const { work, installer, cacheEnv, daemon, served, base } = ctx;
  if (!fs.existsSync(path.join(WASM_RUNTIME_DIR, 'bin', 'crun'))) return [`\npayloads: skipped, ${WASM_RUNTIME_DIR} is missing (run scripts/provision.sh)`];
  const report: string[] = [];
  const console = { log: (line: string) => report.push(line) };
  const wasm = await buildWasmPayload(path.join(work, 'crun-wasmedge.tgz'));
  const cases: PayloadCase[] = [
    await smallPayload(work),
    { name: 'crun + WasmEdge', file: wasm.file, sha256: wasm.sha256, archiveBytes: wasm.archiveBytes, unpackedBytes: wasm.unpackedBytes,
      what: `${wasm.files} files and ${wasm.links} links` },
    await largerPayload(work),
  ];
  const hook = path.join(work, 'usage-hook.js');
  fs.writeFileSync(hook, USAGE_HOOK);
  const waitReady = `until ctr --address ${daemon.socket} version >/dev/null 2>&1; do sleep 0.1; done`;
  const mb = (bytes: number) => (bytes / 1e6).toFixed(1);
  const mib = (kib: number) => (kib / 1024).toFixed(0);
  const summary: string[] = [];

  for (const c of cases) {
    const name = path.basename(c.file);
    served.set(name, c.file);
    const url = `${base}/${name}`;
    const rcm: Array<Figures & { maxRssKiB: number; writeBytes: number }> = [];
    const shell: Array<Figures & { maxRssKiB: number; writeBytes: number }> = [];
    for (let i = 0; i < PAYLOAD_ROUNDS; i++) {
      const resultFile = path.join(work, 'payload-result.json');
      const usageFile = path.join(work, 'payload-usage.json');
      const args = ['--host-root=/', `--install-root=${path.join(daemon.dir, 'opt', 'rcm')}`, `--config=${daemon.config}`,
        `--socket=${daemon.socket}`, '--distro=containerd', '--restart=command', `--restart-command=${daemon.restartCommand}`,
        '--handler=benchpayload', `--result-file=${resultFile}`];
      const env = { ...process.env, ...(COMPILE_CACHE ? cacheEnv : {}), RCM_BENCH_USAGE_FILE: usageFile };
      const wall = await timed(() => run(NODE, ['-r', hook, installer, 'install', `--location=${url}`, `--sha256=${c.sha256}`,
        '--payload-shim=bin/containerd-shim-runc-v2', '--runtime-type=io.containerd.runc.v2', '--runtime-option=BinaryName=${PAYLOAD}/bin/crun',
        ...args], { env }));
      const result = JSON.parse(fs.readFileSync(resultFile, 'utf8'));
      if (result.outcome !== 'installed') throw new Error(`the payload install ended ${result.outcome}: ${JSON.stringify(result)}`);
      rcm.push({ ...phases(wall, result.timings), ...JSON.parse(fs.readFileSync(usageFile, 'utf8')) });
      await run(NODE, [installer, 'uninstall', ...args], { env });

      const dir = path.join(work, `payload-baseline-${i}`);
      fs.mkdirSync(path.join(dir, 'payload'), { recursive: true });
      const download = await measured(`curl -sf ${url} -o ${dir}/payload.tgz`);
      const verify = await measured(`echo "${c.sha256}  ${dir}/payload.tgz" | sha256sum -c - >/dev/null && tar -xzf ${dir}/payload.tgz -C ${dir}/payload`);
      // The restart as the table above times it (the processes doing it are containerd's, not the baseline's).
      const restart = await timed(() => sh(daemon.restartCommand)) + await timed(() => sh(waitReady));
      shell.push({
        download: download.ms, verify: verify.ms, restart, total: download.ms + verify.ms + restart,
        maxRssKiB: Math.max(download.maxRssKiB, verify.maxRssKiB),
        writeBytes: download.writeBytes + verify.writeBytes,
      });
      fs.rmSync(dir, { recursive: true, force: true });
    }
    const med = (rows: Array<Record<string, number>>, key: string) => median(rows.map(r => r[key]).filter(v => v !== undefined && !Number.isNaN(v)));
    console.log(`\npayload ${c.name} (${c.what}): ${mb(c.archiveBytes)} MB archive, ${mb(c.unpackedBytes)} MB unpacked; `
      + `median of ${PAYLOAD_ROUNDS} installs, installer on Node.js ${execFileSync(NODE, ['--version'], { encoding: 'utf8' }).trim()}`);
    console.log(`${'figure'.padEnd(26)}${'rcm'.padStart(10)}${'baseline'.padStart(10)}${'ratio'.padStart(8)}   what`);
    const line = (label: string, a: number, b: number | undefined, what: string, digits = 0) =>
      console.log(`${label.padEnd(26)}${a.toFixed(digits).padStart(10)}${(b === undefined ? '-' : b.toFixed(digits)).padStart(10)}`
        + `${(b ? `${(a / b).toFixed(2)}x` : '-').padStart(8)}   ${what}`);
    line('download (ms)', med(rcm, 'download'), med(shell, 'download'), 'rcm: to its scratch file, hashed as it arrives; baseline: curl');
    line('verify and unpack (ms)', med(rcm, 'verify'), med(shell, 'verify'), 'rcm: archive checks, extraction, tree digest; baseline: sha256sum, tar -xzf');
    line('other (ms)', med(rcm, 'other'), undefined, 'rcm: the copy to the host with its fsyncs and digest, config, journal, state');
    line('restart (ms)', med(rcm, 'restart'), med(shell, 'restart'), 'restart command and until containerd serves');
    line('total (ms)', med(rcm, 'total'), med(shell, 'total'), 'wall time');
    line('peak RSS (MiB)', med(rcm, 'maxRssKiB') / 1024, med(shell, 'maxRssKiB') / 1024, 'rcm: the installer process; baseline: its largest process');
    line('written to storage (MB)', med(rcm, 'writeBytes') / 1e6, med(shell, 'writeBytes') / 1e6,
      'write_bytes; rcm: scratch download and extraction, then the host copy', 1);
    summary.push(`${c.name} ${mb(c.unpackedBytes)} MB: rcm ${mib(med(rcm, 'maxRssKiB'))} MiB (baseline ${mib(med(shell, 'maxRssKiB'))} MiB)`);
    served.delete(name);
  }
  console.log(`\npeak RSS of the installer by payload size: ${summary.join('; ')}`);
  return report;
}

void main().catch(e => { console.error(e); process.exit(1); });
