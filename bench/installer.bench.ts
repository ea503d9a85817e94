// Benchmark (not a test): install wall time of rcm-node-installer split into download,
// verify, config and restart, beside a bare baseline measured in the same run on the same
// containerd: curl + sha256sum + restart, done by shell one-liners.
//
//   npx ts-node --transpile-only -P tsconfig.json bench/installer.bench.ts [rounds]
import { execFile, exec } from 'child_process';
import { promisify } from 'util';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import { buildSync } from 'esbuild';
import * as tar from 'tar';
import { startContainerd } from '../test/support/containerd-daemon';

const rounds = Number(process.argv[2] ?? 5);

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

async function main(): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-bench-'));
  const installer = path.join(work, 'rcm-node-installer.js');
  buildSync({ entryPoints: ['src/installer/main.ts'], bundle: true, platform: 'node', target: 'node20', outfile: installer, logLevel: 'error' });
  fs.mkdirSync(path.join(work, 'shim'));
  fs.copyFileSync('/usr/bin/containerd-shim-runc-v2', path.join(work, 'shim', 'containerd-shim-bench-v2'));
  await tar.c({ gzip: true, file: path.join(work, 'shim.tgz'), cwd: path.join(work, 'shim') }, ['containerd-shim-bench-v2']);
  const artifact = fs.readFileSync(path.join(work, 'shim.tgz'));
  const sha256 = crypto.createHash('sha256').update(artifact).digest('hex');
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-length': artifact.length }).end(artifact));
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as any).port}/shim.tgz`;
  const daemon = await startContainerd();
  const waitReady = `until ctr --address ${daemon.socket} version >/dev/null 2>&1; do sleep 0.1; done`;

  const rcm: Record<string, number[]> = { download: [], verify: [], config: [], restart: [], total: [] };
  const base: Record<string, number[]> = { download: [], verify: [], restart: [], total: [] };
  try {
    for (let i = 0; i < rounds; i++) {
      const resultFile = path.join(work, 'result.json');
      const args = ['--host-root=/', `--install-root=${path.join(daemon.dir, 'opt', 'rcm')}`, `--config=${daemon.config}`,
        `--socket=${daemon.socket}`, '--distro=containerd', '--restart=command', `--restart-command=${daemon.restartCommand}`,
        '--handler=bench', `--result-file=${resultFile}`];
      const wall = await timed(() => run(process.execPath, [installer, 'install', `--location=${url}`, `--sha256=${sha256}`, ...args]));
      const t = JSON.parse(fs.readFileSync(resultFile, 'utf8')).timings;
      rcm.download.push(t.downloadMs); rcm.verify.push(t.verifyMs); rcm.config.push(t.configMs); rcm.restart.push(t.restartMs);
      rcm.total.push(wall);
      await run(process.execPath, [installer, 'uninstall', ...args]);

      const dir = path.join(work, `baseline-${i}`);
      fs.mkdirSync(dir);
      const d = await timed(() => sh(`curl -sf ${url} -o ${dir}/shim.tgz`));
      const v = await timed(() => sh(`echo "${sha256}  ${dir}/shim.tgz" | sha256sum -c - >/dev/null && tar -xzf ${dir}/shim.tgz -C ${dir}`));
      const r = await timed(() => sh(`${daemon.restartCommand}; sleep 0.3; ${waitReady}`));
      base.download.push(d); base.verify.push(v); base.restart.push(r); base.total.push(d + v + r);
    }
  } finally {
    server.close();
    await daemon.stop();
    fs.rmSync(work, { recursive: true, force: true });
  }

  console.log(`rcm-node-installer install vs. bare baseline, median of ${rounds} rounds (ms), containerd 1.6 on loopback`);
  console.log(`${'phase'.padEnd(10)}${'rcm'.padStart(10)}${'baseline'.padStart(10)}${'ratio'.padStart(8)}`);
  for (const phase of ['download', 'verify', 'config', 'restart', 'total']) {
    const a = median(rcm[phase]);
    const b = base[phase] ? median(base[phase]) : undefined;
    console.log(`${phase.padEnd(10)}${a.toFixed(1).padStart(10)}${(b === undefined ? '-' : b.toFixed(1)).padStart(10)}${(b ? (a / b).toFixed(2) + 'x' : '-').padStart(8)}`);
  }
  console.log('rcm total is the wall time of the whole process (node start-up, lock, state and the health check included);');
  console.log('the baseline has no config edit, no health check beyond "ctr version", no rollback.');
}

void main().catch(e => { console.error(e); process.exit(1); });
