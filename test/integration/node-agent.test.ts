import { ChildProcess, execFileSync, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Testing, Yaml } from 'cdk8s';
import { buildSync } from 'esbuild';
import { RuntimeClassManager, ShimNodeLabels } from '../../src';
import { requestKey, requestsConfigMapName, resultKey } from '../../src/shared/agent-protocol';
import { createAgentPod, setAgentPodReady } from '../support/agent-pods';
import { ContainerdDaemon, startContainerd } from '../support/containerd-daemon';
import { ControlPlane, freePort, startControlPlane } from '../support/control-plane';
import { ArtifactServer, sha256, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';
import { eventually, Rest } from '../support/rest';

// Install mode NodeAgent, end to end below the kubelet: rcm-controller with --install-mode
// agent against a real etcd + kube-apiserver 1.20, and rcm-node-agent serving node n1 whose
// host is this machine with a real containerd 1.6 (its own root, config and socket). The
// controller admits operations in the node's requests ConfigMap; the agent carries them out
// with the installer in its own process and reports back on the Node; no Job or pod is involved.

jest.setTimeout(240_000);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-agent-'));
const CONTROLLER = path.join(work, 'rcm-controller.js');
const AGENT = path.join(work, 'rcm-node-agent.js');
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const NS = 'runtime-class-manager';
const NODE = 'n1';
let cp: ControlPlane;
let admin: Rest;
let daemon: ContainerdDaemon;
let server: ArtifactServer;
const children: { name: string; child: ChildProcess; log: string }[] = [];
const artifacts: Record<string, { url: string; sha256: string }> = {};
/** Downloads of the artifacts, counted by the server. */
let downloads = 0;
const restartLog = path.join(work, 'restarts.log');
/** containerd's config before any Shim. */
let original: string;

function bundle(entry: string, out: string): void {
  buildSync({ entryPoints: [path.join(__dirname, '..', '..', 'src', ...entry.split('/'))], bundle: true, platform: 'node', target: 'node20', outfile: out, logLevel: 'error' });
}

function start(name: string, argv: string[]): void {
  const log = path.join(work, `${name}.log`);
  const child = spawn(process.execPath, argv, { stdio: ['ignore', fs.openSync(log, 'a'), fs.openSync(log, 'a')], env: { PATH: process.env.PATH } });
  children.push({ name, child, log });
}

/** A config with our managed handler blocks sorted: the same config, whatever order the installers wrote them in. */
function blocksAsSet(config: string): { rest: string; blocks: string[] } {
  const managed = /# BEGIN runtime-class-manager handler [\s\S]*?# END runtime-class-manager handler [^\n]*\n/g;
  return { rest: config.replace(managed, ''), blocks: (config.match(managed) ?? []).sort() };
}

const restarts = () => (fs.existsSync(restartLog) ? fs.readFileSync(restartLog, 'utf8').split('\n').filter(Boolean).length : 0);
const effectiveConfig = () => execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
const node = () => admin.get(`/api/v1/nodes/${NODE}`);
/** The node's requests ConfigMap (undefined while there is none). */
const requests = () => admin.get(`/api/v1/namespaces/${NS}/configmaps/${requestsConfigMapName(NODE)}`).catch((e: any) => {
  if (e.code === 404) return undefined;
  throw e;
});

async function diagnostics(): Promise<string> {
  const n = await node().catch(() => undefined);
  const shims = await admin.get(SHIMS).catch(() => ({ items: [] }));
  return [
    'node: ' + JSON.stringify(Object.fromEntries(Object.entries({ ...n?.metadata?.labels, ...n?.metadata?.annotations }).filter(([k]) => k.includes('shim.runtime')))),
    'requests: ' + JSON.stringify((await requests().catch(() => undefined))?.data),
    'shims: ' + JSON.stringify(shims.items.map((s: any) => ({ name: s.metadata.name, conditions: s.status?.conditions?.map((c: any) => `${c.type}=${c.status} ${c.reason}`) }))),
    ...children.map(c => `--- ${c.name} ---\n${fs.readFileSync(c.log, 'utf8').split('\n').slice(-25).join('\n')}`),
  ].join('\n');
}

const shimSpec = (handler: string) => ({
  apiVersion: 'runtime.spinkube.dev/v1alpha1',
  kind: 'Shim',
  metadata: { name: handler },
  spec: {
    nodeSelector: { agent: 'true' },
    fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: artifacts[handler].url, sha256: artifacts[handler].sha256 } },
    runtimeClass: { name: handler, handler },
    rolloutStrategy: { type: 'recreate' },
  },
});

