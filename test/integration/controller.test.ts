import { ChildProcess, execFile, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Testing, Yaml } from 'cdk8s';
import { buildSync } from 'esbuild';
import { RuntimeClassManager, ShimConstruct, ShimNodeLabels } from '../../src';
import { argoHealth } from '../support/argo-health';
import { ControlPlane, freePort, startControlPlane } from '../support/control-plane';
import { eventually, Rest } from '../support/rest';
import { kubeBinary } from '../support/tools';

// rcm-controller against a real etcd + kube-apiserver + kube-controller-manager (Job
// controller, garbage collector, token controller) with API Priority and Fairness on and no
// feature gates, running with the RBAC the construct synthesizes. A kubelet stand-in runs the
// installer pods: it models which handlers each node really has (an install adds one, an
// uninstall removes it), and on every poll it checks the invariants against the API:
// I1 (every node a RuntimeClass selects has its handler) and I3 (one operation per node and
// handler), and that no started installer pod is killed before it finishes.

const NS = 'runtime-class-manager';
/** The installer Jobs' own namespace (installerNamespace): the controller's RBAC is split across the two. */
const INSTALLERS = 'rcm-installers';
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-controller-'));
const CONTROLLER = path.join(work, 'rcm-controller.js');
const shimsPath = '/apis/runtime.spinkube.dev/v1alpha1/shims';
let cp: ControlPlane;
let admin: Rest;
let saKubeconfig: string;
/** The manager's objects as applied (the Deployment aside), for the teardown test. */
let managerYaml: string;
const controllers: { name: string; child: ChildProcess; log: string; metricsPort: number }[] = [];
let kubelet: NodeJS.Timeout | undefined;

// ---- the kubelet stand-in ----------------------------------------------------------------

interface PodFacts { node: string; operation: string; handler: string; location?: string; shim: string; attempt: number }
/** hold: started, not finished; unstarted: the kubelet has not picked it up. */
type Verdict = 'hold' | 'unstarted' | 'succeed' | 'fail';
let verdict: (pod: PodFacts) => Verdict = () => 'succeed';
let failure = { exitCode: 3, reason: 'ChecksumMismatch', message: 'sha256 differs' };
/** What each node really has installed. */
const hosts = new Map<string, Set<string>>();
const notReady = new Set<string>();
const violations: string[] = [];
/** Most unfinished installer pods at once (as the API shows them at each poll), by `<shim>/<operation>`. */
const peaks = new Map<string, number>();
/** Pods this kubelet started and has not finished (name -> facts). */
const runningPods = new Map<string, PodFacts>();
const finishedPods: (PodFacts & { outcome: string })[] = [];

function facts(pod: any): PodFacts {
  const container = pod.spec.containers[0];
  const env = Object.fromEntries((container.env ?? []).map((e: any) => [e.name, e.value]));
  return {
    node: pod.spec.nodeName,
    operation: container.args[0],
    handler: env.RCM_HANDLER,
    location: env.RCM_LOCATION,
    shim: pod.metadata.annotations['runtime.spinkube.dev/shim'],
    attempt: Number(pod.metadata.annotations['runtime.spinkube.dev/attempt']),
  };
}

const selects = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

async function playKubelet(): Promise<void> {
  const [pods, nodes, rcs] = await Promise.all([
    admin.get(`/api/v1/namespaces/${INSTALLERS}/pods`).then(l => l.items),
    admin.get('/api/v1/nodes').then(l => l.items),
    admin.get('/apis/node.k8s.io/v1/runtimeclasses').then(l => l.items),
  ]);
  // I1, on this snapshot of the API against what the hosts really have
  for (const rc of rcs) {
    if (!rc.scheduling?.nodeSelector) continue;
    for (const node of nodes) {
      if (selects(rc.scheduling.nodeSelector, node.metadata.labels) && !hosts.get(node.metadata.name)?.has(rc.handler)) {
        violations.push(`I1: RuntimeClass ${rc.metadata.name} (handler ${rc.handler}) selects ${node.metadata.name}, which has [${[...hosts.get(node.metadata.name) ?? []]}]`);
      }
    }
  }
  // I3, and pods killed mid-operation
  const live = pods.filter((p: any) => !['Succeeded', 'Failed'].includes(p.status?.phase) && !p.metadata.deletionTimestamp);
  const perHandler = new Map<string, number>();
  const perOperation = new Map<string, number>();
  for (const pod of live) {
    const f = facts(pod);
    perOperation.set(`${f.shim}/${f.operation}`, (perOperation.get(`${f.shim}/${f.operation}`) ?? 0) + 1);
    const key = `${f.node}/${f.handler}`;
    perHandler.set(key, (perHandler.get(key) ?? 0) + 1);
    if (perHandler.get(key)! > 1) violations.push(`I3: two operations at once for ${key}`);
  }
  for (const [k, n] of perOperation) peaks.set(k, Math.max(peaks.get(k) ?? 0, n));
  for (const [name, f] of runningPods) {
    const pod = pods.find((p: any) => p.metadata.name === name);
    if (!pod || pod.metadata.deletionTimestamp) {
      violations.push(`killed: ${f.operation} pod ${name} on ${f.node} was deleted while it ran`);
      runningPods.delete(name);
    }
  }
  const now = new Date().toISOString();
  for (const pod of pods) {
    const name = pod.metadata.name;
    const node = pod.spec.nodeName;
    if (!node || notReady.has(node)) continue; // a node whose kubelet is down does nothing
    if (pod.metadata.deletionTimestamp) {
      // the kubelet confirms a deletion once the containers are gone
      await admin.request('DELETE', `/api/v1/namespaces/${INSTALLERS}/pods/${name}`, { gracePeriodSeconds: 0 }).catch(() => undefined);
      continue;
    }
    if (['Succeeded', 'Failed'].includes(pod.status?.phase)) continue;
    const f = facts(pod);
    const v = verdict(f);
    if (v === 'unstarted') continue;
    const container = pod.spec.containers[0];
    if (!pod.status?.startTime) {
      await admin.request('PATCH', `/api/v1/namespaces/${INSTALLERS}/pods/${name}/status`, { status: { phase: 'Running', startTime: now } }, 'application/merge-patch+json');
      runningPods.set(name, f);
    }
    if (v === 'hold') continue;
    if (v === 'succeed') {
      const host = hosts.get(node)!;
      if (f.operation === 'install') host.add(f.handler); else host.delete(f.handler);
    }
    const result = v === 'succeed'
      ? { outcome: f.operation === 'install' ? 'installed' : 'uninstalled', exitCode: 0, message: 'done', handler: f.handler }
      : { outcome: 'failed', ...failure };
    runningPods.delete(name);
    finishedPods.push({ ...f, outcome: v });
    await admin.request('PATCH', `/api/v1/namespaces/${INSTALLERS}/pods/${name}/status`, {
      status: {
        phase: v === 'succeed' ? 'Succeeded' : 'Failed',
        containerStatuses: [{
          name: container.name,
          image: container.image,
          imageID: '',
          ready: false,
          restartCount: 0,
          state: { terminated: { exitCode: result.exitCode, reason: v === 'succeed' ? 'Completed' : 'Error', message: JSON.stringify(result), startedAt: now, finishedAt: now } },
        }],
      },
    }, 'application/merge-patch+json').catch(() => undefined);
  }
}

