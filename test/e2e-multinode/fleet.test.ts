import * as fs from 'fs';
import * as path from 'path';
import { ApiObject, App, Chart, Duration, JsonPatch } from 'cdk8s';
import { parse } from 'smol-toml';
import { MaxUpdate, ImagePullPolicy, Rollout, RuntimeClassManager, ShimNodeLabels } from '../../src';
import { ArtifactServer, sha256, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';
import { ClusterNode, K3S_TEMPLATE, MultiNodeCluster, startMultiNodeCluster } from '../support/multi-node-cluster';
import { buildProductImages, CONTROLLER_IMAGE, INSTALLER_IMAGE } from '../support/product-images';
import { eventually, Rest } from '../support/rest';
import { BUSYBOX_IMAGE } from '../support/single-node-cluster';

// The product on a fleet: three real kubelets 1.20.2 on this machine, each node in its own
// mount and pid namespaces with its own containerd (1.6 plain, 1.7 customised with a
// symlinked config, and a k3s-shaped node), one control plane. The app is synthesized with
// cdk8s and applied with kubectl; the controller runs as pods and its installer Jobs reach
// each node's containerd through nsenter into PID 1 and the default `systemctl restart`, as
// on real machines. Results are read from the API and from the nodes' own files.
// Needs root and scripts/provision.sh; run it with `npx projen e2e:multinode`.

const NODES = { 'rcm-node-a': 'plain', 'rcm-node-b': 'custom', 'rcm-node-c': 'k3s' } as const;
const [A, B, C] = Object.keys(NODES);
const SHIM = 'fleet';
const HANDLER = 'fleet';
const NEXT_HANDLER = 'fleet-next';
const PROBE = 'probe';
const FLEET_LABEL = 'e2e.rcm.dev/fleet';
const PROBE_LABEL = 'e2e.rcm.dev/probe';
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const NS = 'runtime-class-manager';
const HANDLER_LABEL = ShimNodeLabels.handlerKey(SHIM);
const STATE_LABEL = ShimNodeLabels.stateKey(SHIM);

let cluster: MultiNodeCluster;
let api: Rest;
let work: string;
let server: ArtifactServer;
let apiPort: number;
/** Each node's effective containerd config, edited file and install root before anything was installed. */
const start: Record<string, { dump: string; edited: string; link?: string }> = {};

interface Artifact {
  readonly handler: string;
  readonly location: string;
  readonly sha256: string;
}
const artifacts: Record<string, Artifact> = {};

/** A tarball with a real shim (containerd's runc shim under the handler's name), made distinct by `version`. */
async function publish(version: string, handler: string): Promise<void> {
  // Bytes after the end of an ELF file are ignored by the loader: same program, new checksum.
  const binary = Buffer.concat([shimBinary(), Buffer.from(`\nrcm-fleet ${version}\n`)]);
  const tgz = await tarGz(work, { [`containerd-shim-${handler}-v2`]: binary });
  artifacts[version] = { handler, location: server.put(`${version}.tar.gz`, tgz), sha256: sha256(tgz) };
}

/** Where the installer puts a version on a node (its own folder, named by the artifact's sha256). */
function installedBinary(version: string): string {
  const a = artifacts[version];
  return `/opt/rcm/shims/${a.handler}/${a.sha256.slice(0, 16)}/containerd-shim-${a.handler}-v2`;
}

interface AppShim {
  readonly name: string;
  readonly version: string;
  readonly selector: Record<string, string>;
}

/**
 * The app a fleet operator writes: the manager with its defaults (systemd restarts, the
 * standard paths: nothing per node), rolling one node at a time. Test-only settings: local
 * images, quick retries and a short health timeout, and through escape hatches the host
 * network with the API server on 127.0.0.1 (there is no kube-proxy), no probes (the kubelet
 * would dial the node's non-loopback address) and listeners on 127.0.0.1 with ports of the
 * kernel's choosing (all nodes share the machine's network).
 */
function synthApp(shims: AppShim[], replicas = 1): string {
  const app = new App();
  const chart = new Chart(app, 'fleet');
  const manager = new RuntimeClassManager(chart, 'Manager', {
    controllerImage: CONTROLLER_IMAGE,
    installerImage: INSTALLER_IMAGE,
    imagePullPolicy: ImagePullPolicy.IF_NOT_PRESENT,
    replicas,
    retryBackoff: Duration.seconds(2),
    failureThreshold: 2,
    installerEnv: { RCM_HEALTH_TIMEOUT: '12' },
  });
  for (const s of shims) {
    const a = artifacts[s.version];
    manager.addShim(s.name, {
      handler: a.handler,
      runtimeClassName: s.name,
      location: a.location,
      sha256: a.sha256,
      allowInsecureHttp: true,
      nodeSelector: s.selector,
      rollout: Rollout.rolling({ maxUpdate: MaxUpdate.count(1) }),
    });
  }
  const container = '/spec/template/spec/containers/0';
  const args: string[] = manager.deployment.toJson().spec.template.spec.containers[0].args;
  const loopback = ['--metrics-bind-address', '--health-probe-bind-address'].map(flag => {
    const index = args.findIndex(a => a.startsWith(`${flag}=`));
    return JsonPatch.replace(`${container}/args/${index}`, `${flag}=127.0.0.1:0`);
  });
  ApiObject.of(manager.deployment).addJsonPatch(
    JsonPatch.add('/spec/template/spec/hostNetwork', true),
    JsonPatch.add(`${container}/env/-`, { name: 'KUBERNETES_SERVICE_HOST', value: '127.0.0.1' }),
    JsonPatch.add(`${container}/env/-`, { name: 'KUBERNETES_SERVICE_PORT', value: String(apiPort) }),
    JsonPatch.remove(`${container}/livenessProbe`),
    JsonPatch.remove(`${container}/readinessProbe`),
    JsonPatch.remove(`${container}/ports`),
    ...loopback,
  );
  return app.synthYaml();
}

/** `cdk8s synth` then `kubectl apply --server-side`, pruning Shims no longer in the app the GitOps way: by deleting them. */
function apply(shims: AppShim[], replicas = 1): void {
  const file = path.join(work, `app-${Date.now()}.yaml`);
  fs.writeFileSync(file, synthApp(shims, replicas));
  const kubectl = cluster.controlPlane.kubectl;
  try {
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', '-f', file]);
  } catch (e) {
    if (!/no matches for kind "Shim"/.test(String((e as any).stderr ?? e))) throw e;
    kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', '-f', file]);
  }
}

function label(node: string, key: string, value: string | null): void {
  cluster.controlPlane.kubectl(['label', 'node', node, value === null ? `${key}-` : `${key}=${value}`, '--overwrite']);
}

async function getShim(name: string): Promise<any> {
  return api.get(`${SHIMS}/${name}`);
}

function condition(s: any, type: string): any {
  return (s?.status?.conditions ?? []).find((c: any) => c.type === type);
}

async function shimReady(name: string, nodes: number, revision?: (r: string) => boolean): Promise<any> {
  return eventually(async () => {
    const s = await getShim(name);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === nodes && s.status.nodes === nodes
      && (!revision || revision(s.status.revision)) ? s : undefined;
  }, 240_000, diagnostics);
}

async function node(name: string): Promise<any> {
  return api.get(`/api/v1/nodes/${name}`);
}

function pod(name: string, command: string, options: { runtimeClassName?: string; nodeName?: string } = {}): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { 'e2e.rcm.dev/workload': 'true' } },
    spec: {
      hostNetwork: true,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      ...(options.runtimeClassName ? { runtimeClassName: options.runtimeClassName } : {}),
      ...(options.nodeName ? { nodeSelector: { 'kubernetes.io/hostname': options.nodeName } } : {}),
      containers: [{ name: 'main', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', command] }],
    },
  };
}

