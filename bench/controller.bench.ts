// Benchmark (not a test): the controller rolling 3 Shims (rolling 10%) out over N realistic
// Node objects (about 14 KB each, with kubelet heartbeats: every node's Ready condition
// written once a minute) on a real API server with API Priority and Fairness on, beside a
// plain client loop that performs only the unavoidable writes (one Job and one label patch
// per node and Shim), in the same run and on the same API server. With
// RCM_BENCH_BEFORE=<git revision>, the controller of that revision runs the same rollout too.
//
//   npx ts-node --transpile-only -P tsconfig.json bench/controller.bench.ts [nodes[,nodes...]]
//   e.g. RCM_BENCH_BEFORE=377f326 ... bench/controller.bench.ts 2000,5000
//
// Install modes: RCM_BENCH_MODES=jobs,agent (the default: both, side by side in one run). In
// agent mode the controller runs with --install-mode agent, a stand-in for the node agents
// answers the requests of a node's requests ConfigMap on the Node as the agent does (gathered
// for the agent's gather window, then succeeded 0.5 s later, the outcomes of one change set in
// one write, each with its Shim's record after it), a Ready agent pod stands on every node (the DaemonSet's, as its kubelet reports it: the
// controller reads readiness from it), and the plain loop's unavoidable writes are one write of
// the node's requests ConfigMap and one label patch per node and Shim.
//
// Diagnostics: RCM_BENCH_PROFILE=<dir> writes the controller's CPU profile there;
// RCM_BENCH_ALLOCATIONS=<file> what the controller allocates during the rollout (V8's sampling
// heap profiler over the inspector, objects the collector freed included: a .heapprofile that
// Chrome DevTools' Memory tab opens; the bench's Node.js needs a global WebSocket, 22 or later);
// RCM_BENCH_THREADS=1 prints its CPU per thread (main thread vs. GC helpers) and heap;
// RCM_BENCH_KEEP=1 keeps the work folder (the controllers' logs); RCM_BENCH_NODE_FLAGS='...'
// runs the controllers with these node flags (e.g. V8 heap settings) instead of those of
// images/Dockerfile (RCM_BENCH_STDOUT=<file> keeps the controller's stdout, where --trace-gc
// writes; its environment is always that of images/Dockerfile), and RCM_BENCH_BEFORE_NODE_FLAGS
// the one of RCM_BENCH_BEFORE with its own (the same code twice then compares two settings); RCM_BENCH_HEARTBEAT_SECONDS=300
// posts each node's status every 5 minutes (a 1.20 kubelet's default) instead of every minute.
import { ChildProcess, execFileSync, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Testing, Yaml } from 'cdk8s';
import { buildSync } from 'esbuild';
import { InstallMode, RuntimeClassManager } from '../src';
import { mergedPatch, NodeReport } from '../src/agent/change-set-reports';
import { gatherWindow } from '../src/agent/node-agent';
import { AdmittedRequest, AgentResult, REQUESTS_NODE_ANNOTATION, REQUESTS_SELECTOR, resultKey } from '../src/shared/agent-protocol';
import { createAgentPod } from '../test/support/agent-pods';
import { ControlPlane, freePort, startControlPlane } from '../test/support/control-plane';
import { environmentOf, nodeFlagsOf } from '../test/support/dockerfile';
import { eventually, Rest } from '../test/support/rest';
import { NODE_24 } from '../test/support/tools';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { realisticNode } = require('./realistic-node.js');

const SIZES = (process.argv[2] ?? '2000').split(',').map(Number);
const SHIMS = ['spin', 'wasmtime', 'wasmedge'];
const NS = 'runtime-class-manager';
const CLK_TCK = 100;
const BEFORE = process.env.RCM_BENCH_BEFORE;
type Mode = 'jobs' | 'agent';
const MODES = (process.env.RCM_BENCH_MODES ?? 'jobs,agent').split(',') as Mode[];

interface Figures {
  writes: number; cpu: number; rssMiB: number; wall: number; watches?: string;
  /** Watch events the controller read (its own metrics). */
  events?: number;
  /** CPU seconds that receiving the same events cost a bare reader, during the controller's run (bench/plain-watcher.js). */
  readerCpu?: number; readerEvents?: number;
}

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