async function setNodeReady(name: string, ready: boolean): Promise<void> {
  if (ready) notReady.delete(name); else notReady.add(name);
  const now = new Date().toISOString();
  await admin.request('PATCH', `/api/v1/nodes/${name}/status`, {
    status: {
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', reason: ready ? 'KubeletReady' : 'NodeStatusUnknown', message: '', lastHeartbeatTime: now, lastTransitionTime: now }],
      nodeInfo: { bootID: `boot-${name}` },
    },
  }, 'application/strategic-merge-patch+json');
}

async function addNode(name: string, labels: Record<string, string>): Promise<void> {
  await admin.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', ...labels } } });
  hosts.set(name, new Set());
  await setNodeReady(name, true);
}

// ---- the controller ------------------------------------------------------------------------

async function startController(name: string): Promise<void> {
  const log = path.join(work, `${name}.log`);
  const metricsPort = await freePort();
  const child = spawn(process.execPath, [CONTROLLER,
    `--kubeconfig=${saKubeconfig}`, `--namespace=${NS}`, `--installer-namespace=${INSTALLERS}`, '--installer-image=docker.io/library/rcm-node-installer:test',
    '--installer-env=NO_PROXY=127.0.0.1', '--installer-env=RCM_INSTALL_ROOT=/var/lib/rcm',
    '--installer-image-pull-secret=regcred',
    '--leader-elect=true', '--lease-duration-seconds=4', `--identity=${name}`, '--resync-seconds=3', '--log-format=text',
    '--retry-base-seconds=1', '--retry-max-seconds=4', '--failure-threshold=2',
    `--metrics-bind-address=127.0.0.1:${metricsPort}`, `--health-probe-bind-address=127.0.0.1:${await freePort()}`], { stdio: ['ignore', fs.openSync(log, 'a'), fs.openSync(log, 'a')] });
  controllers.push({ name, child, log, metricsPort });
}

const KEY = (shim: string) => ShimNodeLabels.handlerKey(shim);

async function diagnostics(): Promise<string> {
  const shims = await admin.get(shimsPath).catch(() => ({ items: [] }));
  const jobs = await admin.get(`/apis/batch/v1/namespaces/${INSTALLERS}/jobs`).catch(() => ({ items: [] }));
  const nodes = await admin.get('/api/v1/nodes').catch(() => ({ items: [] }));
  return [
    'shims: ' + JSON.stringify(shims.items.map((s: any) => ({ name: s.metadata.name, status: s.status, finalizers: s.metadata.finalizers }))),
    'jobs: ' + JSON.stringify(jobs.items.map((j: any) => ({ name: j.metadata.name, a: j.metadata.annotations, status: j.status?.conditions ?? j.status }))),
    'nodes: ' + JSON.stringify(nodes.items.map((n: any) => [n.metadata.name, Object.fromEntries(Object.entries({ ...n.metadata.labels, ...n.metadata.annotations }).filter(([k]) => k.includes('shim.runtime')))])),
    'hosts: ' + JSON.stringify([...hosts].map(([n, h]) => [n, [...h]])),
    'violations: ' + JSON.stringify(violations.slice(0, 10)),
    ...controllers.map(c => `--- ${c.name} ---\n${fs.readFileSync(c.log, 'utf8').split('\n').slice(-25).join('\n')}`),
    cp.logTails(10),
  ].join('\n');
}

const getShim = (name = 'spin') => admin.get(`${shimsPath}/${name}`);
const gone = async (p: string) => admin.get(p).then(() => false, (e: any) => e.code === 404);
const jobsOf = async (shim: string, operation?: string) => (await admin.get(`/apis/batch/v1/namespaces/${INSTALLERS}/jobs`)).items
  .filter((j: any) => j.metadata.annotations['runtime.spinkube.dev/shim'] === shim && (!operation || j.metadata.annotations['runtime.spinkube.dev/operation'] === operation));
const nodeLabels = async (name: string) => (await admin.get(`/api/v1/nodes/${name}`)).metadata.labels ?? {};
const condition = (shim: any, type: string) => shim.status?.conditions?.find((c: any) => c.type === type);
const ready = (name: string, nodes: number) => async () => {
  const s = await getShim(name);
  return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === nodes && s.status.observedGeneration === s.metadata.generation ? s : undefined;
};
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));
const createShim = (name: string, spec: object) => admin.request('POST', shimsPath, { apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', metadata: { name }, spec });
const handlersOn = (nodes: string[]) => nodes.map(n => [...hosts.get(n)!].sort().join(','));

/**
 * Argo CD's verdict on a Shim the controller wrote, from the Lua health check run by a real
 * Lua 5.1 interpreter. With RCM_WRITE_ARGO_FIXTURES=1 the object is also saved under
 * test/fixtures/argo-cd/ for the construct tests (which run without an API server).
 */
function expectArgoHealth(shim: any, status: string, fixture: string): void {
  const health = argoHealth(shim);
  expect({ fixture, ...health }).toMatchObject({ fixture, status });
  if (process.env.RCM_WRITE_ARGO_FIXTURES === '1') {
    const { managedFields: _, ...metadata } = shim.metadata;
    const dir = path.join(__dirname, '..', 'fixtures', 'argo-cd');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, `${fixture}.json`), JSON.stringify({ expected: health, shim: { ...shim, metadata } }, null, 2) + '\n');
  }
}