async function createPod(object: object): Promise<void> {
  await api.request('POST', '/api/v1/namespaces/default/pods', object);
}

async function podWhen(name: string, phases: string[], timeoutMs = 120_000): Promise<any> {
  return eventually(async () => {
    const p = await api.get(`/api/v1/namespaces/default/pods/${name}`);
    return phases.includes(p.status?.phase) ? p : undefined;
  }, timeoutMs, diagnostics);
}

async function deleteWorkloads(): Promise<void> {
  await api.request('DELETE', '/api/v1/namespaces/default/pods?labelSelector=e2e.rcm.dev%2Fworkload%3Dtrue');
  await eventually(async () => (await api.get('/api/v1/namespaces/default/pods?labelSelector=e2e.rcm.dev%2Fworkload%3Dtrue')).items.length === 0,
    120_000, diagnostics);
}

/** The runtime a pod's container was started with, from its node's containerd. */
function runtimeOf(p: any): string {
  const id = String(p.status.containerStatuses[0].containerID).replace('containerd://', '');
  return JSON.parse(cluster.node(p.spec.nodeName).ctr(['-n', 'k8s.io', 'containers', 'info', id])).Runtime.Name;
}

/** The runtime handlers in a node's effective containerd config (what `config dump` shows). */
function handlersOf(dump: string): Record<string, any> {
  return (parse(dump) as any).plugins['io.containerd.grpc.v1.cri'].containerd.runtimes;
}

