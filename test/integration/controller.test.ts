import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Testing, Yaml } from 'cdk8s';
import { buildSync } from 'esbuild';
import { RuntimeClassManager, ShimConstruct, ShimNodeLabels } from '../../src';
import { ControlPlane, freePort, startControlPlane } from '../support/control-plane';
import { eventually, Rest } from '../support/rest';

// rcm-controller against a real etcd + kube-apiserver + kube-controller-manager (Job
// controller, garbage collector, token controller), running with the RBAC the construct
// synthesizes. The test plays the kubelet: it finishes installer pods with the exit code and
// termination message the node installer would write.

const NS = 'runtime-class-manager';
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-controller-'));
const CONTROLLER = path.join(work, 'rcm-controller.js');
const KEY = ShimNodeLabels.stateKey('spin');
let cp: ControlPlane;
let admin: Rest;
let saKubeconfig: string;
const controllers: { name: string; child: ChildProcess; log: string }[] = [];
let kubelet: NodeJS.Timeout | undefined;

type Verdict = 'hold' | 'succeed' | 'fail';
let verdict: (pod: { node: string; operation: string; location?: string }) => Verdict = () => 'succeed';

async function playKubelet(): Promise<void> {
  const pods = (await admin.get(`/api/v1/namespaces/${NS}/pods`)).items;
  for (const pod of pods) {
    if (['Succeeded', 'Failed'].includes(pod.status?.phase) || !pod.spec.nodeName) continue;
    const container = pod.spec.containers[0];
    const env = Object.fromEntries((container.env ?? []).map((e: any) => [e.name, e.value]));
    const v = verdict({ node: pod.spec.nodeName, operation: container.args[0], location: env.RCM_LOCATION });
    if (v === 'hold') continue;
    const now = new Date().toISOString();
    const result = v === 'succeed'
      ? { outcome: container.args[0] === 'install' ? 'installed' : 'uninstalled', exitCode: 0, message: 'done', handler: env.RCM_HANDLER }
      : { outcome: 'failed', exitCode: 3, reason: 'ChecksumMismatch', message: `sha256 of ${env.RCM_LOCATION} is 00, expected ${env.RCM_SHA256 ?? '?'}` };
    await admin.request('PATCH', `/api/v1/namespaces/${NS}/pods/${pod.metadata.name}/status`, {
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

async function startController(name: string): Promise<void> {
  const log = path.join(work, `${name}.log`);
  const child = spawn(process.execPath, [CONTROLLER,
    `--kubeconfig=${saKubeconfig}`, `--namespace=${NS}`, '--installer-image=docker.io/library/rcm-node-installer:test',
    '--installer-env=NO_PROXY=127.0.0.1', '--installer-env=RCM_INSTALL_ROOT=/var/lib/rcm',
    '--leader-elect=true', '--lease-duration-seconds=4', `--identity=${name}`, '--resync-seconds=5', '--log-format=text',
    `--metrics-bind-address=127.0.0.1:${await freePort()}`, `--health-probe-bind-address=127.0.0.1:${await freePort()}`], { stdio: ['ignore', fs.openSync(log, 'a'), fs.openSync(log, 'a')] });
  controllers.push({ name, child, log });
}

async function diagnostics(): Promise<string> {
  const shims = await admin.get('/apis/runtime.spinkube.dev/v1alpha1/shims').catch(() => ({ items: [] }));
  const jobs = await admin.get(`/apis/batch/v1/namespaces/${NS}/jobs`).catch(() => ({ items: [] }));
  const nodes = await admin.get('/api/v1/nodes').catch(() => ({ items: [] }));
  return [
    'shims: ' + JSON.stringify(shims.items.map((s: any) => ({ name: s.metadata.name, status: s.status, finalizers: s.metadata.finalizers }))),
    'jobs: ' + JSON.stringify(jobs.items.map((j: any) => ({ name: j.metadata.name, node: j.metadata.annotations?.['runtime.spinkube.dev/node'], op: j.metadata.annotations?.['runtime.spinkube.dev/operation'], status: j.status }))),
    'node labels: ' + JSON.stringify(nodes.items.map((n: any) => [n.metadata.name, n.metadata.labels?.[KEY]])),
    ...controllers.map(c => `--- ${c.name} ---\n${fs.readFileSync(c.log, 'utf8').split('\n').slice(-25).join('\n')}`),
    cp.logTails(10),
  ].join('\n');
}

const shimsPath = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const getShim = () => admin.get(`${shimsPath}/spin`);
const jobsOf = async (operation?: string) => (await admin.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items
  .filter((j: any) => !operation || j.metadata.annotations['runtime.spinkube.dev/operation'] === operation);
const nodeState = async (name: string) => (await admin.get(`/api/v1/nodes/${name}`)).metadata.labels?.[KEY];
const condition = (shim: any, type: string) => shim.status?.conditions?.find((c: any) => c.type === type);

beforeAll(async () => {
  buildSync({ entryPoints: [path.join(__dirname, '..', '..', 'src', 'runtime', 'main.ts')], bundle: true, platform: 'node', target: 'node20', outfile: CONTROLLER, logLevel: 'error' });
  cp = await startControlPlane({ controllerManager: true, controllers: '*,-nodeipam,-nodelifecycle' });
  admin = new Rest(cp.server, cp.adminToken, cp.caFile);

  // The manager's objects as synthesized (the Deployment aside: the test runs the controller).
  const chart = Testing.chart();
  new RuntimeClassManager(chart, 'Manager');
  const objects = Testing.synth(chart).filter(o => o.kind !== 'Deployment');
  cp.kubectl(['apply', '-f', '-'], { input: Yaml.stringify(...objects) });
  cp.kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);

  // A token for the controller's ServiceAccount, from the token controller.
  const token = await eventually(async () => {
    const sa = await admin.get(`/api/v1/namespaces/${NS}/serviceaccounts/rcm-controller`);
    const secretName = sa.secrets?.[0]?.name;
    if (!secretName) return undefined;
    const secret = await admin.get(`/api/v1/namespaces/${NS}/secrets/${secretName}`);
    return secret.data?.token ? Buffer.from(secret.data.token, 'base64').toString() : undefined;
  }, 60_000, () => cp.logTails(20));
  saKubeconfig = path.join(work, 'controller.kubeconfig');
  fs.writeFileSync(saKubeconfig, fs.readFileSync(cp.kubeconfig, 'utf8').replace(/token: "[^"]*"/, `token: "${token}"`));

  for (const [name, extra] of [['n1', { wasm: 'true' }], ['n2', { wasm: 'true' }], ['n3', { wasm: 'true' }], ['n4', {}]] as const) {
    await admin.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', ...extra } } });
  }
  const tick = () => {
    kubelet = setTimeout(() => void playKubelet().finally(() => { if (kubelet) tick(); }), 300);
  };
  tick();
  await startController('c1');
}, 240_000);

afterAll(async () => {
  if (kubelet) clearTimeout(kubelet);
  kubelet = undefined;
  for (const c of controllers) c.child.kill('SIGKILL');
  await cp?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

const SPEC = {
  nodeSelector: { wasm: 'true' },
  fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://example.com/spin-v1.tgz', sha256: 'a'.repeat(64) } },
  runtimeClass: { name: 'wasmtime-spin', handler: 'spin' },
  rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } },
};

test('a rolling install, batch by batch, ends Ready with labelled nodes and a RuntimeClass', async () => {
  // GIVEN the RuntimeClass already applied by GitOps, as ShimConstruct synthesizes it
  const chart = Testing.chart();
  new ShimConstruct(chart, 'spin', { handler: 'spin', runtimeClassName: 'wasmtime-spin', location: 'https://example.com/spin-v1.tgz' });
  const synthesizedRc = Testing.synth(chart).find(o => o.kind === 'RuntimeClass');
  cp.kubectl(['apply', '--server-side', '--field-manager=argocd', '-f', '-'], { input: Yaml.stringify(synthesizedRc) });
  // AND installer pods that do not finish yet
  verdict = () => 'hold';
  // WHEN a Shim is created
  await admin.request('POST', shimsPath, { apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', metadata: { name: 'spin' }, spec: SPEC });

  // THEN two installs start (maxUpdate 2), and no third while they run
  await eventually(async () => (await jobsOf('install')).length === 2, 30_000, diagnostics);
  await new Promise(r => setTimeout(r, 2000));
  expect(await jobsOf('install')).toHaveLength(2);
  const first = (await jobsOf('install')).map((j: any) => j.metadata.annotations['runtime.spinkube.dev/node']).sort();
  expect(first).toEqual(['n1', 'n2']);
  expect(await nodeState('n1')).toBe('pending');
  const job = (await jobsOf('install'))[0];
  expect(job.spec.template.spec).toMatchObject({ hostPID: true, hostNetwork: true, automountServiceAccountToken: false, restartPolicy: 'Never' });
  expect(job.spec.template.spec.containers[0].securityContext).toEqual({ privileged: true });
  expect(job.spec.template.spec.containers[0].env).toEqual(expect.arrayContaining([
    { name: 'NO_PROXY', value: '127.0.0.1' }, { name: 'RCM_INSTALL_ROOT', value: '/var/lib/rcm' }, { name: 'RCM_HANDLER', value: 'spin' },
  ]));
  expect(job.metadata.ownerReferences[0]).toMatchObject({ kind: 'Shim', name: 'spin' });

  // WHEN they succeed THEN the third node follows and the Shim becomes Ready
  verdict = () => 'succeed';
  const shim = await eventually(async () => {
    const s = await getShim();
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 3 ? s : undefined;
  }, 60_000, diagnostics);
  expect(shim.status).toMatchObject({ nodes: 3, nodesReady: 3, nodesFailed: 0, observedGeneration: shim.metadata.generation });
  expect(shim.metadata.finalizers).toContain('runtime.spinkube.dev/finalizer');
  for (const n of ['n1', 'n2', 'n3']) expect(await nodeState(n)).toBe('provisioned');
  expect(await nodeState('n4')).toBeUndefined();
  const rc = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin');
  expect(rc.handler).toBe('spin');
  expect(rc.scheduling.nodeSelector).toEqual({ [KEY]: 'provisioned' });
  expect(rc.metadata.ownerReferences[0]).toMatchObject({ kind: 'Shim', name: 'spin', uid: shim.metadata.uid });
  // adopted, not fought over: both managers keep their fields, the GitOps labels stay
  expect(rc.metadata.managedFields.map((f: any) => f.manager).sort()).toEqual(['argocd', 'rcm-controller']);
  expect(rc.metadata.labels).toEqual(synthesizedRc.metadata.labels);
  const events = (await admin.get('/api/v1/namespaces/default/events')).items.filter((e: any) => e.involvedObject.name === 'spin');
  expect(events.filter((e: any) => e.reason === 'Installed')).toHaveLength(3);
});

test('a drifted RuntimeClass is put back in shape', async () => {
  await admin.patch('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin', { scheduling: { nodeSelector: { [KEY]: 'provisioned', extra: 'x' } } });
  await eventually(async () => {
    const rc = await admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin');
    return JSON.stringify(rc.scheduling.nodeSelector) === JSON.stringify({ [KEY]: 'provisioned' });
  }, 30_000, diagnostics);
});

test('a spec change rolls out a new revision over the provisioned nodes', async () => {
  // GIVEN installs that wait
  verdict = () => 'hold';
  const before = (await getShim()).status.revision;
  // WHEN the artifact changes
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: { anonHttp: { location: 'https://example.com/spin-v2.tgz', sha256: 'b'.repeat(64) } } } });
  // THEN a new revision rolls out under the same strategy, the nodes staying provisioned meanwhile
  const running = await eventually(async () => {
    const jobs = (await jobsOf('install')).filter((j: any) => j.metadata.annotations['runtime.spinkube.dev/revision'] !== before);
    return jobs.length === 2 ? jobs : undefined;
  }, 30_000, diagnostics);
  expect(running[0].spec.template.spec.containers[0].env).toEqual(expect.arrayContaining([
    { name: 'RCM_LOCATION', value: 'https://example.com/spin-v2.tgz' }, { name: 'RCM_SHA256', value: 'b'.repeat(64) },
  ]));
  for (const n of ['n1', 'n2', 'n3']) expect(await nodeState(n)).toBe('provisioned');
  verdict = () => 'succeed';
  const shim = await eventually(async () => {
    const s = await getShim();
    return s.status.revision !== before && s.status.nodesReady === 3 && condition(s, 'Ready').status === 'True' ? s : undefined;
  }, 60_000, diagnostics);
  const node = await admin.get('/api/v1/nodes/n3');
  expect(node.metadata.annotations[ShimNodeLabels.revisionKey('spin')]).toBe(shim.status.revision);
  // Successful Jobs are cleaned up once the node label records them.
  await eventually(async () => (await jobsOf('install')).length === 0, 30_000, diagnostics);
});

test('a failed install stops the rollout and reports Degraded with the node and the reason', async () => {
  verdict = ({ location }) => (location?.includes('bad') ? 'fail' : 'succeed');
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: { anonHttp: { location: 'https://example.com/bad.tgz', sha256: 'c'.repeat(64) } } } });
  const shim = await eventually(async () => {
    const s = await getShim();
    return condition(s, 'Degraded')?.status === 'True' && s.status.nodesFailed === 2 ? s : undefined;
  }, 90_000, diagnostics);
  expect(condition(shim, 'Degraded').message).toMatch(/^node n1: ChecksumMismatch: sha256 of https:\/\/example.com\/bad.tgz is 00/);
  expect(shim.status.failedNodes.map((f: any) => f.name)).toEqual(['n1', 'n2']);
  expect(condition(shim, 'Progressing')).toMatchObject({ status: 'False', reason: 'RolloutStopped' });
  // the third node was never attempted with the bad revision
  const badJobs = (await jobsOf('install')).filter((j: any) => j.metadata.annotations['runtime.spinkube.dev/revision'] === shim.status.revision);
  expect(badJobs.map((j: any) => j.metadata.annotations['runtime.spinkube.dev/node']).sort()).toEqual(['n1', 'n2']);
  // fixing the spec recovers
  verdict = () => 'succeed';
  await admin.patch(`${shimsPath}/spin`, { spec: { fetchStrategy: { anonHttp: { location: 'https://example.com/spin-v3.tgz', sha256: 'd'.repeat(64) } } } });
  await eventually(async () => {
    const s = await getShim();
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 3 && s.status.nodesFailed === 0;
  }, 90_000, diagnostics);
});

test('a node that stops matching gets the shim uninstalled and its label removed', async () => {
  await admin.patch('/api/v1/nodes/n3', { metadata: { labels: { wasm: null } } });
  await eventually(async () => (await nodeState('n3')) === undefined, 60_000, diagnostics);
  // The uninstall ran (its Job is cleaned up with the label, so the event is the record).
  const events = (await admin.get('/api/v1/namespaces/default/events')).items.filter((e: any) => e.involvedObject.name === 'spin');
  expect(events.filter((e: any) => e.reason === 'Uninstalled').map((e: any) => e.message)).toEqual(['removed from node n3 (no longer selected)']);
  expect((await jobsOf()).filter((j: any) => j.metadata.annotations['runtime.spinkube.dev/node'] === 'n3')).toEqual([]);
  await eventually(async () => (await getShim()).status.nodes === 2, 30_000, diagnostics);
});

test('killed mid-rollout, a second replica takes the lease over and converges', async () => {
  // GIVEN a standby replica and a rollout in progress
  await startController('c2');
  verdict = () => 'hold';
  await admin.patch('/api/v1/nodes/n3', { metadata: { labels: { wasm: 'true' } } });
  await eventually(async () => (await nodeState('n3')) === 'pending', 30_000, diagnostics);
  const lease = await admin.get(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/rcm-controller`);
  expect(lease.spec.holderIdentity).toBe('c1');

  // WHEN the leader is killed
  controllers[0].child.kill('SIGKILL');
  verdict = () => 'succeed';

  // THEN the standby becomes leader and the rollout completes
  await eventually(async () => (await admin.get(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/rcm-controller`)).spec.holderIdentity === 'c2', 30_000, diagnostics);
  await eventually(async () => {
    const s = await getShim();
    return s.status.nodesReady === 3 && (await nodeState('n3')) === 'provisioned';
  }, 60_000, diagnostics);
});