beforeAll(async () => {
  buildSync({ entryPoints: [path.join(__dirname, '..', '..', 'src', 'runtime', 'main.ts')], bundle: true, platform: 'node', target: 'node20', outfile: CONTROLLER, logLevel: 'error' });
  cp = await startControlPlane({ controllerManager: true, controllers: '*,-nodeipam,-nodelifecycle' });
  admin = new Rest(cp.server, cp.adminToken, cp.caFile);

  // The manager's objects as synthesized (the Deployment aside: the test runs the controller).
  const chart = Testing.chart();
  new RuntimeClassManager(chart, 'Manager', { installerNamespace: INSTALLERS });
  const objects = Testing.synth(chart).filter(o => o.kind !== 'Deployment');
  managerYaml = Yaml.stringify(...objects);
  cp.kubectl(['apply', '-f', '-'], { input: managerYaml });
  cp.kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);

  // A token for the controller's ServiceAccount (TokenRequest: no token Secrets since 1.24).
  const token = cp.kubectl(['create', 'token', 'rcm-controller', '-n', NS, '--duration=6h']).trim();
  saKubeconfig = path.join(work, 'controller.kubeconfig');
  fs.writeFileSync(saKubeconfig, fs.readFileSync(cp.kubeconfig, 'utf8').replace(/token: "[^"]*"/, `token: "${token}"`));

  for (const [name, extra] of [['n1', { wasm: 'true' }], ['n2', { wasm: 'true' }], ['n3', { wasm: 'true' }], ['n4', {}]] as const) await addNode(name, extra);
  const tick = () => {
    kubelet = setTimeout(() => void playKubelet().catch(e => violations.push(`kubelet stand-in: ${e}`)).finally(() => { if (kubelet) tick(); }), 300);
  };
  tick();
  await startController('c1');
}, 240_000);

afterEach(() => {
  // every scenario ends with the invariants intact (and reports only its own breaches)
  expect(violations.splice(0)).toEqual([]);
});

afterAll(async () => {
  if (kubelet) clearTimeout(kubelet);
  kubelet = undefined;
  for (const c of controllers) c.child.kill('SIGKILL');
  await cp?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

const WASM = ['n1', 'n2', 'n3'];
const artifact = (location: string, sha = 'a') => ({ type: 'anonymousHttp', anonHttp: { location: `https://example.com/${location}`, sha256: sha.repeat(64) } });
const SPEC = {
  nodeSelector: { wasm: 'true' },
  fetchStrategy: artifact('spin-v1.tgz'),
  runtimeClass: { name: 'wasmtime-spin', handler: 'spin' },
  rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } },
};

test('a rolling install, batch by batch, ends Ready with recorded nodes, an adopted RuntimeClass and no Jobs left', async () => {
  // GIVEN the RuntimeClass already applied by GitOps, as ShimConstruct synthesizes it on request
  // (and did by default before the controller wrote it alone: the upgrade path)
  const chart = Testing.chart();
  new ShimConstruct(chart, 'spin', { handler: 'spin', runtimeClassName: 'wasmtime-spin', location: 'https://example.com/spin-v1.tgz', createRuntimeClass: true });
  const synthesizedRc = Testing.synth(chart).find(o => o.kind === 'RuntimeClass');
  cp.kubectl(['apply', '--server-side', '--field-manager=argocd', '-f', '-'], { input: Yaml.stringify(synthesizedRc) });
  // AND installer pods that do not finish yet
  verdict = () => 'hold';
  // WHEN a Shim is created
  await createShim('spin', SPEC);

  // THEN two installs start (maxUpdate 2), and no third while they run
  await eventually(async () => (await jobsOf('spin', 'install')).length === 2, 30_000, diagnostics);
  await sleep(2000);
  const first = (await jobsOf('spin', 'install')).map((j: any) => j.metadata.annotations['runtime.spinkube.dev/node']).sort();
  expect(first).toEqual(['n1', 'n2']);
  const job = (await jobsOf('spin', 'install'))[0];
  expect(job.metadata.ownerReferences).toBeUndefined(); // no garbage collector may kill an installer
  expect(job.spec.backoffLimit).toBe(0);
  expect(job.spec.template.spec).toMatchObject({ hostPID: true, hostNetwork: true, automountServiceAccountToken: false, restartPolicy: 'Never' });
  expect(job.spec.template.spec.containers[0].securityContext).toEqual({ privileged: true });
  expect(job.spec.template.spec.imagePullSecrets).toEqual([{ name: 'regcred' }]); // a private registry's pull secret
  expect(job.spec.template.spec.containers[0].env).toEqual(expect.arrayContaining([
    { name: 'NO_PROXY', value: '127.0.0.1' }, { name: 'RCM_INSTALL_ROOT', value: '/var/lib/rcm' }, { name: 'RCM_HANDLER', value: 'spin' },
  ]));
  // the RuntimeClass selects no node yet: none has the handler
  const early = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin');
  expect(early.scheduling.nodeSelector).toEqual({ [KEY('spin')]: 'spin' });
  // Argo CD sees it Progressing (later waves wait)
  const installing = await eventually(async () => {
    const s = await getShim();
    return condition(s, 'Progressing')?.reason === 'RollingOut' && s.status.observedGeneration === s.metadata.generation ? s : undefined;
  }, 30_000, diagnostics);
  expectArgoHealth(installing, 'Progressing', 'rolling-out');

  // WHEN they succeed THEN the third node follows and the Shim becomes Ready
  verdict = () => 'succeed';
  const shim = await eventually(ready('spin', 3), 60_000, diagnostics);
  expect(shim.status).toMatchObject({ nodes: 3, nodesReady: 3, nodesFailed: 0 });
  // Two Jobs ran at once (checked above, while held); the pods the stand-in saw at once are
  // bounded by them (a loaded machine's Job controller may create the second pod late: 1 seen).
  expect(peaks.get('spin/install')).toBeGreaterThanOrEqual(1);
  expect(peaks.get('spin/install')).toBeLessThanOrEqual(2);
  expectArgoHealth(await eventually(async () => {
    const s = await getShim();
    return condition(s, 'Progressing')?.status === 'False' ? s : undefined;
  }, 30_000, diagnostics), 'Healthy', 'ready');
  for (const n of WASM) {
    const labels = await nodeLabels(n);
    expect(labels[KEY('spin')]).toBe('spin');
    expect(labels[ShimNodeLabels.stateKey('spin')]).toBe('provisioned');
    const record = JSON.parse((await admin.get(`/api/v1/nodes/${n}`)).metadata.annotations[ShimNodeLabels.installedKey('spin')]);
    expect(record).toEqual([{ handler: 'spin', revision: shim.status.revision, sha256: 'a'.repeat(64), bootID: `boot-${n}` }]);
  }
  expect((await nodeLabels('n4'))[KEY('spin')]).toBeUndefined();
  const rc = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin');
  expect(rc.metadata.ownerReferences[0]).toMatchObject({ kind: 'Shim', name: 'spin', uid: shim.metadata.uid });
  // adopted, not fought over: both managers keep their fields, the GitOps labels stay
  expect(rc.metadata.managedFields.map((f: any) => f.manager).sort()).toEqual(['argocd', 'rcm-controller']);
  expect(rc.metadata.labels).toEqual(synthesizedRc.metadata.labels);
  const events = (await admin.get('/api/v1/namespaces/default/events')).items.filter((e: any) => e.involvedObject.name === 'spin');
  // one Event per batch, counting its nodes
  const installed = events.filter((e: any) => e.reason === 'Installed');
  expect(installed.reduce((sum: number, e: any) => sum + e.count, 0)).toBe(3);
  expect(installed.map((e: any) => e.message).join(' ')).toMatch(/n1.*n2.*n3|n3.*n1.*n2|n1.*n3|n2.*n3/);
  // I8: finished Jobs are removed by the controller (not left to the TTL controller, which this control plane runs too)
  await eventually(async () => (await jobsOf('spin')).length === 0, 30_000, diagnostics);
});

