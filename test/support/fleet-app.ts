import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { App, Chart, Duration } from 'cdk8s';
import { parse } from 'smol-toml';
import { applyServerSide, diagnosedStep, wireForTestCluster } from './e2e-common';
import { ArtifactServer, sha256, startArtifactServer, tarGz } from './installer-bundle';
import { ClusterNode, MultiNodeCluster, NodeShape, startMultiNodeCluster } from './multi-node-cluster';
import { buildProductImages, CONTROLLER_IMAGE, INSTALLER_IMAGE } from './product-images';
import { eventually, Rest } from './rest';
import { BUSYBOX_IMAGE } from './single-node-cluster';
import { PAYLOAD_RUNC_SHIM } from './tools';
import { MaxUpdate, PullPolicy, Rollout, RuntimeClassManager, RuntimeClassManagerProps, ShimConstructProps } from '../../src';

// What the multi-node suites (test/e2e-multinode/) share: the fleet (the cluster, the product's
// images on every node, an artifact server on 127.0.0.1), the shim payloads they serve, the app
// a fleet operator writes with the test bed's overrides and its apply, workload pods and what
// they report, containerd's starts on a node, and the diagnostics a failed step carries. One
// fleet per test file: jest gives each file its own copy of this module.

export const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
export const NS = 'runtime-class-manager';

export interface Fleet {
  readonly cluster: MultiNodeCluster;
  readonly api: Rest;
  /** A scratch folder. */
  readonly work: string;
  readonly server: ArtifactServer;
  /** The API server's port on 127.0.0.1. */
  readonly apiPort: number;
}

let current: Fleet | undefined;

/** The fleet of this test file, once `setUpFleet`'s beforeAll has run. */
export function fleet(): Fleet {
  if (!current) throw new Error('the fleet is not up: call setUpFleet() at the top of the test file');
  return current;
}

/**
 * Starts the multi-node cluster with `nodes`, the product's images imported into every node
 * and an artifact server, before the file's tests (its hooks run before any the file registers
 * after this call), and stops them after them.
 */