/**
 * The node the controller, the plain loop and the reader run on: the one the images ship
 * (Node.js 24, scripts/provision.sh fetches it), else this process's.
 */
const NODE = fs.existsSync(NODE_24) ? NODE_24 : process.execPath;

/**
 * What images/Dockerfile of `revision` says (`read` applied to its text), or of this tree
 * without one; `fallback` for a revision from before the Dockerfile or from before what is read.
 */
function ofDockerfile<T>(revision: string | undefined, read: (text?: string) => T, fallback: T): T {
  if (revision === undefined) return read();
  try {
    return read(execFileSync('git', ['show', `${revision}:images/Dockerfile`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  } catch {
    return fallback;
  }
}

/**
 * The node flags of the controller of `revision` (this tree's without one): RCM_BENCH_BEFORE_NODE_FLAGS
 * or RCM_BENCH_NODE_FLAGS where given, else those its images/Dockerfile starts it with.
 */
function controllerNodeFlags(revision?: string): string[] {
  const given = (revision !== undefined ? process.env.RCM_BENCH_BEFORE_NODE_FLAGS : undefined) ?? process.env.RCM_BENCH_NODE_FLAGS;
  if (given !== undefined) return given.split(' ').filter(Boolean);
  return ofDockerfile(revision, text => nodeFlagsOf('controller', text), []);
}

/** The environment images/Dockerfile of `revision` (this tree's without one) gives the controller. */
function controllerEnvironment(revision?: string): Record<string, string> {
  return ofDockerfile(revision, text => environmentOf('controller', text), {});
}

/** The controller bundle of a git revision, built from that revision's sources with today's node_modules. */
function bundleOf(revision: string, work: string): string {
  const tree = path.join(work, `src-${revision}`);
  fs.mkdirSync(tree);
  execFileSync('bash', ['-c', `git archive ${revision} src imports | tar -x -C ${tree}`]);
  fs.symlinkSync(path.resolve('node_modules'), path.join(tree, 'node_modules'));
  const out = path.join(work, `rcm-controller-${revision}.js`);
  buildSync({ entryPoints: [path.join(tree, 'src/runtime/main.ts')], bundle: true, platform: 'node', target: 'node20', outfile: out, logLevel: 'error' });
  return out;
}

async function createNodes(admin: Rest, names: string[]): Promise<void> {
  for (let i = 0; i < names.length; i += 50) {
    await Promise.all(names.slice(i, i + 50).map(async (name, j) => {
      const { node, status } = realisticNode(name, i + j);
      await admin.request('POST', '/api/v1/nodes', node);
      await admin.request('PATCH', `/api/v1/nodes/${name}/status`, { status }, 'application/merge-patch+json');
    }));
  }
}

/**
 * Seconds between two status posts of one node: once a minute by default. A kubelet of 1.20
 * with its defaults posts every 5 minutes while nothing changes (nodeStatusReportFrequency;
 * its heartbeat is a Lease), so the default is five times as many as a real fleet sends.
 */
const HEARTBEAT_SECONDS = Number(process.env.RCM_BENCH_HEARTBEAT_SECONDS ?? 60);

/** Kubelet heartbeats: every node's Ready condition every HEARTBEAT_SECONDS, spread evenly. */
function heartbeats(admin: Rest, names: string[]): () => void {
  let next = 0;
  let due = 0;
  const timer = setInterval(() => {
    const now = new Date().toISOString();
    due += names.length / (HEARTBEAT_SECONDS * 10); // ticks of 100 ms; fractions carry over
    for (; due >= 1; due--) {
      const name = names[next++ % names.length];
      void admin.request('PATCH', `/api/v1/nodes/${name}/status`, {
        status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'kubelet is posting ready status. AppArmor enabled', lastHeartbeatTime: now }] },
      }, 'application/strategic-merge-patch+json').catch(() => undefined);
    }
  }, 100);
  return () => clearInterval(timer);
}

/**
 * The kubelet's part for installer pods: each one succeeds (started, then terminated), in
 * batches every 0.5 s. Pods are learnt from a watch, as kubelets do (listing the pending ones
 * twice a second loaded the API server more than the rollout did at 5,000 nodes).
 */