test('a drifted RuntimeClass is put back in shape', async () => {
  await admin.patch('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin', { scheduling: { nodeSelector: { [KEY('spin')]: 'spin', extra: 'x' } } });
  await eventually(async () => {
    const rc = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin');
    return JSON.stringify(rc.scheduling.nodeSelector) === JSON.stringify({ [KEY('spin')]: 'spin' });
  }, 30_000, diagnostics);
});

test('the RuntimeClass follows spec.runtimeClass: metadata, overhead and tolerations; fields the app\'s manager held go with the spec; a pruned one comes back', async () => {
  const rcPath = '/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin';
  const toleration = { key: 'wasm', operator: 'Exists', effect: 'NoSchedule' };
  // WHEN the spec gives labels, annotations, an overhead and tolerations
  await admin.patch(`${shimsPath}/spin`, {
    spec: { runtimeClass: { labels: { team: 'wasm' }, annotations: { 'example.com/owner': 'platform' }, overhead: { podFixed: { memory: '65536Ki', cpu: '0.25' } }, tolerations: [toleration] } },
  });
  // THEN the RuntimeClass carries them, beside what the GitOps apply had put there
  const rc = await eventually(async () => {
    const r = await admin.get(rcPath);
    return r.metadata.labels?.team === 'wasm' && r.overhead && r.scheduling.tolerations ? r : undefined;
  }, 30_000, diagnostics);
  expect(rc.metadata.labels).toMatchObject({ 'team': 'wasm', 'app.kubernetes.io/managed-by': 'runtime-class-manager' });
  expect(rc.metadata.annotations).toMatchObject({ 'example.com/owner': 'platform', [ShimNodeLabels.ADOPT_ANNOTATION]: 'spin' });
  // (the API server stores quantities in their canonical form)
  expect(rc.overhead).toEqual({ podFixed: { memory: '64Mi', cpu: '250m' } });
  expect(rc.scheduling).toEqual({ nodeSelector: { [KEY('spin')]: 'spin' }, tolerations: [toleration] });
  // AND once in shape it is left alone: the canonical quantities are the spec's, so later passes do not apply it again
  await sleep(2000);
  const settled = (await admin.get(rcPath)).metadata.resourceVersion;
  for (let i = 0; i < 3; i++) {
    await admin.patch(`${shimsPath}/spin`, { metadata: { annotations: { 'example.com/pass': String(i) } } });
    await sleep(1500);
  }
  expect((await admin.get(rcPath)).metadata.resourceVersion).toBe(settled);

  // GIVEN the app's manager holds the overhead and tolerations too (as when the app synthesized them, before the upgrade)
  cp.kubectl(['apply', '--server-side', '--field-manager=argocd', '-f', '-'], {
    input: Yaml.stringify({ apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'wasmtime-spin' }, handler: 'spin', overhead: rc.overhead, scheduling: rc.scheduling }),
  });
  // WHEN the spec drops them and the label
  await admin.patch(`${shimsPath}/spin`, { spec: { runtimeClass: { labels: null, overhead: null, tolerations: null } } });
  // THEN the RuntimeClass loses them, though another manager held them
  const after = await eventually(async () => {
    const r = await admin.get(rcPath);
    return r.metadata.labels?.team === undefined && r.overhead === undefined && r.scheduling.tolerations === undefined ? r : undefined;
  }, 30_000, diagnostics);
  expect(after.metadata.annotations['example.com/owner']).toBe('platform');
  expect(after.scheduling.nodeSelector).toEqual({ [KEY('spin')]: 'spin' });

  // WHEN it is deleted, as a prune by a tool that does not respect owner references would
  await admin.request('DELETE', rcPath);
  // THEN the controller creates it again at once, owned by the Shim
  const back = await eventually(async () => admin.get(rcPath).catch(() => undefined), 15_000, diagnostics);
  expect(back.handler).toBe('spin');
  expect(back.metadata.ownerReferences[0]).toMatchObject({ kind: 'Shim', name: 'spin' });
  expect(back.metadata.managedFields.map((f: any) => f.manager)).toEqual(['rcm-controller']);
  expect(back.scheduling.nodeSelector).toEqual({ [KEY('spin')]: 'spin' });
});