/** Installer pods of this run, as the API shows them, per pod name (kept after the controller removes them). */
interface InstallerPod {
  readonly name: string;
  readonly node: string;
  readonly shim: string;
  readonly operation: string;
  readonly revision: string;
  readonly attempt: string;
  phase: string;
  started?: number;
  finished?: number;
  reason?: string;
}

/** Watches installer pods by polling; `running()` counts the nodes where one is running now. */
class InstallerPods {
  readonly seen = new Map<string, InstallerPod>();
  private maxConcurrent = 0;

  async poll(): Promise<InstallerPod[]> {
    const pods = (await api.get(`/api/v1/namespaces/${NS}/pods`)).items.filter((p: any) => p.metadata.annotations?.['runtime.spinkube.dev/operation']);
    const now: InstallerPod[] = [];
    for (const p of pods) {
      const a = p.metadata.annotations;
      const state = p.status?.containerStatuses?.[0]?.state ?? {};
      const entry: InstallerPod = this.seen.get(p.metadata.name) ?? {
        name: p.metadata.name, node: p.spec.nodeName, shim: a['runtime.spinkube.dev/shim'], operation: a['runtime.spinkube.dev/operation'],
        revision: a['runtime.spinkube.dev/revision'], attempt: a['runtime.spinkube.dev/attempt'], phase: '',
      };
      entry.phase = p.status?.phase;
      const t = state.terminated ?? state.running;
      if (t?.startedAt) entry.started = Date.parse(t.startedAt);
      if (state.terminated) {
        entry.finished = Date.parse(state.terminated.finishedAt);
        entry.reason = state.terminated.reason;
      }
      this.seen.set(entry.name, entry);
      now.push(entry);
    }
    const running = new Set(now.filter(p => p.phase === 'Running' || (p.phase === 'Pending')).map(p => p.node));
    this.maxConcurrent = Math.max(this.maxConcurrent, running.size);
    return now;
  }

  get mostNodesAtOnce(): number {
    return this.maxConcurrent;
  }

  of(filter: Partial<InstallerPod>): InstallerPod[] {
    return [...this.seen.values()].filter(p => Object.entries(filter).every(([k, v]) => (p as any)[k] === v));
  }
}

/** The runs of a rollout must not overlap in time: each starts after the one before finished (API times are in whole seconds). */
function expectOneAtATime(pods: InstallerPod[]): void {
  const sorted = [...pods].sort((x, y) => x.started! - y.started!);
  for (let i = 1; i < sorted.length; i++) {
    const [before, after] = [sorted[i - 1], sorted[i]];
    expect({ after: after.name, started: after.started, before: before.name, beforeFinished: before.finished, overlaps: after.started! < before.finished! })
      .toMatchObject({ overlaps: false });
  }
}

/** Starts of a node's containerd unit after `since` (ms). */
function containerdStarts(n: ClusterNode, since: number): number[] {
  return n.host.unitEvents(n.containerdUnit).filter(e => e.event === 'start' && e.at > since).map(e => e.at);
}