const ready = async (name: string) => {
  const shim = await admin.get(`${SHIMS}/${name}`);
  return shim.status?.conditions?.some((c: any) => c.type === 'Ready' && c.status === 'True') && shim.status?.observedGeneration === shim.metadata.generation;
};

beforeAll(async () => {
  bundle('runtime/main.ts', CONTROLLER);
  bundle('agent/main.ts', AGENT);
  server = await startArtifactServer();
  for (const handler of ['agent-a', 'agent-b']) {
    const tgz = await tarGz(work, { [`containerd-shim-${handler}-v2`]: shimBinary() });
    const url = server.handle(`${handler}.tgz`, (_req, res) => {
      downloads++;
      res.writeHead(200, { 'content-length': tgz.length }).end(tgz);
    });
    artifacts[handler] = { url, sha256: sha256(tgz) };
  }
  daemon = await startContainerd();
  cp = await startControlPlane();
  admin = new Rest(cp.server, cp.adminToken, cp.caFile);
  // The Shim CRD and the controller's namespace, as the construct synthesizes them.
  const chart = Testing.chart();
  new RuntimeClassManager(chart, 'Manager');
  cp.kubectl(['apply', '-f', '-'], { input: Yaml.stringify(...Testing.synth(chart).filter(o => ['CustomResourceDefinition', 'Namespace'].includes(o.kind))) });
  cp.kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
  await admin.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', 'agent': 'true' } } });
  const now = new Date().toISOString();
  await admin.request('PATCH', `/api/v1/nodes/${NODE}/status`, {
    status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: '', lastHeartbeatTime: now, lastTransitionTime: now }], nodeInfo: { bootID: 'boot-1' } },
  }, 'application/strategic-merge-patch+json');
  // The agent runs below as a process on this machine; its pod, which the controller reads the node's readiness from, is as its kubelet would report it.
  await admin.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts`, { metadata: { name: 'default' } });
  await createAgentPod(admin, NS, NODE);

  const restartCommand = `echo restart >> ${restartLog}; ${daemon.restartCommand}`;
  start('controller', [CONTROLLER, `--kubeconfig=${cp.kubeconfig}`, `--namespace=${NS}`, '--install-mode=agent', '--leader-elect=false',
    '--default-restart-mode=command', `--default-restart-command=${restartCommand}`, '--resync-seconds=3', '--log-format=text',
    '--retry-base-seconds=1', '--retry-max-seconds=4',
    `--metrics-bind-address=127.0.0.1:${await freePort()}`, `--health-probe-bind-address=127.0.0.1:${await freePort()}`]);
  start('agent', [AGENT, `--node-name=${NODE}`, `--namespace=${NS}`, `--kubeconfig=${cp.kubeconfig}`, '--drift-check-seconds=2', '--log-format=text', '--',
    '--host-root=/', `--install-root=${path.join(daemon.dir, 'opt', 'rcm')}`, `--config=${daemon.config}`, `--socket=${daemon.socket}`,
    '--distro=containerd', '--health-timeout=30', '--retries=1']);
}, 240_000);

afterAll(async () => {
  for (const c of children) c.child.kill('SIGKILL');
  await server?.close();
  await daemon?.stop();
  await cp?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

test('two Shims applied at once are installed by the node agent in one change set: one restart, no Job, both Ready and gated in', async () => {
  original = fs.readFileSync(daemon.config, 'utf8');
  fs.rmSync(restartLog, { force: true });

  // WHEN two Shims select the node
  for (const handler of ['agent-a', 'agent-b']) await admin.request('POST', SHIMS, shimSpec(handler));

  // THEN both become Ready, the node carries both gate labels, and containerd serves both handlers
  await eventually(async () => (await ready('agent-a')) && (await ready('agent-b')), 120_000, diagnostics);
  const n = await node();
  expect(n.metadata.labels[ShimNodeLabels.handlerKey('agent-a')]).toBe('agent-a');
  expect(n.metadata.labels[ShimNodeLabels.handlerKey('agent-b')]).toBe('agent-b');
  const dump = effectiveConfig();
  expect(dump).toMatch(/containerd-shim-agent-a-v2/);
  expect(dump).toMatch(/containerd-shim-agent-b-v2/);
  // AND the requests are in the node's requests ConfigMap, which the Node owns (it goes with the
  // Node), never on the Node; the result of each, on the Node, names it (done: the agent runs it
  // no more, though it stays in the ConfigMap until the controller's next write there)
  const cm = await requests();
  expect(Object.keys(cm.data).sort()).toEqual(['agent-a', 'agent-b']);
  expect(cm.metadata.ownerReferences).toEqual([expect.objectContaining({ apiVersion: 'v1', kind: 'Node', name: NODE, uid: n.metadata.uid })]);
  for (const shim of ['agent-a', 'agent-b']) {
    expect(n.metadata.annotations[requestKey(shim)]).toBeUndefined();
    expect(JSON.parse(n.metadata.annotations[resultKey(shim)])).toMatchObject({ name: JSON.parse(cm.data[shim]).name, phase: 'succeeded' });
    // AND each request tells the agent how far apart the controller's passes can admit them:
    // its pass interval and its slowest pass of the last minute (there were passes before)
    const { passIntervalMs, slowestPassMs } = JSON.parse(cm.data[shim]);
    expect(passIntervalMs).toBe(1000);
    expect(slowestPassMs).toBeGreaterThan(0);
  }
  // AND no Job was made for them (the controller's namespace has none)
  expect((await admin.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items).toEqual([]);
  // AND containerd restarted once for the two (one change set on the node)
  process.stdout.write(`node agent: two Shims at once -> ${restarts()} containerd restart(s)\n`);
  expect(restarts()).toBe(1);
  expect(original).not.toEqual(fs.readFileSync(daemon.config, 'utf8'));
});

test('drift: a deleted shim binary takes the gate away within seconds, then the node is repaired without a human', async () => {
  // GIVEN agent-a installed; its binary, as the config names it
  const binary = /runtime_type = "([^"]*containerd-shim-agent-a-v2)"/.exec(effectiveConfig())![1];
  expect(fs.existsSync(binary)).toBe(true);

  // WHEN someone deletes it
  const deletedAt = Date.now();
  fs.rmSync(binary);

  // THEN the gate label goes (the RuntimeClass stops selecting the node) within the drift check's bound
  await eventually(async () => (await node()).metadata.labels[ShimNodeLabels.handlerKey('agent-a')] === undefined, 30_000, diagnostics);
  const gateGoneMs = Date.now() - deletedAt;
  // AND the controller admits the install again and the agent repairs the node: the binary
  // is back, byte for byte, and so is the gate
  await eventually(async () => (await node()).metadata.labels[ShimNodeLabels.handlerKey('agent-a')] === 'agent-a' && fs.existsSync(binary), 90_000, diagnostics);
  const repairedMs = Date.now() - deletedAt;
  expect(sha256(fs.readFileSync(binary))).toBe(sha256(shimBinary()));
  // (the agent writes the gate with its outcome; the Shim's status follows at the controller's next pass)
  await eventually(async () => ready('agent-a'), 30_000, diagnostics);
  process.stdout.write(`node agent: drift (binary deleted) -> gate gone after ${(gateGoneMs / 1000).toFixed(1)} s, repaired after ${(repairedMs / 1000).toFixed(1)} s\n`);
  // AND the other Shim's gate never moved
  expect((await node()).metadata.labels[ShimNodeLabels.handlerKey('agent-b')]).toBe('agent-b');
});

test('drift of both handlers at once (the config rewritten without them): both gates go in one node write, one change set repairs both, one restart, nothing downloaded', async () => {
  // GIVEN both installed, and every write to the node from here on watched
  await eventually(async () => (await ready('agent-a')) && (await ready('agent-b')), 60_000, diagnostics);
  const withDrift = fs.readFileSync(daemon.config, 'utf8');
  const gates = [ShimNodeLabels.handlerKey('agent-a'), ShimNodeLabels.handlerKey('agent-b')];
  const seen: string[][] = [];
  const watch = admin.watch(`/api/v1/nodes?watch=1&fieldSelector=${encodeURIComponent(`metadata.name=${NODE}`)}&resourceVersion=${(await node()).metadata.resourceVersion}`,
    (e: any) => seen.push(gates.filter(g => e.object?.metadata?.labels?.[g] !== undefined)));
  const restartsBefore = restarts();
  const downloadsBefore = downloads;

  // WHEN someone writes containerd's config as it was before any Shim (cloud-init, Ansible)
  fs.writeFileSync(daemon.config, original);

  // THEN both gates go, and come back once the agent repaired the config
  await eventually(async () => seen.some(s => s.length === 0), 30_000, diagnostics);
  await eventually(async () => {
    const labels = (await node()).metadata.labels;
    return gates.every(g => labels[g] !== undefined) && (await ready('agent-a')) && (await ready('agent-b'));
  }, 90_000, diagnostics);
  watch.stop();
  // AND the first node version without both gates had neither (one write dropped both; each Shim's pass raises its own again)
  process.stdout.write(`node agent: drift of both handlers -> gates in each node version seen ${JSON.stringify(seen.map(s => s.length))}, ${restarts() - restartsBefore} restart(s)\n`);
  expect(seen.find(s => s.length < 2)).toEqual([]);
  // AND one containerd restart, no download (the installed binaries were intact), the config as it was
  expect(restarts() - restartsBefore).toBe(1);
  expect(downloads - downloadsBefore).toBe(0);
  // (the handlers' blocks in the order the change set's installers joined it, which may differ from the first install's)
  expect(blocksAsSet(fs.readFileSync(daemon.config, 'utf8'))).toEqual(blocksAsSet(withDrift));
});

test('deleting both Shims uninstalls them through the agent: the config is the original again, the finalizers go', async () => {
  const restartsBefore = restarts();
  for (const handler of ['agent-a', 'agent-b']) await admin.request('DELETE', `${SHIMS}/${handler}`);
  await eventually(async () => (await admin.get(SHIMS)).items.length === 0, 120_000, diagnostics);
  expect(effectiveConfig()).not.toMatch(/containerd-shim-agent-[ab]-v2/);
  expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
  const n = await node();
  expect(Object.keys({ ...n.metadata.labels, ...n.metadata.annotations }).filter(k => k.includes('shim.runtime.spinkube.dev'))).toEqual([]);
  // AND no request of theirs is left in the ConfigMap
  expect((await requests())?.data ?? {}).toEqual({});
  expect(fs.existsSync(path.join(daemon.dir, 'opt', 'rcm', 'shims'))).toBe(false);
  // AND one containerd restart for both (the uninstalls the controller admitted one pass apart made one change set)
  expect(restarts() - restartsBefore).toBe(1);
});

test('a node whose agent pod is not Ready, or that is cordoned, takes no request; once its agent is Ready and it is uncordoned, the install goes ahead', async () => {
  const progressing = async () => (await admin.get(`${SHIMS}/agent-a`)).status?.conditions?.find((c: any) => c.type === 'Progressing')?.message ?? '';
  const waits = /1 node\(s\) without a Ready node agent pod or cordoned \(n1\)/;
  // GIVEN the node's agent pod not Ready (starting, or its node gone silent); the node not cordoned
  await setAgentPodReady(admin, NS, NODE, false);
  try {
    // WHEN a Shim selects the node
    await admin.request('POST', SHIMS, shimSpec('agent-a'));
    // THEN the Shim says the node waits, and no request is written for it
    await eventually(async () => waits.test(await progressing()), 30_000, diagnostics);
    expect((await requests())?.data?.['agent-a']).toBeUndefined();
    // WHEN the node is cordoned, then its agent pod becomes Ready
    await admin.patch(`/api/v1/nodes/${NODE}`, { spec: { unschedulable: true } });
    await setAgentPodReady(admin, NS, NODE, true);
    // THEN it still waits, for the cordon (over a few of the controller's passes: --resync-seconds=3)
    await new Promise(res => setTimeout(res, 4_000));
    expect((await requests())?.data?.['agent-a']).toBeUndefined();
    expect(await progressing()).toMatch(waits);
    // WHEN the node is uncordoned
    await admin.patch(`/api/v1/nodes/${NODE}`, { spec: { unschedulable: null } });
    // THEN the agent installs the Shim and the node is gated in
    await eventually(async () => ready('agent-a'), 60_000, diagnostics);
    expect((await node()).metadata.labels[ShimNodeLabels.handlerKey('agent-a')]).toBe('agent-a');
  } finally {
    await setAgentPodReady(admin, NS, NODE, true);
    await admin.patch(`/api/v1/nodes/${NODE}`, { spec: { unschedulable: null } });
    await admin.request('DELETE', `${SHIMS}/agent-a`).catch(() => undefined);
    await eventually(async () => (await admin.get(SHIMS)).items.length === 0, 120_000, diagnostics);
  }
});