test('item 10: a revision change mid-rollout waits for the old revision\'s running installs, then rolls the newest', async () => {
  // GIVEN v2 rolling out with installs held
  verdict = () => 'hold';
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: artifact('spin-v2.tgz', 'b') } });
  const v2 = await eventually(async () => {
    const jobs = (await jobsOf('spin', 'install')).filter((j: any) => j.spec.template.spec.containers[0].env.some((e: any) => e.value.endsWith('spin-v2.tgz')));
    return jobs.length === 2 ? jobs : undefined;
  }, 30_000, diagnostics);
  // WHEN v3 arrives mid-rollout
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: artifact('spin-v3.tgz', 'c') } });
  await sleep(3000);
  // THEN v2's Jobs are neither deleted nor joined by v3 Jobs beyond maxUpdate
  const now = await jobsOf('spin', 'install');
  expect(now.map((j: any) => j.metadata.name).sort()).toEqual(v2.map((j: any) => j.metadata.name).sort());
  // and the nodes serve the previous revision meanwhile
  for (const n of WASM) expect((await nodeLabels(n))[KEY('spin')]).toBe('spin');
  verdict = () => 'succeed';
  const shim = await eventually(ready('spin', 3), 60_000, diagnostics);
  const record = JSON.parse((await admin.get('/api/v1/nodes/n1')).metadata.annotations[ShimNodeLabels.installedKey('spin')]);
  expect(record[0]).toMatchObject({ revision: shim.status.revision, sha256: 'c'.repeat(64) });
  // The bound is the rollout's (maxUpdate 2); the peak the stand-in sees (it samples every
  // 0.3 s) may be lower when a loaded machine lets one Job finish before the next starts.
  expect(peaks.get('spin/install')).toBeGreaterThanOrEqual(1);
  expect(peaks.get('spin/install')).toBeLessThanOrEqual(2);
});

test('item 1: a handler change under rolling never selects a node without the new handler, and removes the old one', async () => {
  // GIVEN installs of the new handler that wait
  verdict = f => (f.operation === 'install' && f.handler === 'spin2' ? 'hold' : 'succeed');
  peaks.clear();
  // WHEN the handler changes
  await admin.patch(`${shimsPath}/spin`, { spec: { runtimeClass: { handler: 'spin2' } } });
  // THEN the RuntimeClass is replaced at once, selecting the new handler's nodes: none yet
  await eventually(async () => (await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin')).handler === 'spin2', 30_000, diagnostics);
  await eventually(async () => (await jobsOf('spin', 'install')).length === 2, 30_000, diagnostics);
  await sleep(2000);
  for (const n of WASM) expect((await nodeLabels(n))[KEY('spin')]).not.toBe('spin2');
  // WHEN the installs finish THEN every node ends with spin2 only (the stand-in checked I1 on every poll)
  verdict = () => 'succeed';
  await eventually(ready('spin', 3), 60_000, diagnostics);
  await eventually(async () => handlersOn(WASM).every(h => h === 'spin2'), 30_000, diagnostics);
  expect(finishedPods.filter(p => p.operation === 'uninstall' && p.handler === 'spin' && p.shim === 'spin').map(p => p.node).sort()).toEqual(WASM);
});

test('createRuntimeClass: an app that synthesizes its RuntimeClass applies a handler change the second time, once the controller replaced it (README)', async () => {
  const synthesized = (handler: string) => {
    const chart = Testing.chart();
    new ShimConstruct(chart, 'spin', { handler, runtimeClassName: 'wasmtime-spin', location: 'https://example.com/spin-v4.tgz', createRuntimeClass: true });
    return Yaml.stringify(Testing.synth(chart).find(o => o.kind === 'RuntimeClass'));
  };
  const gitops = (handler: string) => cp.kubectl(['apply', '--server-side', '--field-manager=argocd', '-f', '-'], { input: synthesized(handler) });
  // GIVEN the app's RuntimeClass applied over the controller's
  gitops('spin2');
  verdict = () => 'succeed';
  // WHEN the app's handler changes: the apply is refused on the RuntimeClass (the Shim changes, as the same apply would change it)
  expect(() => gitops('spin3')).toThrow(/handler/);
  await admin.patch(`${shimsPath}/spin`, { spec: { runtimeClass: { handler: 'spin3' } } });
  // THEN once the controller has replaced the RuntimeClass, the same apply goes through
  await eventually(async () => (await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin')).handler === 'spin3', 30_000, diagnostics);
  expect(() => gitops('spin3')).not.toThrow();
  await eventually(ready('spin', 3), 60_000, diagnostics);
  // AND the app's manager and the controller share it again
  const rc = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin');
  expect(rc.metadata.managedFields.map((f: any) => f.manager).sort()).toEqual(['argocd', 'rcm-controller']);
  // (back to spin2, which the scenarios below expect; the controller replaces the RuntimeClass again)
  await admin.patch(`${shimsPath}/spin`, { spec: { runtimeClass: { handler: 'spin2' } } });
  await eventually(async () => (await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin')).handler === 'spin2', 30_000, diagnostics);
  await eventually(ready('spin', 3), 60_000, diagnostics);
  await eventually(async () => handlersOn(WASM).every(h => h === 'spin2'), 30_000, diagnostics);
});

test('item 2: a failed new revision under recreate leaves every node schedulable on the previous one', async () => {
  verdict = f => (f.location?.includes('bad') ? 'fail' : 'succeed');
  const before = (await getShim()).status.revision;
  await admin.patch(`${shimsPath}/spin`, { spec: { rolloutStrategy: { type: 'recreate', rolling: null }, fetchStrategy: artifact('bad.tgz', 'd') } });
  const shim = await eventually(async () => {
    const s = await getShim();
    return condition(s, 'Degraded')?.status === 'True' && s.status.nodesFailed === 3 ? s : undefined;
  }, 90_000, diagnostics);
  expect(condition(shim, 'Degraded')).toMatchObject({ reason: 'InstallFailed', message: expect.stringMatching(/^node n1: ChecksumMismatch: sha256 differs/) });
  expect(condition(shim, 'Progressing')).toMatchObject({ status: 'False', reason: 'RolloutStopped' });
  expectArgoHealth(shim, 'Degraded', 'install-failed');
  expect(shim.status.failedNodes[0]).toMatchObject({ name: 'n1', operation: 'install', attempts: 2 });
  // every node keeps serving spin2 at the previous revision, and the RuntimeClass selects all three
  const rc = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin');
  for (const n of WASM) {
    expect(selects(rc.scheduling.nodeSelector, await nodeLabels(n))).toBe(true);
    expect((await nodeLabels(n))[ShimNodeLabels.stateKey('spin')]).toBe('failed');
    const record = JSON.parse((await admin.get(`/api/v1/nodes/${n}`)).metadata.annotations[ShimNodeLabels.installedKey('spin')]);
    expect(record[0].revision).toBe(before);
  }
  // fixing the spec recovers
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: artifact('spin-v4.tgz', 'e') } });
  await eventually(ready('spin', 3), 60_000, diagnostics);
  expect((await getShim()).status.nodesFailed).toBe(0);
});

test('item 8: a flaky download is retried with backoff and succeeds, without a human', async () => {
  // GIVEN downloads that fail once per node; the second attempts wait until the test has looked
  let release = false;
  verdict = f => (!f.location?.includes('flaky') ? 'succeed' : f.attempt === 1 ? 'fail' : release ? 'succeed' : 'hold');
  failure = { exitCode: 3, reason: 'DownloadFailed', message: 'connection reset by peer' };
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: artifact('flaky.tgz', 'f') } });
  const retrying = await eventually(async () => {
    const s = await getShim();
    return s.status.nodesRetrying > 0 ? s : undefined;
  }, 30_000, diagnostics);
  expect(retrying.status.failedNodes[0]).toMatchObject({ operation: 'install', reason: 'DownloadFailed', attempts: 1 });
  expect(condition(retrying, 'Degraded').status).toBe('False'); // a transient failure is not yet a degradation
  expectArgoHealth(retrying, 'Progressing', 'retrying');
  release = true;
  const shim = await eventually(ready('spin', 3), 60_000, diagnostics);
  expect(shim.status).toMatchObject({ nodesFailed: 0, nodesRetrying: 0 });
  expect(finishedPods.filter(p => p.location?.includes('flaky')).map(p => `${p.node}:${p.attempt}:${p.outcome}`).sort())
    .toEqual(['n1:1:fail', 'n1:2:succeed', 'n2:1:fail', 'n2:2:succeed', 'n3:1:fail', 'n3:2:succeed']);
  failure = { exitCode: 3, reason: 'ChecksumMismatch', message: 'sha256 differs' };
});