async function diagnostics(): Promise<string> {
  const safe = async (what: () => Promise<any>) => what().catch((e: Error) => `(${e.message})`);
  const shims = await safe(async () => (await api.get(SHIMS)).items.map((s: any) => ({ name: s.metadata.name, status: s.status })));
  const jobs = await safe(async () => (await api.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items
    .map((j: any) => ({ name: j.metadata.name, node: j.metadata.annotations?.['runtime.spinkube.dev/node'], status: j.status })));
  const pods = await safe(async () => (await api.get('/api/v1/pods')).items.map((p: any) => ({
    name: `${p.metadata.namespace}/${p.metadata.name}`, node: p.spec.nodeName, phase: p.status?.phase,
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

/** The controller's and installers' container logs on a node, read from the node's files. */
function podLogTails(n: ClusterNode, lines: number): string {
  const r = n.host.tryRun(['sh', '-c', `for f in /var/log/pods/${NS}_*/*/*.log; do [ -f "$f" ] && echo "--- ${n.name} $f" && tail -n ${lines} "$f"; done; true`]);
  return r.stdout;
}

function step(name: string, fn: () => Promise<void>, timeoutMs = 300_000): void {
  test(name, async () => {
    try {
      await fn();
    } catch (e) {
      (e as Error).message += `\n${await diagnostics()}`;
      throw e;
    }
  }, timeoutMs);
}

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

beforeAll(async () => {
  cluster = await startMultiNodeCluster(NODES);
  work = path.join(cluster.dir, 'work');
  fs.mkdirSync(work, { recursive: true });
  const cp = cluster.controlPlane;
  api = new Rest(cp.server, cp.adminToken, cp.caFile);
  apiPort = Number(new URL(cp.server).port);
  const images = await buildProductImages(work);
  cluster.importImage(images.controller);
  cluster.importImage(images.installer);
  server = await startArtifactServer();
  for (const v of ['v1', 'v2', 'v3', 'v4']) await publish(v, HANDLER);
  await publish('v5', NEXT_HANDLER);
  for (const n of cluster.nodes) {
    start[n.name] = {
      dump: n.configDump(),
      edited: n.host.read(n.editedConfig)!,
      link: n.host.tryRun(['readlink', '/etc/containerd/config.toml']).stdout.trim() || undefined,
    };
  }
}, 600_000);

afterAll(async () => {
  await server?.close();
  await cluster?.stop();
}, 300_000);

step('the cluster: three Ready nodes, each with its own containerd, and a hostPID pod lands in its own node\'s view', async () => {
  // THEN every node runs its own containerd version
  const versions = await Promise.all(cluster.nodes.map(async n => (await node(n.name)).status.nodeInfo.containerRuntimeVersion));
  expect(versions).toEqual([expect.stringMatching(/^containerd:\/\/1\.6\./), expect.stringMatching(/^containerd:\/\/1\.7\./), expect.stringMatching(/^containerd:\/\/1\.6\./)]);
  // AND k3s's node has no containerd on its PATH, only in k3s's folder
  expect(cluster.node(C).host.tryRun(['sh', '-c', 'command -v containerd']).code).not.toBe(0);
  // WHEN a privileged hostPID pod with the host's / (as the installer's) runs on each node
  const script = [
    'const fs = require("fs"); const { execFileSync } = require("child_process");',
    'const viaHostRoot = fs.readFileSync("/host/etc/rcm-node/name", "utf8");',
    'const viaNsenter = execFileSync("nsenter", ["--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", "cat", "/etc/rcm-node/name"], { encoding: "utf8" });',
    'const init = fs.readFileSync("/proc/1/cmdline", "utf8").split("\\0").join(" ").trim();',
    'fs.writeFileSync("/dev/termination-log", JSON.stringify({ viaHostRoot, viaNsenter, init }));',
  ].join('\n');
  for (const n of cluster.nodes) {
    await createPod({
      apiVersion: 'v1', kind: 'Pod',
      metadata: { name: `probe-${n.name}`, namespace: 'default', labels: { 'e2e.rcm.dev/workload': 'true' } },
      spec: {
        nodeName: n.name, hostPID: true, hostNetwork: true, restartPolicy: 'Never', automountServiceAccountToken: false,
        containers: [{
          name: 'probe', image: INSTALLER_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/usr/local/bin/node', '-e', script],
          securityContext: { privileged: true }, volumeMounts: [{ name: 'host', mountPath: '/host' }],
        }],
        volumes: [{ name: 'host', hostPath: { path: '/', type: 'Directory' } }],
      },
    });
  }
  // THEN the host root and nsenter into PID 1 both land in that pod's own node
  for (const n of cluster.nodes) {
    const done = await podWhen(`probe-${n.name}`, ['Succeeded', 'Failed']);
    expect(done.status.phase).toBe('Succeeded');
    expect(JSON.parse(done.status.containerStatuses[0].state.terminated.message)).toEqual({
      viaHostRoot: `${n.name}\n`, viaNsenter: `${n.name}\n`, init: 'bash /etc/rcm-node/init',
    });
  }
  await deleteWorkloads();
});

step('an install on one node changes nothing on the others (nor on the machine)', async () => {
  const machineConfig = fs.readFileSync('/etc/containerd/config.toml', 'utf8');
  // GIVEN only node A selected
  label(A, PROBE_LABEL, 'true');
  // WHEN a Shim is applied
  apply([{ name: PROBE, version: 'v1', selector: { [PROBE_LABEL]: 'true' } }]);
  // THEN it is installed on A, through A's systemctl, and A's containerd serves it
  await shimReady(PROBE, 1);
  const a = cluster.node(A);
  expect(handlersOf(a.configDump())[HANDLER]).toMatchObject({ runtime_type: installedBinary('v1') });
  expect(a.host.tryRun(['test', '-x', installedBinary('v1')]).code).toBe(0);
  // AND B and C are as they were: same effective config, same files, no install root
  for (const n of [cluster.node(B), cluster.node(C)]) {
    expect(n.configDump()).toEqual(start[n.name].dump);
    expect(n.host.read(n.editedConfig)).toEqual(start[n.name].edited);
    expect(n.host.tryRun(['test', '-e', '/opt/rcm']).code).not.toBe(0);
    expect(containerdStarts(n, 0)).toHaveLength(1);
  }
  // AND so is the machine
  expect(fs.readFileSync('/etc/containerd/config.toml', 'utf8')).toEqual(machineConfig);
  expect(fs.existsSync('/opt/rcm')).toBe(false);

  // WHEN the probe Shim is deleted THEN A is back to its start
  cluster.controlPlane.kubectl(['delete', 'shim', PROBE, '--wait=true', '--timeout=120s']);
  expect(a.configDump()).toEqual(start[A].dump);
  label(A, PROBE_LABEL, null);
});

step('scenario 1: rolling maxUpdate 1 over three nodes, one node at a time; workloads land only on provisioned nodes', async () => {
  const since = Date.now();
  for (const n of cluster.nodes) label(n.name, FLEET_LABEL, 'true');
  const watch = new InstallerPods();
  // WHEN the fleet Shim is applied
  apply([{ name: SHIM, version: 'v1', selector: { [FLEET_LABEL]: 'true' } }]);
  // AND workloads keep arriving during the rollout
  const workloads: string[] = [];
  let ready: any;
  for (let i = 0; !ready; i++) {
    await watch.poll();
    if (i % 8 === 0) {
      const name = `s1-${workloads.length}`;
      await createPod(pod(name, 'echo ran > /dev/termination-log', { runtimeClassName: SHIM }));
      workloads.push(name);
    }
    const s = await getShim(SHIM).catch(() => undefined);
    if (condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 3) ready = s;
    else await sleep(250);
    if (Date.now() - since > 240_000) throw new Error('the rollout did not finish within 240 s');
  }
  await watch.poll();
  // THEN never more than one node installing, by the pods' real start and finish times
  const installs = watch.of({ shim: SHIM, operation: 'install' });
  expect(installs.map(p => p.node).sort()).toEqual([A, B, C]);
  expect(installs.every(p => p.reason === 'Completed')).toBe(true);
  expectOneAtATime(installs);
  expect(watch.mostNodesAtOnce).toBe(1);
  // AND each node's containerd restarted once, during its own installer's run
  for (const p of installs) {
    const starts = containerdStarts(cluster.node(p.node), since);
    expect(starts).toHaveLength(1);
    expect(starts[0]).toBeGreaterThanOrEqual(p.started! - 1000);
    expect(starts[0]).toBeLessThanOrEqual(p.finished! + 1000);
  }
  // AND every node carries the handler and serves it from its installed binary
  for (const n of cluster.nodes) {
    expect((await node(n.name)).metadata.labels).toMatchObject({ [HANDLER_LABEL]: HANDLER, [STATE_LABEL]: 'provisioned' });
    expect(handlersOf(n.configDump())[HANDLER]).toMatchObject({ runtime_type: installedBinary('v1') });
  }
  // AND the k3s node got it through its template, which keeps the base directive and the site's runtime
  const template = cluster.node(C).host.read(cluster.node(C).editedConfig)!;
  expect(template.startsWith(K3S_TEMPLATE)).toBe(true);
  // AND the workloads ran under the installed binary, each on a node provisioned before it started
  for (const name of workloads) {
    const done = await podWhen(name, ['Succeeded', 'Failed']);
    expect(done.status.phase).toBe('Succeeded');
    const install = installs.find(p => p.node === done.spec.nodeName)!;
    expect(Date.parse(done.status.startTime)).toBeGreaterThanOrEqual(install.finished!);
    expect(runtimeOf(done)).toBe(installedBinary('v1'));
  }
  // AND one pinned to each node, too
  for (const n of cluster.nodes) await createPod(pod(`s1-on-${n.name}`, 'true', { runtimeClassName: SHIM, nodeName: n.name }));
  for (const n of cluster.nodes) {
    const done = await podWhen(`s1-on-${n.name}`, ['Succeeded', 'Failed']);
    expect(done.status.phase).toBe('Succeeded');
    expect(runtimeOf(done)).toBe(installedBinary('v1'));
  }
  await deleteWorkloads();
});