export function setUpFleet(nodes: Record<string, NodeShape>): void {
  beforeAll(async () => {
    // A CRI-O node takes its images into its storage before it boots: built first for it.
    const preload = Object.values(nodes).includes('crio') ? await buildProductImages(fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-images-'))) : undefined;
    const cluster = await startMultiNodeCluster(nodes, { preloadImages: preload ? [preload.controller, preload.installer] : [] });
    const work = path.join(cluster.dir, 'work');
    fs.mkdirSync(work, { recursive: true });
    const cp = cluster.controlPlane;
    const api = new Rest(cp.server, cp.adminToken, cp.caFile);
    const apiPort = Number(new URL(cp.server).port);
    const images = preload ?? await buildProductImages(work);
    cluster.importImage(images.controller);
    cluster.importImage(images.installer);
    if (preload) fs.rmSync(path.dirname(preload.controller), { recursive: true, force: true });
    const server = await startArtifactServer();
    current = { cluster, api, work, server, apiPort };
  }, 600_000);
  afterAll(async () => {
    await current?.server.close();
    await current?.cluster.stop();
  }, 300_000);
}

// ---- Artifacts: shim payloads served by the artifact server

export interface Artifact {
  readonly handler: string;
  readonly location: string;
  readonly sha256: string;
}

/** Downloads of each artifact (by the name it was published under), counted by the artifact server. */
export const downloads: Record<string, number> = {};

/**
 * A payload with a real shim (containerd's runc shim as containerd-shim-<handler>-v2), made
 * distinct by `marker`, served as `<name>.tar.gz`. Bytes after the end of an ELF file are
 * ignored by the loader: same program, new checksum.
 */
export async function publishShimPayload(name: string, handler: string, marker: string): Promise<Artifact> {
  const { work, server } = fleet();
  const binary = Buffer.concat([fs.readFileSync(PAYLOAD_RUNC_SHIM), Buffer.from(`\n${marker}\n`)]);
  const tgz = await tarGz(work, { [`containerd-shim-${handler}-v2`]: binary });
  downloads[name] = 0;
  const location = server.handle(`${name}.tar.gz`, (_req, res) => {
    downloads[name]++;
    res.writeHead(200, { 'content-length': tgz.length }).end(tgz);
  });
  return { handler, location, sha256: sha256(tgz) };
}

/** Where the installer puts an artifact's shim on a node (the payload's own folder, named by the artifact's sha256). */
export function payloadShim(a: Artifact): string {
  return `/opt/rcm/payloads/${a.handler}/${a.sha256.slice(0, 16)}/containerd-shim-${a.handler}-v2`;
}

// ---- The app

/**
 * The app a fleet operator writes: the manager with its defaults (systemd restarts, the standard
 * paths: nothing per node) and `props`, and the Shims `addShims` adds. Test-only settings: local
 * images, quick retries and a short health timeout, and the test cluster's wiring
 * (wireForTestCluster: the API server on 127.0.0.1, no probes, listeners on 127.0.0.1 with ports
 * of the kernel's choosing, as all nodes share the machine's network).
 */
export function synthFleetApp(chartId: string, props: Partial<RuntimeClassManagerProps>, addShims: (manager: RuntimeClassManager) => void): string {
  const app = new App();
  const manager = new RuntimeClassManager(new Chart(app, chartId), 'Manager', {
    controllerImage: CONTROLLER_IMAGE,
    installerImage: INSTALLER_IMAGE,
    imagePullPolicy: PullPolicy.IF_NOT_PRESENT,
    replicas: 1,
    retryBackoff: Duration.seconds(2),
    failureThreshold: 2,
    installerEnv: { RCM_HEALTH_TIMEOUT: '12' },
    ...props,
  });
  addShims(manager);
  wireForTestCluster(manager, fleet().apiPort, { anyPort: true });
  return app.synthYaml();
}

/**
 * A Shim of an artifact published with publishShimPayload, given as a payload with
 * `runtimeType: io.containerd.runc.v2` (runc's options, SystemdCgroup on the systemd nodes, reach
 * it), rolling one node at a time.
 */
export function addPayloadShim(manager: RuntimeClassManager, name: string, a: Artifact, nodeSelector: Record<string, string>,
  more: Partial<ShimConstructProps> = {}): void {
  manager.addShim(name, {
    handler: a.handler,
    runtimeClassName: name,
    location: a.location,
    sha256: a.sha256,
    payload: { shim: `containerd-shim-${a.handler}-v2`, runtimeType: 'io.containerd.runc.v2' },
    allowInsecureHttp: true,
    nodeSelector,
    rollout: Rollout.rolling({ maxUpdate: MaxUpdate.count(1) }),
    ...more,
  });
}

/** `kubectl apply --server-side` of a manifest file (applyServerSide). */
export function applyFile(file: string, extra: string[] = []): void {
  applyServerSide(fleet().cluster.controlPlane.kubectl, file, extra);
}

/** `cdk8s synth`'s output, written to the work folder, then `kubectl apply --server-side`. */
export function applyApp(yaml: string): void {
  const file = path.join(fleet().work, `app-${Date.now()}.yaml`);
  fs.writeFileSync(file, yaml);
  applyFile(file);
}

// ---- The API

export async function getNode(name: string): Promise<any> {
  return fleet().api.get(`/api/v1/nodes/${name}`);
}

export function condition(s: any, type: string): any {
  return (s?.status?.conditions ?? []).find((c: any) => c.type === type);
}

// ---- Workloads

const WORKLOADS = 'labelSelector=e2e.rcm.dev%2Fworkload%3Dtrue';

/**
 * A workload pod on the host network. It shares its node's pid namespace, and its container ends
 * by writing the program its parent runs (the shim that started it: argv[0], the path containerd
 * ran) to its termination message (see runtimeOf).
 */
export function workloadPod(name: string, command: string, options: { runtimeClassName?: string; nodeName?: string; restartPolicy?: 'Never' | 'OnFailure' } = {}): object {
  const reportShim = 'read -r -d "" shim < /proc/$PPID/cmdline; echo "$shim" > /dev/termination-log';
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { 'e2e.rcm.dev/workload': 'true' } },
    spec: {
      hostNetwork: true,
      hostPID: true,
      restartPolicy: options.restartPolicy ?? 'Never',
      terminationGracePeriodSeconds: 1,
      ...(options.runtimeClassName ? { runtimeClassName: options.runtimeClassName } : {}),
      ...(options.nodeName ? { nodeSelector: { 'kubernetes.io/hostname': options.nodeName } } : {}),
      containers: [{ name: 'main', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', `${command}; ${reportShim}`] }],
    },
  };
}

export async function createPod(object: object): Promise<void> {
  await fleet().api.request('POST', '/api/v1/namespaces/default/pods', object);
}

/**
 * Waits for a pod to reach one of `phases`. The default bound is beyond the kubelet's CRI call
 * timeout (--runtime-request-timeout, 2 minutes): a pod whose container create or start was in
 * flight as containerd restarted (what the installers do on purpose) can wait that long before
 * the kubelet 1.20 tries again ("transport is closing", seen in fresh-clone CI runs on A and B).
 */
export async function podWhen(name: string, phases: string[], timeoutMs = 240_000): Promise<any> {
  return eventually(async () => {
    const p = await fleet().api.get(`/api/v1/namespaces/default/pods/${name}`);
    return phases.includes(p.status?.phase) ? p : undefined;
  }, timeoutMs, diagnostics);
}

/** Deletes every workload pod, and waits until they are gone. */
export async function deleteWorkloads(): Promise<void> {
  const { api } = fleet();
  await api.request('DELETE', `/api/v1/namespaces/default/pods?${WORKLOADS}`);
  await eventually(async () => (await api.get(`/api/v1/namespaces/default/pods?${WORKLOADS}`)).items.length === 0, 120_000, diagnostics);
}

/**
 * The shim binary that ran a finished pod's container, as the pod saw it (its termination
 * message). containerd records the runtime's name for a container (io.containerd.runc.v2 for
 * every handler here), not the runtime_path it started.
 */
export function runtimeOf(p: any): string {
  return String(p.status.containerStatuses[0].state.terminated.message ?? '').trim();
}

/** The runtime handler containerd ran a pod with (its sandbox's CRI metadata, from the node's containerd). */
export function handlerOf(p: any): string {
  const n = fleet().cluster.node(p.spec.nodeName);
  const info = (id: string) => JSON.parse(n.ctr(['-n', 'k8s.io', 'containers', 'info', id]));
  const container = info(String(p.status.containerStatuses[0].containerID).replace('containerd://', ''));
  const sandbox = info(container.Spec.annotations['io.kubernetes.cri.sandbox-id']);
  const metadata = Object.entries(sandbox.Extensions ?? {}).find(([k]) => k.endsWith('sandbox.metadata'))?.[1] as any;
  return JSON.parse(Buffer.from(metadata.value, 'base64').toString()).Metadata.RuntimeHandler;
}

// ---- The nodes' containerd

/** The runtime handlers in a node's effective containerd config (what `config dump` shows). */
export function handlersOf(dump: string): Record<string, any> {
  return criRuntimeOf(parse(dump) as any).containerd.runtimes;
}

/** The CRI runtime plugin's table of a parsed config: `io.containerd.grpc.v1.cri` (config version 2) or `io.containerd.cri.v1.runtime` (3 and 4). */
export function criRuntimeOf(config: any): any {
  return config.plugins['io.containerd.cri.v1.runtime'] ?? config.plugins['io.containerd.grpc.v1.cri'];
}

/**
 * Starts of a node's containerd unit after `since` (ms): on a systemd node the starts systemd
 * completed (from its journal), on the k3s node every start of the unit's script.
 */
export function containerdStarts(n: ClusterNode, since: number): number[] {
  return n.host.unitEvents(n.containerdUnit).filter(e => e.event === 'start' && e.at > since).map(e => e.at);
}

// ---- Steps and diagnostics

export const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

/** A scenario step of five minutes at most, whose failure message carries the diagnostics; `cleanup` runs after it, pass or fail. */
export function step(name: string, fn: () => Promise<void>, cleanup?: () => void, timeoutMs = 600_000): void {
  diagnosedStep(name, fn, diagnostics, timeoutMs, cleanup);
}

/** The Shims, every node's readiness and our labels and annotations, Jobs, pods, events, our pods' logs and every component's log tail. */
export async function diagnostics(): Promise<string> {
  const { api, cluster } = fleet();
  const safe = async (what: () => Promise<any>) => what().catch((e: Error) => `(${e.message})`);
  const shims = await safe(async () => (await api.get(SHIMS)).items.map((s: any) => ({ name: s.metadata.name, status: s.status })));
  const jobs = await safe(async () => (await api.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items
    .map((j: any) => ({ name: j.metadata.name, node: j.metadata.annotations?.['runtime.spinkube.dev/node'], status: j.status })));
  const pods = await safe(async () => (await api.get('/api/v1/pods')).items.map((p: any) => ({
    name: `${p.metadata.namespace}/${p.metadata.name}`,
    node: p.spec.nodeName,
    phase: p.status?.phase,
    // A pod the kubelet refused (its admission: NodeAffinity, OutOf...) has a reason and no container state.
    ...(p.status?.reason ? { reason: p.status.reason, message: p.status.message } : {}),
    state: (p.status?.containerStatuses ?? []).map((c: any) => c.state),
  })));
  const nodes = await safe(async () => (await api.get('/api/v1/nodes')).items.map((n: any) => ({
    name: n.metadata.name,
    ready: (n.status.conditions ?? []).find((c: any) => c.type === 'Ready')?.status,
    labels: Object.fromEntries(Object.entries(n.metadata.labels ?? {}).filter(([k]) => k.includes('rcm') || k.includes('spinkube'))),
    annotations: Object.fromEntries(Object.entries(n.metadata.annotations ?? {}).filter(([k]) => k.includes('spinkube'))),
  })));
  const events = await safe(async () => (await api.get('/api/v1/events')).items.slice(-30)
    .map((e: any) => `${e.involvedObject.kind}/${e.involvedObject.name} ${e.reason}: ${e.message}`).join('\n'));
  return [
    '=== multi-node diagnostics ===',
    `shims: ${JSON.stringify(shims, undefined, 1)}`,
    `nodes (labels and annotations): ${JSON.stringify(nodes, undefined, 1)}`,
    `jobs: ${JSON.stringify(jobs, undefined, 1)}`,
    `pods: ${JSON.stringify(pods, undefined, 1)}`,
    `recent events:\n${events}`,
    ...cluster.nodes.map(n => podLogTails(n, 30)),
    cluster.logTails(25),
  ].join('\n');
}

/** The controller's, installers' and node agents' container logs on a node, read from the node's files (kubectl logs does not reach these kubelets); lines cut at 400 characters. */
function podLogTails(n: ClusterNode, lines: number): string {
  const r = n.host.tryRun(['sh', '-c', `for f in /var/log/pods/${NS}_*/*/*.log; do [ -f "$f" ] && echo "--- ${n.name} $f" && tail -n ${lines} "$f" | cut -c1-400; done; true`]);
  return r.stdout;
}