test('item 8: a NotReady node does not hold the rollout; it is installed when it comes back', async () => {
  // GIVEN rolling one at a time, and n1's kubelet that will not start its pod
  await admin.patch(`${shimsPath}/spin`, { spec: { rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } } });
  verdict = f => (f.node === 'n1' ? 'unstarted' : 'succeed');
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: artifact('spin-v5.tgz', '1') } });
  await eventually(async () => (await jobsOf('spin', 'install')).some((j: any) => j.metadata.annotations['runtime.spinkube.dev/node'] === 'n1'), 30_000, diagnostics);
  // WHEN n1 goes NotReady
  await setNodeReady('n1', false);
  // THEN its unstarted Job is dropped and the other nodes complete, n1 not counted as failed
  const waiting = await eventually(async () => {
    const s = await getShim();
    return s.status.nodesReady === 2 ? s : undefined;
  }, 60_000, diagnostics);
  expect(waiting.status.nodesFailed).toBe(0);
  expect(condition(waiting, 'Progressing').message).toMatch(/1 node\(s\) not Ready or cordoned \(n1\)/);
  expectArgoHealth(waiting, 'Progressing', 'node-not-ready');
  expect((await jobsOf('spin')).filter((j: any) => j.metadata.annotations['runtime.spinkube.dev/node'] === 'n1')).toEqual([]);
  // n1 still serves its previous revision meanwhile
  expect((await nodeLabels('n1'))[KEY('spin')]).toBe('spin2');
  // WHEN it is back THEN it gets the revision
  verdict = () => 'succeed';
  await setNodeReady('n1', true);
  await eventually(ready('spin', 3), 60_000, diagnostics);
});

test('a new node joining gets the shim', async () => {
  await addNode('n5', { wasm: 'true' });
  await eventually(ready('spin', 4), 60_000, diagnostics);
  expect([...hosts.get('n5')!]).toEqual(['spin2']);
});

test('item 4: a selector flap waits for the running uninstall before installing again', async () => {
  verdict = f => (f.operation === 'uninstall' && f.node === 'n5' ? 'hold' : 'succeed');
  await admin.patch('/api/v1/nodes/n5', { metadata: { labels: { wasm: null } } });
  await eventually(async () => (await jobsOf('spin', 'uninstall')).length === 1, 30_000, diagnostics);
  // the gate went before the uninstall started
  expect((await nodeLabels('n5'))[KEY('spin')]).toBeUndefined();
  // WHEN the label comes back while the uninstall runs
  await admin.patch('/api/v1/nodes/n5', { metadata: { labels: { wasm: 'true' } } });
  await sleep(3000);
  // THEN no install starts beside it (the stand-in checks I3 on every poll)
  expect(await jobsOf('spin', 'install')).toEqual([]);
  verdict = () => 'succeed';
  await eventually(ready('spin', 4), 60_000, diagnostics);
  expect([...hosts.get('n5')!]).toEqual(['spin2']);
});

test('killed mid-rollout, a second replica takes the lease over and converges', async () => {
  await startController('c2');
  verdict = () => 'hold';
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: artifact('spin-v6.tgz', '2') } });
  await eventually(async () => (await jobsOf('spin', 'install')).length === 1, 30_000, diagnostics);
  const lease = await admin.get(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/rcm-controller`);
  expect(lease.spec.holderIdentity).toBe('c1');
  controllers[0].child.kill('SIGKILL');
  verdict = () => 'succeed';
  await eventually(async () => (await admin.get(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/rcm-controller`)).spec.holderIdentity === 'c2', 30_000, diagnostics);
  await eventually(ready('spin', 4), 60_000, diagnostics);
  expect(finishedPods.filter(p => p.location?.includes('spin-v6')).map(p => p.node).sort()).toEqual(['n1', 'n2', 'n3', 'n5']); // no duplicate install
});