test('deleting the Shim: a failed uninstall holds it and says why; once uninstalled everywhere, labels and RuntimeClass go and it is released', async () => {
  // GIVEN the uninstall on n1 fails at first
  verdict = ({ node, operation }) => (operation === 'uninstall' && node === 'n1' ? 'fail' : 'succeed');
  await admin.request('DELETE', `${shimsPath}/spin`);
  // THEN the Shim stays, held by its finalizer, and says why
  const held = await eventually(async () => {
    const s = await getShim();
    return condition(s, 'Degraded')?.reason === 'UninstallFailed' ? s : undefined;
  }, 60_000, diagnostics);
  expect(condition(held, 'Degraded').message).toMatch(/^node n1: ChecksumMismatch: /);
  expect(condition(held, 'Ready')).toMatchObject({ status: 'False', reason: 'Deleting' });
  expect(held.metadata.finalizers).toContain('runtime.spinkube.dev/finalizer');
  expect(await nodeState('n1')).toBe('failed');
  // WHEN the failed Job expires (as its TTL would make it) and the next uninstall succeeds
  verdict = () => 'succeed';
  for (const j of await jobsOf('uninstall')) {
    if (j.metadata.annotations['runtime.spinkube.dev/node'] === 'n1') {
      await admin.request('DELETE', `/apis/batch/v1/namespaces/${NS}/jobs/${j.metadata.name}?propagationPolicy=Background`);
    }
  }
  // THEN the Shim is released
  await eventually(async () => {
    try {
      await getShim();
      return false;
    } catch (e: any) {
      return e.code === 404;
    }
  }, 90_000, diagnostics);
  for (const n of ['n1', 'n2', 'n3', 'n4']) expect(await nodeState(n)).toBeUndefined();
  await expect(admin.get('/apis/node.k8s.io/v1/runtimeclasses/wasmtime-spin')).rejects.toMatchObject({ code: 404 });
  const events = (await admin.get('/api/v1/namespaces/default/events')).items.filter((e: any) => e.involvedObject.name === 'spin' && e.reason === 'Uninstalled');
  expect(events.length).toBeGreaterThanOrEqual(3);
});