function finishInstallers(admin: Rest): () => void {
  const pending = new Set<string>();
  const selector = `fieldSelector=${encodeURIComponent('status.phase=Pending')}`;
  let stopped = false;
  let watch: { stop: () => void } | undefined;
  void (async () => {
    while (!stopped) {
      try {
        const list = await admin.get(`/api/v1/namespaces/${NS}/pods?${selector}`);
        for (const p of list.items) pending.add(p.metadata.name);
        const w = admin.watch(`/api/v1/namespaces/${NS}/pods?watch=1&${selector}&resourceVersion=${list.metadata.resourceVersion}&timeoutSeconds=300`, e => {
          if (e.type === 'ADDED') pending.add(e.object.metadata.name);
        });
        watch = w;
        await w.done;
      } catch {
        await new Promise(r => setTimeout(r, 500));
      }
    }
  })();
  const timer = setInterval(() => {
    const names = [...pending];
    pending.clear();
    const now = new Date().toISOString();
    for (const name of names) {
      void admin.request('PATCH', `/api/v1/namespaces/${NS}/pods/${name}/status`, {
        status: {
          phase: 'Succeeded', startTime: now,
          containerStatuses: [{ name: 'installer', image: 'x', imageID: '', ready: false, restartCount: 0, state: { terminated: { exitCode: 0, reason: 'Completed', message: '{"outcome":"installed"}', startedAt: now, finishedAt: now } } }],
        },
      }, 'application/merge-patch+json').catch((e: any) => { if (e.code !== 404) pending.add(name); }); // tried again at the next batch
    }
  }, 500);
  return () => { stopped = true; clearInterval(timer); watch?.stop(); };
}

/**
 * The node agents' part (install mode NodeAgent): every request in a node's requests ConfigMap
 * is answered on the Node, `succeeded`, as the real agent does: a node's requests are gathered
 * until none came for the agent's gather window (gatherWindow, from what the requests say of
 * the controller's passes), carried out together 0.5 s later, and their outcomes written in
 * one Node write (with each Shim's record after its success). As the real agent does, a request
 * done within its --progress-report-seconds (10) gets no `running` report. Requests are learnt
 * from one watch of the ConfigMaps (each real agent watches its own node's).
 */
function finishAgentRequests(admin: Rest): () => void {
  const taken = new Map<string, string>(); // `${node} ${shim}` -> the request name being answered or answered
  const gathering = new Map<string, { first: number; timer?: NodeJS.Timeout; requests: { shim: string; admitted: AdmittedRequest }[] }>();
  let stopped = false;
  let watch: { stop: () => void } | undefined;
  const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));
  const answer = async (node: string, requests: readonly { shim: string; admitted: AdmittedRequest }[]) => {
    const startedAt = new Date().toISOString();
    await sleep(500);
    const finishedAt = new Date().toISOString();
    // The agent's own report and merge: each Shim's result with its record after the success.
    const patch = mergedPatch(requests.map(({ shim, admitted }): NodeReport => {
      const record = admitted.onSuccess;
      const result: AgentResult = {
        name: admitted.name, admittedAt: admitted.createdAt, phase: 'succeeded', startedAt, finishedAt,
        result: { outcome: 'installed', exitCode: 0 }, ...(record ? { recorded: true } : {}),
      };
      return {
        shim, request: admitted.name, phase: result.phase, stillWanted: () => true,
        patch: { labels: record?.labels ?? {}, annotations: { ...record?.annotations, [resultKey(shim)]: JSON.stringify(result) } },
      };
    }));
    for (;;) {
      try {
        await admin.request('PATCH', `/api/v1/nodes/${node}`, patch, 'application/merge-patch+json');
        return;
      } catch (e: any) {
        if (stopped || e.code === 404) return;
        await sleep(500); // refused under load (429): again, as an agent does
      }
    }
  };
  const onRequests = (cm: any) => {
    const node = cm.metadata.annotations[REQUESTS_NODE_ANNOTATION];
    for (const [shim, text] of Object.entries<string>(cm.data ?? {})) {
      const admitted: AdmittedRequest = JSON.parse(text);
      const id = `${node} ${shim} ${admitted.createdAt}`;
      if (taken.get(id) === admitted.name) continue;
      taken.set(id, admitted.name);
      let set = gathering.get(node);
      if (!set) gathering.set(node, set = { first: Date.now(), requests: [] });
      set.requests.push({ shim, admitted });
      if (set.timer) clearTimeout(set.timer);
      const { quietMs, maxMs } = gatherWindow(set.requests.map(r => r.admitted));
      const started = set;
      set.timer = setTimeout(() => {
        gathering.delete(node);
        void answer(node, started.requests);
      }, Math.max(0, Math.min(quietMs, set.first + maxMs - Date.now())));
    }
  };
  const path = `/api/v1/namespaces/${NS}/configmaps?labelSelector=${encodeURIComponent(REQUESTS_SELECTOR)}`;
  void (async () => {
    while (!stopped) {
      try {
        const list = await admin.get(path);
        for (const cm of list.items) onRequests(cm);
        const w = admin.watch(`${path}&watch=1&resourceVersion=${list.metadata.resourceVersion}&timeoutSeconds=300`, e => {
          if (e.type === 'ADDED' || e.type === 'MODIFIED') onRequests(e.object);
        });
        watch = w;
        await w.done;
      } catch {
        await sleep(500);
      }
    }
  })();
  return () => { stopped = true; watch?.stop(); for (const set of gathering.values()) clearTimeout(set.timer); };
}