test('items 3, 5, 6: a controller that may not list nodes holds the finalizer; then a foreground deletion uninstalls one node at a time, none killed', async () => {
  // GIVEN the leader gone and a replacement that may not list nodes
  controllers[1].child.kill('SIGKILL');
  const role = await admin.get('/apis/rbac.authorization.k8s.io/v1/clusterroles/rcm-controller');
  const original = { ...role, metadata: { name: role.metadata.name, labels: role.metadata.labels, annotations: role.metadata.annotations } };
  const crippled = { ...original, rules: role.rules.map((r: any) => (r.resources.includes('nodes') ? { ...r, verbs: ['get', 'patch'] } : r)) };
  await admin.request('PUT', '/apis/rbac.authorization.k8s.io/v1/clusterroles/rcm-controller', crippled);
  await startController('c3');
  await eventually(async () => (await admin.get(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/rcm-controller`)).spec.holderIdentity === 'c3', 30_000, diagnostics);
  peaks.clear();
  verdict = () => 'succeed';
  // WHEN the Shim is deleted in the foreground (as Argo CD prunes may)
  cp.kubectl(['delete', 'shim', 'spin', '--cascade=foreground', '--wait=false']);
  await sleep(6000);
  // THEN nothing is released: no node list, no decision
  const held = await getShim();
  expect(held.metadata.finalizers).toContain('runtime.spinkube.dev/finalizer');
  expectArgoHealth(held, 'Progressing', 'deleting');
  expect(await jobsOf('spin')).toEqual([]);
  expect(handlersOn(['n1', 'n2', 'n3', 'n5'])).toEqual(['spin2', 'spin2', 'spin2', 'spin2']);
  expect(fs.readFileSync(controllers[2].log, 'utf8')).toMatch(/watch failed, restarting.*nodes/);
  // WHEN it may list nodes again
  await admin.request('PUT', '/apis/rbac.authorization.k8s.io/v1/clusterroles/rcm-controller', original);
  // THEN every node is uninstalled, one at a time, the Shim goes and its RuntimeClass with it
  await eventually(() => gone(`${shimsPath}/spin`), 120_000, diagnostics);
  expect(peaks.get('spin/uninstall')).toBeGreaterThanOrEqual(1);
  expect(peaks.get('spin/uninstall')).toBeLessThanOrEqual(1); // maxUpdate 1
  expect(handlersOn(['n1', 'n2', 'n3', 'n4', 'n5'])).toEqual(['', '', '', '', '']);
  expect(await gone('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin')).toBe(true);
  for (const n of ['n1', 'n2', 'n3', 'n5']) {
    const node = await admin.get(`/api/v1/nodes/${n}`);
    expect(Object.keys({ ...node.metadata.labels, ...node.metadata.annotations }).filter(k => k.startsWith('spin.shim.runtime'))).toEqual([]);
  }
  expect(await jobsOf('spin')).toEqual([]);
});

test('item 4: a Shim renamed by create-plus-delete waits on each node until the old one has removed the handler', async () => {
  const spec = { nodeSelector: { wasm: 'true' }, fetchStrategy: artifact('ren.tgz', '3'), runtimeClass: { name: 'ren-old', handler: 'ren' } };
  await createShim('old', spec);
  await eventually(ready('old', 4), 60_000, diagnostics);
  // WHEN the old one is deleted and the new one created at once (uninstalls held a while)
  const holdUntil = Date.now() + 4000;
  verdict = f => (f.operation === 'uninstall' && Date.now() < holdUntil ? 'hold' : 'succeed');
  cp.kubectl(['delete', 'shim', 'old', '--wait=false']);
  await createShim('new', { ...spec, runtimeClass: { name: 'ren-new', handler: 'ren' } });
  await sleep(2000);
  // THEN the new one installs nowhere while the old one still has the handler there
  expect(await jobsOf('new', 'install')).toEqual([]);
  const waiting = await getShim('new');
  expect(condition(waiting, 'Progressing').message).toMatch(/wait for another Shim to release the handler/);
  expectArgoHealth(waiting, 'Progressing', 'handler-held-by-another-shim');
  verdict = () => 'succeed';
  await eventually(() => gone(`${shimsPath}/old`), 60_000, diagnostics);
  await eventually(ready('new', 4), 60_000, diagnostics);
  expect(handlersOn(['n1', 'n2', 'n3', 'n5'])).toEqual(['ren', 'ren', 'ren', 'ren']);
});

test('a Shim in the upstream runtime-class-manager\'s current shape applies unchanged and installs the x86_64 artifact on amd64 nodes', async () => {
  // GIVEN a manifest as upstream publishes them now: no fetchStrategy.type, platforms beside
  // anonHttp with x86_64/aarch64, rolloutStrategy with an integer maxUpdate, containerdRuntimeOptions
  const manifest = [
    'apiVersion: runtime.spinkube.dev/v1alpha1',
    'kind: Shim',
    'metadata:',
    '  name: upstream-spin',
    'spec:',
    '  nodeSelector:',
    '    wasm: "true"',
    '  fetchStrategy:',
    '    anonHttp:',
    '      location: https://example.com/fallback.tar.gz',
    '    platforms:',
    '      - os: linux',
    '        arch: x86_64',
    '        location: https://example.com/containerd-shim-spin-v2-linux-x86_64.tar.gz',
    `        sha256: "${'5'.repeat(64)}"`,
    '      - os: linux',
    '        arch: aarch64',
    '        location: https://example.com/containerd-shim-spin-v2-linux-aarch64.tar.gz',
    '  runtimeClass:',
    '    name: upstream-spin',
    '    handler: upstream-spin',
    '  rolloutStrategy:',
    '    type: rolling',
    '    rolling:',
    '      maxUpdate: 2',
    '  containerdRuntimeOptions:',
    '    SystemdCgroup: "true"',
    '',
  ].join('\n');
  cp.kubectl(['apply', '--server-side', '-f', '-'], { input: manifest });
  // THEN it is accepted unchanged and every amd64 node gets the x86_64 artifact
  await eventually(ready('upstream-spin', 4), 60_000, diagnostics);
  const installs = finishedPods.filter(p => p.shim === 'upstream-spin' && p.operation === 'install');
  expect([...new Set(installs.map(p => p.location))]).toEqual(['https://example.com/containerd-shim-spin-v2-linux-x86_64.tar.gz']);
  expect(peaks.get('upstream-spin/install')).toBeLessThanOrEqual(2);
  const stored = await getShim('upstream-spin');
  expect(stored.spec.fetchStrategy.type).toBeUndefined();
  expect(stored.spec.fetchStrategy.platforms.map((p: any) => p.arch)).toEqual(['x86_64', 'aarch64']);
  // the leader's metrics: its installs timed, and once the Shim is gone, no series of it left
  const leader = controllers.find(c => c.name === 'c3')!;
  const scrape = async () => (await fetch(`http://127.0.0.1:${leader.metricsPort}/metrics`)).text();
  const sample = (text: string, series: string) => Number(text.split('\n').find(l => l.startsWith(`${series} `))?.split(' ')[1] ?? NaN);
  const during = await scrape();
  expect(during).toMatch(/^rcm_rollout_nodes\{shim="upstream-spin",state="ready"\} 4$/m);
  expect(sample(during, 'rcm_node_operation_duration_seconds_count{operation="install",outcome="success"}')).toBeGreaterThanOrEqual(4);
  expect(sample(during, 'rcm_reconcile_duration_seconds_count{result="success"}')).toBeGreaterThan(0);
  await admin.request('DELETE', `${shimsPath}/upstream-spin`);
  await eventually(() => gone(`${shimsPath}/upstream-spin`), 60_000, diagnostics);
  await eventually(async () => !(await scrape()).includes('shim="upstream-spin"'), 15_000, diagnostics);
});

test('item 7: a RuntimeClass someone else made is reported and never touched, not even on deletion', async () => {
  await admin.request('POST', '/apis/node.k8s.io/v1/runtimeclasses', { apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'kata' }, handler: 'kata-qemu', scheduling: { nodeSelector: { 'katacontainers.io/kata-runtime': 'true' } } });
  const before = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/kata');
  await createShim('kata', { nodeSelector: { wasm: 'true' }, fetchStrategy: artifact('kata.tgz', '4'), runtimeClass: { name: 'kata', handler: 'kata' } });
  const shim = await eventually(async () => {
    const s = await getShim('kata');
    return condition(s, 'Degraded')?.reason === 'RuntimeClassConflict' ? s : undefined;
  }, 30_000, diagnostics);
  expect(condition(shim, 'Degraded').message).toMatch(/RuntimeClass "kata" exists and belongs to no Shim/);
  expectArgoHealth(shim, 'Degraded', 'runtime-class-conflict');
  const events = (await admin.get('/api/v1/namespaces/default/events')).items.filter((e: any) => e.involvedObject.name === 'kata' && e.reason === 'RuntimeClassConflict');
  expect(events.length).toBeGreaterThanOrEqual(1);
  await admin.request('DELETE', `${shimsPath}/kata`);
  await eventually(() => gone(`${shimsPath}/kata`), 60_000, diagnostics);
  const after = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/kata');
  expect(after.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
});

test('an invalid Shim (no artifact for the nodes\' platform) is Degraded for Argo CD', async () => {
  await createShim('armonly', {
    nodeSelector: { wasm: 'true' },
    fetchStrategy: { platforms: [{ os: 'linux', arch: 'arm64', location: 'https://example.com/arm64.tgz' }] },
    runtimeClass: { name: 'armonly', handler: 'armonly' },
  });
  const shim = await eventually(async () => {
    const s = await getShim('armonly');
    return condition(s, 'Degraded')?.reason === 'InvalidShim' ? s : undefined;
  }, 30_000, diagnostics);
  expectArgoHealth(shim, 'Degraded', 'invalid-shim');
  await admin.request('DELETE', `${shimsPath}/armonly`);
  await eventually(() => gone(`${shimsPath}/armonly`), 60_000, diagnostics);
});

/** kubectl without blocking this process (the kubelet stand-in runs in it). */
function kubectlAsync(args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(kubeBinary('kubectl'), ['--kubeconfig', cp.kubeconfig, ...args], { timeout: 180_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`kubectl ${args.join(' ')}: ${error.message}\n${stderr}`));
      else resolve(stdout);
    });
    if (input !== undefined) child.stdin!.end(input);
  });
}

