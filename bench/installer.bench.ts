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
import { execFile, exec, execFileSync } from 'child_process';
import { promisify } from 'util';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import { buildSync } from 'esbuild';
import * as tar from 'tar';
import { startContainerd } from '../test/support/containerd-daemon';
import { NODE_24 } from '../test/support/tools';

const rounds = Number(process.argv[2] ?? 5);
const BEFORE = process.env.RCM_BENCH_BEFORE;
/** The installer runs on the images' Node.js (24), not on whatever runs this script. */
const NODE = process.env.RCM_BENCH_NODE ?? (fs.existsSync(NODE_24) ? NODE_24 : process.execPath);
const COMPILE_CACHE = process.env.RCM_BENCH_COMPILE_CACHE !== '0';

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
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-length': artifact.length }).end(artifact));
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as any).port}/shim.tgz`;
  const daemon = await startContainerd();
  // ctr waits for the socket to appear by itself: the loop only retries a refused connection.
  const waitReady = `until ctr --address ${daemon.socket} version >/dev/null 2>&1; do sleep 0.1; done`;

  const rcm: Figures[] = [];
  const old: Figures[] = [];
  const base: Figures[] = [];
  const install = async (bundleFile: string): Promise<Figures> => {
    const env = { ...process.env, ...(COMPILE_CACHE && bundleFile === installer ? cacheEnv : {}) };
    const resultFile = path.join(work, 'result.json');
    const args = ['--host-root=/', `--install-root=${path.join(daemon.dir, 'opt', 'rcm')}`, `--config=${daemon.config}`,
      `--socket=${daemon.socket}`, '--distro=containerd', '--restart=command', `--restart-command=${daemon.restartCommand}`,
      '--handler=bench', `--result-file=${resultFile}`];
    const wall = await timed(() => run(NODE, [bundleFile, 'install', `--location=${url}`, `--sha256=${sha256}`, ...args], { env }));
    const figures = phases(wall, JSON.parse(fs.readFileSync(resultFile, 'utf8')).timings);
    await run(NODE, [bundleFile, 'uninstall', ...args], { env });
    return figures;
  };
  try {
    for (let i = 0; i < rounds; i++) {
      rcm.push(await install(installer));
      if (before) old.push(await install(before));

      const dir = path.join(work, `baseline-${i}`);
      fs.mkdirSync(dir);
      const download = await timed(() => sh(`curl -sf ${url} -o ${dir}/shim.tgz`));
      const verify = await timed(() => sh(`echo "${sha256}  ${dir}/shim.tgz" | sha256sum -c - >/dev/null && tar -xzf ${dir}/shim.tgz -C ${dir}`));
      const restartCommand = await timed(() => sh(daemon.restartCommand));
      const untilServing = await timed(() => sh(waitReady));
      const restart = restartCommand + untilServing;
      base.push({ download, verify, restartCommand, untilServing, restart, total: download + verify + restart });
    }
  } finally {
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
  console.log('Each row is its own median (the rows need not add up). The rcm total is the wall time of the whole process;');
  console.log('the baseline has no config edit, no preflight, no lock, journal, fsyncs or rollback, and its health check is "ctr version" alone.');
}

void main().catch(e => { console.error(e); process.exit(1); });