/**
 * Starts V8's sampling heap profiler in the process whose inspector listens on `port`, with the
 * objects that garbage collections free included (what a process allocates, not what it
 * keeps); `stop()` returns the profile.
 */
async function sampleAllocations(port: number): Promise<{ stop: () => Promise<unknown> }> {
  if (typeof WebSocket === 'undefined') throw new Error('RCM_BENCH_ALLOCATIONS needs a global WebSocket (Node.js 22 or later)');
  const target = await eventually(async () => {
    const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json() as { webSocketDebuggerUrl: string }[];
    return targets[0];
  }, 30_000, () => `no inspector on port ${port}`);
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  const pending = new Map<number, (result: any) => void>();
  let id = 0;
  ws.onmessage = e => {
    const message = JSON.parse(String(e.data));
    pending.get(message.id)?.(message.result);
    pending.delete(message.id);
  };
  await new Promise(resolve => { ws.onopen = resolve; });
  const call = (method: string, params: object = {}) => new Promise<any>(resolve => {
    pending.set(++id, resolve);
    ws.send(JSON.stringify({ id, method, params }));
  });
  await call('HeapProfiler.enable');
  await call('HeapProfiler.startSampling', { samplingInterval: 32768, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  return {
    stop: async () => {
      const { profile } = await call('HeapProfiler.stopSampling');
      ws.close();
      return profile;
    },
  };
}

async function runController(cp: ControlPlane, admin: Rest, bundle: string, shims: string[], nodes: number, log: string, mode: Mode = 'jobs'): Promise<Figures> {
  const metricsPort = await freePort();
  const start = Date.now();
  const profile = process.env.RCM_BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.RCM_BENCH_PROFILE}`] : [];
  const inspectPort = process.env.RCM_BENCH_ALLOCATIONS ? await freePort() : undefined;
  if (inspectPort) profile.push(`--inspect=127.0.0.1:${inspectPort}`);
  const revision = bundle.includes('rcm-controller-') ? BEFORE : undefined;
  const nodeFlags = controllerNodeFlags(revision);
  const controller = spawn(NODE, [...nodeFlags, ...profile, bundle, `--kubeconfig=${cp.kubeconfig}`, `--namespace=${NS}`, '--leader-elect=false',
    `--metrics-bind-address=127.0.0.1:${metricsPort}`, `--health-probe-bind-address=127.0.0.1:${await freePort()}`, '--log-format=json', '--workers=4',
    // The client-side limit is raised so that the rollout's pace is the kubelet stand-in's.
    ...(revision !== undefined ? [] : ['--kube-api-qps=1000', '--kube-api-burst=2000']),
    ...(mode === 'agent' ? ['--install-mode=agent'] : [])],
  { stdio: ['ignore', process.env.RCM_BENCH_STDOUT ? fs.openSync(process.env.RCM_BENCH_STDOUT, 'a') : 'ignore', fs.openSync(log, 'a')], env: { ...process.env, ...controllerEnvironment(revision) } });
  const stop = mode === 'agent' ? finishAgentRequests(admin) : finishInstallers(admin);
  // The reading half of the floor: the same watches, read by a process that only splits them into events.
  const reader = spawn(NODE, ['bench/plain-watcher.js', cp.server, cp.adminToken, cp.caFile, NS, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  let readerOut = '';
  reader.stdout!.on('data', d => { readerOut += d; });
  let allocations: Awaited<ReturnType<typeof sampleAllocations>> | undefined;
  try {
    if (inspectPort) allocations = await sampleAllocations(inspectPort);
    for (const shim of shims) {
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
      const all = (await admin.get('/apis/runtime.spinkube.dev/v1alpha1/shims')).items.filter((s: any) => shims.includes(s.metadata.name));
      return all.length === shims.length && all.every((s: any) => s.status?.nodesReady === nodes);
    }, 60 * 60_000, () => fs.readFileSync(log, 'utf8').split('\n').slice(-20).join('\n'));
    const wall = (Date.now() - start) / 1000;
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const writes = [...metrics.matchAll(/^rcm_api_writes_total\{verb="\w+"\} (\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
    if (process.env.RCM_BENCH_THREADS) {
      for (const t of fs.readdirSync(`/proc/${controller.pid}/task`)) {
        const st = fs.readFileSync(`/proc/${controller.pid}/task/${t}/stat`, 'utf8');
        const comm = /\((.*)\)/.exec(st)![1]; const f = st.split(') ')[1].split(' ');
        console.log(`thread ${t} ${comm}: user ${Number(f[11]) / CLK_TCK} sys ${Number(f[12]) / CLK_TCK}`);
      }
    }
    // What the controller parsed, per watched resource (controllers from before these metrics have none).
    const events = new Map([...metrics.matchAll(/^rcm_watch_events_total\{resource="(\w+)"\} (\d+)/gm)].map(m => [m[1], Number(m[2])]));
    const reconciles = [...metrics.matchAll(/^rcm_reconciles_total\{result="\w+"\} (\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
    const watches = [...metrics.matchAll(/^rcm_watch_bytes_total\{resource="(\w+)"\} (\d+)/gm)]
      .map(m => `${m[1]} ${events.get(m[1])} events ${(Number(m[2]) / 1e6).toFixed(1)} MB`).join(', ') + `; ${reconciles} reconciles`
      + (/^rcm_plan_seconds_total (\S+)/m.test(metrics) ? ` (deciding them ${Number(/^rcm_plan_seconds_total (\S+)/m.exec(metrics)![1]).toFixed(2)} s)` : '');
    const gauge = (metric: string) => Number(new RegExp(`^${metric} (\\S+)`, 'm').exec(metrics)?.[1] ?? NaN) / 2 ** 20;
    if (process.env.RCM_BENCH_THREADS) console.log(`heap used ${gauge('nodejs_heap_size_used_bytes').toFixed(1)} MiB of ${gauge('nodejs_heap_size_total_bytes').toFixed(1)}, external ${gauge('nodejs_external_memory_bytes').toFixed(1)} MiB`);
    if (allocations) fs.writeFileSync(process.env.RCM_BENCH_ALLOCATIONS!, JSON.stringify(await allocations.stop()));
    const readerCpu = usage(reader.pid!).cpu;
    reader.kill('SIGTERM');
    await waitExit(reader);
    const readerEvents = Number(JSON.parse(readerOut || '{}').events ?? NaN);
    const eventsRead = [...events.values()].reduce((sum, n) => sum + n, 0);
    return { writes, ...usage(controller.pid!), wall, watches, readerCpu, readerEvents, events: eventsRead };
  } finally {
    reader.kill('SIGTERM');
    stop();
    controller.kill('SIGTERM');
    await waitExit(controller);
    // Let the next run start clean: these Shims go without their controller.
    for (const shim of shims) {
      await admin.request('PATCH', `/apis/runtime.spinkube.dev/v1alpha1/shims/${shim}`, { metadata: { finalizers: null } }, 'application/merge-patch+json').catch(() => undefined);
      await admin.request('DELETE', `/apis/runtime.spinkube.dev/v1alpha1/shims/${shim}`).catch(() => undefined);
    }
    await admin.request('DELETE', `/apis/batch/v1/namespaces/${NS}/jobs?propagationPolicy=Background`).catch(() => undefined);
  }
}

/** The plain loop; `requestsOnly`: its requests alone, in a namespace of their own (install mode NodeAgent). */
async function runPlain(cp: ControlPlane, names: string[], mode: Mode = 'jobs', requestsOnly = false): Promise<Figures> {
  const start = Date.now();
  const namespace = requestsOnly ? 'baseline-requests' : 'baseline';
  const plain = spawn(NODE, ['bench/plain-client.js', cp.server, cp.adminToken, cp.caFile, namespace, SHIMS.join(','), ...names],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, RCM_BENCH_MODE: mode, RCM_BENCH_REQUESTS_ONLY: requestsOnly ? '1' : '0' } });
  let out = '';
  plain.stdout.on('data', d => { out += d; });
  let figures = { cpu: 0, rssMiB: 0 };
  const sampler = setInterval(() => {
    try {
      figures = usage(plain.pid!);
    } catch { /* exited */ }
  }, 100);
  await waitExit(plain);
  clearInterval(sampler);
  return { writes: JSON.parse(out).writes, ...figures, wall: (Date.now() - start) / 1000 };
}

async function measure(nodes: number, work: string, mode: Mode, before?: string): Promise<{ plain: Figures; now: Figures; before?: Figures; requestsOnly?: Figures }> {
  const cp = await startControlPlane({
    controllerManager: true, controllers: '*,-nodeipam,-nodelifecycle',
    controllerManagerArgs: ['--kube-api-qps=1000', '--kube-api-burst=2000'],
  });
  // One client with kept-alive connections for the stand-ins (heartbeats, the kubelets' pod updates).
  const admin = new Rest(cp.server, cp.adminToken, cp.caFile, true);
  let stopHeartbeats = () => undefined as void;
  try {
    const chart = Testing.chart();
    new RuntimeClassManager(chart, 'Manager', { installMode: mode === 'agent' ? InstallMode.nodeAgent() : InstallMode.jobs() });
    // The controller runs here as a process, not as the Deployment, and the agents' pods are stand-ins, not the
    // DaemonSet's (and policy/v1 PodDisruptionBudgets come with 1.21; this server is 1.20).
    const objects = Testing.synth(chart).filter(o => !['Deployment', 'DaemonSet', 'PodDisruptionBudget'].includes(o.kind));
    cp.kubectl(['apply', '-f', '-'], { input: Yaml.stringify(...objects) });
    cp.kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
    cp.kubectl(['create', 'namespace', 'baseline']);
    cp.kubectl(['create', 'namespace', 'baseline-requests']);
    const names = Array.from({ length: nodes }, (_, i) => `node-${String(i).padStart(5, '0')}`);
    await createNodes(admin, names);
    // The node agents' pods, as the DaemonSet's would be once started: the controller reads the nodes' readiness from them.
    for (let i = 0; mode === 'agent' && i < names.length; i += 50) await Promise.all(names.slice(i, i + 50).map(n => createAgentPod(admin, NS, n)));
    stopHeartbeats = heartbeats(admin, names);

    const plain = await runPlain(cp, names, mode);
    // In agent mode the agents write the records with their outcomes: the controller's own
    // unavoidable writes are the requests alone, a second baseline beside the issue's.
    const requestsOnly = mode === 'agent' ? await runPlain(cp, names, mode, true) : undefined;
    const bundle = path.join(work, 'rcm-controller.js');
    buildSync({ entryPoints: ['src/runtime/main.ts'], bundle: true, platform: 'node', target: 'node20', outfile: bundle, logLevel: 'error' });
    const now = await runController(cp, admin, bundle, SHIMS, nodes, path.join(work, `controller-${mode}-${nodes}.log`), mode);
    const previous = before && mode === 'jobs'
      ? await runController(cp, admin, bundleOf(before, work), SHIMS.map(s => `${s}-before`), nodes, path.join(work, `before-${nodes}.log`))
      : undefined;
    return { plain, now, before: previous, requestsOnly };
  } finally {
    stopHeartbeats();
    await cp.stop();
  }
}

async function main(): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-bench-controller-'));
  try {
    const results: { nodes: number; mode: Mode; plain: Figures; now: Figures; before?: Figures }[] = [];
    const cell = (v: number, digits: number) => v.toFixed(digits).padStart(11);
    for (const size of SIZES) for (const mode of MODES) {
      // Each size's figures as soon as they are measured: a larger size may take long. Each
      // mode on an API server of its own (a fresh fleet), one after the other.
      const { nodes, plain, now, before, requestsOnly } = { nodes: size, ...await measure(size, work, mode, BEFORE) };
      results.push({ nodes, mode, plain, now, before });
      console.log(`\n${nodes} realistic nodes, install mode ${mode}, ${SHIMS.length} Shims, rolling 10%, heartbeats ${HEARTBEAT_SECONDS === 60 ? 'once a minute' : `every ${HEARTBEAT_SECONDS} s`} per node`);
      console.log(`every process on Node.js ${execFileSync(NODE, ['--version'], { encoding: 'utf8' }).trim()}; the controller with node flags [${controllerNodeFlags().join(' ')}] and environment ${JSON.stringify(controllerEnvironment())}`);
      console.log(`${''.padEnd(24)}${'plain loop'.padStart(11)}${'controller'.padStart(11)}${'ratio'.padStart(8)}${before ? `${`before (${BEFORE})`.padStart(18)}${'ratio'.padStart(8)}` : ''}`);
      const row = (what: string, pick: (f: Figures) => number, digits = 2) => console.log(what.padEnd(24) + cell(pick(plain), digits) + cell(pick(now), digits)
        + `${(pick(now) / pick(plain)).toFixed(2)}x`.padStart(8) + (before ? cell(pick(before), digits).padStart(18) + `${(pick(before) / pick(plain)).toFixed(2)}x`.padStart(8) : ''));
      row('API writes per node', f => f.writes / nodes);
      row('CPU seconds', f => f.cpu);
      row('peak RSS (MiB)', f => f.rssMiB, 1);
      row('wall seconds', f => f.wall, 1);
      if (now.watches) console.log(`controller's watches: ${now.watches}`);
      if (now.readerCpu !== undefined) {
        // Writes and reads together: what any controller that watches the outcome of its writes pays at the least.
        const floor = plain.cpu + now.readerCpu;
        console.log(`floor with reads: the plain loop's ${plain.cpu.toFixed(2)} CPU seconds + ${now.readerCpu.toFixed(2)} for a bare reader to receive the same watches during the rollout (${now.readerEvents} events, bench/plain-watcher.js) = ${floor.toFixed(2)}; controller ${(now.cpu / floor).toFixed(2)}x${before?.readerCpu !== undefined ? `, before ${(before.cpu / (plain.cpu + before.readerCpu)).toFixed(2)}x` : ''}`);
      }
      if (requestsOnly) {
        console.log(`against a plain loop of the requests alone (${(requestsOnly.writes / nodes).toFixed(2)} writes per node, ${requestsOnly.cpu.toFixed(2)} CPU seconds): writes ${(now.writes / requestsOnly.writes).toFixed(2)}x, CPU ${(now.cpu / requestsOnly.cpu).toFixed(2)}x`);
      }
      const perWrite = now.events !== undefined && now.writes > 0 ? (now.events / now.writes).toFixed(2) : 'n/a';
      console.log(`summary: mode=${mode} nodes=${nodes} writes=${(now.writes / plain.writes).toFixed(2)}x cpu=${(now.cpu / plain.cpu).toFixed(2)}x events/write=${perWrite} rss=${Math.round(now.rssMiB)} MiB`);
    }
    for (const mode of MODES) {
      const ofMode = results.filter(r => r.mode === mode);
      if (ofMode.length < 2) continue;
      const [a, b] = [ofMode[0], ofMode[ofMode.length - 1]];
      const growth = (pick: (f: Figures) => number) => (pick(b.now) / pick(a.now)).toFixed(2);
      console.log(`\ninstall mode ${mode}, growth from ${a.nodes} to ${b.nodes} nodes (x${(b.nodes / a.nodes).toFixed(1)}): writes x${growth(f => f.writes)}, CPU x${growth(f => f.cpu)}, RSS x${growth(f => f.rssMiB)}, wall x${growth(f => f.wall)}`);
    }
    console.log('The controller also waits for each Job (the kubelet stand-in finishes pods every 0.5 s), records status and Events');
    console.log('and removes finished Jobs; the plain loop writes and leaves. Its peak RSS is sampled every 0.1 s.');
  } finally {
    if (!process.env.RCM_BENCH_KEEP) fs.rmSync(work, { recursive: true, force: true });
  }
}

void main().catch(e => { console.error(e); process.exit(1); });