test('teardown as docs/users/day-two.md says: Shims first (the controller uninstalls them), then the rest', async () => {
  // GIVEN a Shim applied from synthesized YAML and installed on the wasm nodes
  verdict = () => 'succeed';
  const chart = Testing.chart();
  new ShimConstruct(chart, 'bye', { handler: 'bye', location: 'https://example.com/bye.tgz', nodeSelector: { wasm: 'true' } });
  await kubectlAsync(['apply', '--server-side', '-f', '-'], Yaml.stringify(...Testing.synth(chart)));
  await eventually(ready('bye', 4), 60_000, diagnostics);
  const before = await admin.get(shimsPath);
  expect(before.items.map((s: any) => s.metadata.name).sort()).toEqual(['bye', 'new']);
  // WHEN step 1: every Shim is deleted (kubectl delete waits for this by default)
  await kubectlAsync(['delete', 'shims', '--all', '--wait=false']);
  // THEN the controller uninstalls everywhere and releases the finalizers
  await eventually(async () => (await admin.get(shimsPath)).items.length === 0, 120_000, diagnostics);
  expect(handlersOn(['n1', 'n2', 'n3', 'n4', 'n5'])).toEqual(['', '', '', '', '']);
  for (const rc of ['bye', 'ren-new']) expect(await gone(`/apis/node.k8s.io/v1/runtimeclasses/${rc}`)).toBe(true);
  for (const n of ['n1', 'n2', 'n3', 'n4', 'n5']) {
    const node = await admin.get(`/api/v1/nodes/${n}`);
    expect(Object.keys({ ...node.metadata.labels, ...node.metadata.annotations }).filter(k => k.includes('.shim.runtime.spinkube.dev/'))).toEqual([]);
  }
  // WHEN step 2: the rest of the manifest goes (here the manager's objects; the controller process stands in for the Deployment)
  await kubectlAsync(['delete', '-f', '-', '--wait=false'], managerYaml);
  // THEN the CRD is gone with nothing left hanging on it
  await eventually(() => gone('/apis/apiextensions.k8s.io/v1/customresourcedefinitions/shims.runtime.spinkube.dev'), 60_000, diagnostics);
  expect(await gone('/apis/rbac.authorization.k8s.io/v1/clusterroles/rcm-controller')).toBe(true);
}, 300_000);
