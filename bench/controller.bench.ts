// Benchmark (not a test): the controller rolling 3 Shims (rolling 10%) out over N Node
// objects on a real API server, beside a plain client loop that performs only the
// unavoidable writes (one Job and one label patch per node and Shim), in the same run.
//
//   npx ts-node --transpile-only -P tsconfig.json bench/controller.bench.ts [nodes]
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Testing, Yaml } from 'cdk8s';
import { buildSync } from 'esbuild';
import { RuntimeClassManager } from '../src';
import { freePort, startControlPlane } from '../test/support/control-plane';
import { eventually, Rest } from '../test/support/rest';

const NODES = Number(process.argv[2] ?? 2000);
const SHIMS = ['spin', 'wasmtime', 'wasmedge'];
const NS = 'runtime-class-manager';
const CLK_TCK = 100;

/** CPU seconds and peak RSS (MiB) of a live process, from /proc. */
function usage(pid: number): { cpu: number; rssMiB: number } {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const cpu = (Number(stat[11]) + Number(stat[12])) / CLK_TCK; // utime + stime
  const hwm = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))!;
  return { cpu, rssMiB: Number(hwm[1]) / 1024 };
}

async function waitExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  await new Promise(r => child.once('exit', r));
}

async function main(): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-bench-controller-'));
  const bundle = path.join(work, 'rcm-controller.js');
  buildSync({ entryPoints: ['src/runtime/main.ts'], bundle: true, platform: 'node', target: 'node20', outfile: bundle, logLevel: 'error' });
  const cp = await startControlPlane({
    controllerManager: true, controllers: '*,-nodeipam,-nodelifecycle',
    controllerManagerArgs: ['--kube-api-qps=1000', '--kube-api-burst=2000'],
  });
  const admin = new Rest(cp.server, cp.adminToken, cp.caFile);
  let kubelet: NodeJS.Timeout | undefined;
  try {
    const chart = Testing.chart();
    new RuntimeClassManager(chart, 'Manager');
    cp.kubectl(['apply', '-f', '-'], { input: Yaml.stringify(...Testing.synth(chart).filter(o => o.kind !== 'Deployment')) });
    cp.kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
    cp.kubectl(['create', 'namespace', 'baseline']);
    const names = Array.from({ length: NODES }, (_, i) => `node-${String(i).padStart(5, '0')}`);
    for (let i = 0; i < names.length; i += 500) {
      const items = names.slice(i, i + 500).map(name => ({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64' } } }));
      cp.kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items }) });
    }
    // Ready, as a kubelet reports them (the controller skips nodes that are not).
    const now = new Date().toISOString();
    for (let i = 0; i < names.length; i += 100) {
      await Promise.all(names.slice(i, i + 100).map(name => admin.request('PATCH', `/api/v1/nodes/${name}/status`, {
        status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: '', lastHeartbeatTime: now, lastTransitionTime: now }], nodeInfo: { bootID: `boot-${name}` } },
      }, 'application/strategic-merge-patch+json')));
    }

    // The kubelet's part: every installer pod succeeds.
    const finish = async () => {
      const pods = (await admin.get(`/api/v1/namespaces/${NS}/pods`)).items.filter((p: any) => !['Succeeded', 'Failed'].includes(p.status?.phase));
      await Promise.all(pods.map((p: any) => admin.request('PATCH', `/api/v1/namespaces/${NS}/pods/${p.metadata.name}/status`, {
        status: { phase: 'Succeeded', containerStatuses: [{ name: 'installer', image: 'x', imageID: '', ready: false, restartCount: 0, state: { terminated: { exitCode: 0, reason: 'Completed', message: '{"outcome":"installed"}', startedAt: new Date().toISOString(), finishedAt: new Date().toISOString() } } }] },
      }, 'application/merge-patch+json').catch(() => undefined)));
    };
    const tick = () => { kubelet = setTimeout(() => void finish().finally(() => { if (kubelet) tick(); }), 500); };
    tick();

    const metricsPort = await freePort();
    const start = Date.now();
    const controller = spawn(process.execPath, [...(process.env.RCM_BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.RCM_BENCH_PROFILE}`] : []), bundle, `--kubeconfig=${cp.kubeconfig}`, `--namespace=${NS}`, '--leader-elect=false',
      `--metrics-bind-address=127.0.0.1:${metricsPort}`, `--health-probe-bind-address=127.0.0.1:${await freePort()}`, '--log-format=json', '--workers=4'],
    { stdio: ['ignore', 'ignore', fs.openSync(path.join(work, 'controller.log'), 'a')] });
    for (const shim of SHIMS) {
      await admin.request('POST', '/apis/runtime.spinkube.dev/v1alpha1/shims', {
        apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', metadata: { name: shim },
        spec: {
          fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: `https://example.com/${shim}.tgz`, sha256: 'a'.repeat(64) } },
          runtimeClass: { name: shim, handler: shim },
          rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: '10%' } },
        },
      });
    }
    await eventually(async () => {
      const shims = (await admin.get('/apis/runtime.spinkube.dev/v1alpha1/shims')).items;
      return shims.length === SHIMS.length && shims.every((s: any) => s.status?.nodesReady === NODES);
    }, 30 * 60_000, () => fs.readFileSync(path.join(work, 'controller.log'), 'utf8').split('\n').slice(-20).join('\n'));
    const wall = (Date.now() - start) / 1000;
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const writes = [...metrics.matchAll(/^rcm_api_writes_total\{verb="\w+"\} (\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
    const rcm = usage(controller.pid!);
    controller.kill('SIGTERM');
    await waitExit(controller);
    if (kubelet) clearTimeout(kubelet);
    kubelet = undefined;

    // The baseline, against the same API server.
    const baseStart = Date.now();
    const plain = spawn(process.execPath, ['bench/plain-client.js', cp.server, cp.adminToken, cp.caFile, 'baseline', SHIMS.join(','), ...names], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    plain.stdout.on('data', d => { out += d; });
    let base = { cpu: 0, rssMiB: 0 };
    const sampler = setInterval(() => {
      try {
        base = usage(plain.pid!);
      } catch { /* exited */ }
    }, 100);
    await waitExit(plain);
    clearInterval(sampler);
    const baseWall = (Date.now() - baseStart) / 1000;
    const baseWrites = JSON.parse(out).writes;

    const row = (what: string, a: number, b: number, digits = 2) =>
      console.log(`${what.padEnd(26)}${a.toFixed(digits).padStart(12)}${b.toFixed(digits).padStart(12)}${(a / b).toFixed(2).padStart(9)}x`);
    console.log(`controller vs plain client loop: ${NODES} nodes, ${SHIMS.length} Shims, rolling 10%`);
    console.log(`${''.padEnd(26)}${'controller'.padStart(12)}${'plain loop'.padStart(12)}${'ratio'.padStart(10)}`);
    row('API writes per node', writes / NODES, baseWrites / NODES);
    row('CPU seconds', rcm.cpu, base.cpu);
    row('peak RSS (MiB)', rcm.rssMiB, base.rssMiB, 1);
    row('wall seconds', wall, baseWall, 1);
    console.log('The controller also waits for each Job (the kubelet stand-in finishes pods every 0.5 s), records events,');
    console.log('status and removes each finished Job; the plain loop writes and leaves. Its peak RSS is sampled every 0.1 s.');
  } finally {
    if (kubelet) clearTimeout(kubelet);
    await cp.stop();
    fs.rmSync(work, { recursive: true, force: true });
  }
}

void main().catch(e => { console.error(e); process.exit(1); });
