import * as fs from 'fs';
import { ClientRequest } from 'http';
import * as https from 'https';
import * as path from 'path';
import { Rollout, ShimConstructProps, ShimNodeLabels } from '../../src';
import {
  addPayloadShim, applyApp, applyFile, Artifact, condition, containerdStarts, createPod, deleteWorkloads, diagnostics, fleet, getNode,
  handlerOf, handlersOf, NS, payloadShim, podWhen, publishShimPayload, runtimeOf, setUpFleet, SHIMS, sleep, step as fleetStep, synthFleetApp,
  workloadPod,
} from '../support/fleet-app';
import { ArtifactServer } from '../support/installer-bundle';
import { K3S_TEMPLATE, MultiNodeCluster } from '../support/multi-node-cluster';
import { nodeStatesDuring } from '../support/node-watch';
import { INSTALLER_IMAGE } from '../support/product-images';
import { eventually, Rest } from '../support/rest';
import { buildWasmImage, buildWasmPayload, packShimRelease, SHIM_RELEASES, ShimRelease, WASM_VARIANT_ANNOTATION } from '../support/wasm';

// The product on a fleet: three real kubelets (tools.ts: KUBE_VERSION) on this machine, one control plane, each
// node with its own containerd. Two nodes are production-shaped: PID 1 is a real systemd
// (systemd-nspawn), containerd runs under Debian's stock containerd.service with systemd's
// default start limit (5 starts in 10 s), runc with SystemdCgroup = true, the kubelet as
// kubelet.service with the systemd cgroup driver: A with containerd 2.4 and its own default
// config (version 4; its kubelet lists status.runtimeHandlers), B with 1.7 and an admin's
// customised config behind a symlink (its kubelet lists no handlers). The third, C, is k3s-shaped (its own mount
// and pid namespaces, a systemctl stand-in; containerd 1.6, no handlers listed). The app is synthesized with cdk8s and applied with
// kubectl; the controller runs as pods and its installer Jobs reach each node's containerd
// through nsenter into PID 1 and the default `systemctl restart`: on A and B that is the
// node's systemd, start limit and all. Results are read from the API and from the nodes' own
// files and journals. Needs root and scripts/provision.sh (the nodes' root file system); run it
// with `npx projen e2e:multinode`.

const NODES = { 'rcm-node-a': 'plain', 'rcm-node-b': 'custom', 'rcm-node-c': 'k3s' } as const;
const [A, B, C] = Object.keys(NODES);
const SHIM = 'fleet';
const HANDLER = 'fleet';
const NEXT_HANDLER = 'fleet-next';
const PROBE = 'probe';
const FLEET_LABEL = 'e2e.rcm.dev/fleet';
const PROBE_LABEL = 'e2e.rcm.dev/probe';
const HANDLER_LABEL = ShimNodeLabels.handlerKey(SHIM);
const STATE_LABEL = ShimNodeLabels.stateKey(SHIM);

setUpFleet(NODES);
let cluster: MultiNodeCluster;
let api: Rest;
let work: string;
let server: ArtifactServer;
/** Each node's effective containerd config, edited file and install root before anything was installed. */
const start: Record<string, { dump: string; edited: string; link?: string }> = {};

const artifacts: Record<string, Artifact> = {};

/**
 * A payload with a real shim (containerd's runc shim under the handler's name), made distinct
 * by `version`. The Shims give it as a payload with `runtimeType: io.containerd.runc.v2` (the
 * README's way for runc-based shims): the handler is `runtime_type = "io.containerd.runc.v2"`
 * plus `runtime_path`, so containerd hands the shim runc's options. Nodes A and B run runc with
 * SystemdCgroup = true, which the installer gives the handler too; a shim given by path only
 * gets its options as `runtimeoptions.v1.Options` on containerd 1.x, and runc's shim refuses
 * those: no pod could start under it there ("type with url runtimeoptions.v1.Options: not found").
 */
async function publish(version: string, handler: string): Promise<void> {
  artifacts[version] = await publishShimPayload(version, handler, `rcm-fleet ${version}`);
}

/** Where the installer puts a version's shim on a node (the payload's own folder, named by the artifact's sha256). */
function installedBinary(version: string): string {
  return payloadShim(artifacts[version]);
}

/**
 * The shim that runs a pod of the fleet's handler on a node serving `version`: the payload's
 * where containerd honours runtime_path (1.7 and later: A and B), else containerd's own shim of
 * the runtime_type, which then gets the handler's options: containerd 1.6's CRI never hands
 * runtime_path to the task it starts (containerd/containerd#8207, fixed in 1.7; seen here with
 * 1.6.20 on C).
 */
function shimServing(node: string, version: string): string {
  return runtimePathHonoured[node] ? installedBinary(version) : ownRuncShim[node];
}
/** Per node: does its containerd start a handler's runtime_path (1.7 and later)? */
const runtimePathHonoured: Record<string, boolean> = {};
/**
 * Per node: does its containerd, started again, ask each shim it reconnects to for Task.Pids and
 * end the containers of one that does not answer (1.7 and later: containerd#6866)? runwasi's
 * shims do not serve it (runwasi#207).
 */
const reloadAsksPids: Record<string, boolean> = {};
/** Per node: containerd's own runc shim (the path it runs from, links resolved). */
const ownRuncShim: Record<string, string> = {};

/** The handler's entry in containerd's config when it serves `version`. */
function servedBy(version: string): object {
  return { runtime_type: 'io.containerd.runc.v2', runtime_path: installedBinary(version) };
}

interface AppShim {
  readonly name: string;
  readonly version: string;
  readonly selector: Record<string, string>;
  /** Props of its own instead of the fleet's artifact of `version` (the Wasm Shim). */
  readonly props?: ShimConstructProps;
}

/**
 * The app a fleet operator writes (synthFleetApp: the manager with its defaults, nothing per
 * node, and the test bed's overrides), rolling one node at a time, with `replicas` controllers.
 */
function synthApp(shims: AppShim[], replicas = 1, createRuntimeClass?: boolean): string {
  return synthFleetApp('fleet', { replicas }, manager => {
    for (const s of shims) {
      if (s.props) {
        manager.addShim(s.name, { ...s.props, nodeSelector: s.selector });
        continue;
      }
      // By default the controller alone writes the RuntimeClass; `true` is the constructs' earlier
      // output, which the upgrade step applies before the handler change.
      addPayloadShim(manager, s.name, artifacts[s.version], s.selector, { createRuntimeClass });
    }
  });
}

/** `cdk8s synth` then `kubectl apply --server-side`, pruning Shims no longer in the app the GitOps way: by deleting them. */
function apply(shims: AppShim[], replicas = 1): void {
  applyApp(synthApp(shims, replicas));
}

function label(node: string, key: string, value: string | null): void {
  cluster.controlPlane.kubectl(['label', 'node', node, value === null ? `${key}-` : `${key}=${value}`, '--overwrite']);
}

async function getShim(name: string): Promise<any> {
  return api.get(`${SHIMS}/${name}`);
}

async function shimReady(name: string, nodes: number, revision?: (r: string) => boolean): Promise<any> {
  return eventually(async () => {
    const s = await getShim(name);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === nodes && s.status.nodes === nodes
      && (!revision || revision(s.status.revision)) ? s : undefined;
  }, 240_000, diagnostics);
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

/**
 * Installer pods from a watch of the API (so no state is missed, however soon the controller
 * removes a finished Job): each pod's last start and finish, and the most nodes with an
 * installer pending or running at one time.
 */
class InstallerPods {
  /** Starts watching; installer pods that exist already (of an earlier step) are left out. */
  static async from(): Promise<InstallerPods> {
    const list = await api.get(`/api/v1/namespaces/${NS}/pods`);
    const watch = new InstallerPods(new Set(list.items.map((p: any) => p.metadata.name)));
    watch.start(list.metadata.resourceVersion);
    watchers.push(watch);
    return watch;
  }

  readonly seen = new Map<string, InstallerPod>();
  private readonly live = new Set<string>();
  private maxConcurrent = 0;
  private resourceVersion = '';
  private request?: ClientRequest;
  private stopped = false;
  private broken?: string;

  private constructor(private readonly earlier: Set<string>) {}

  /** The installer pods that exist now (as of the last event). */
  async poll(): Promise<InstallerPod[]> {
    await sleep(50);
    if (this.broken) throw new Error(`the watch of installer pods broke: ${this.broken}`);
    return [...this.live].map(name => this.seen.get(name)!);
  }

  get mostNodesAtOnce(): number {
    return this.maxConcurrent;
  }

  of(filter: Partial<InstallerPod>): InstallerPod[] {
    if (this.broken) throw new Error(`the watch of installer pods broke: ${this.broken}`);
    return [...this.seen.values()].filter(p => Object.entries(filter).every(([k, v]) => (p as any)[k] === v));
  }

  stop(): void {
    this.stopped = true;
    this.request?.destroy();
  }

  private start(resourceVersion: string): void {
    this.resourceVersion = resourceVersion;
    const cp = cluster.controlPlane;
    const url = new URL(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${resourceVersion}`, cp.server);
    const req = https.get(url, { ca: fs.readFileSync(cp.caFile), headers: { Authorization: `Bearer ${cp.adminToken}` }, agent: false }, res => {
      let buffer = '';
      res.on('data', chunk => {
        buffer += chunk;
        for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
          const line = buffer.slice(0, i);
          buffer = buffer.slice(i + 1);
          if (line.trim()) this.onEvent(JSON.parse(line));
        }
      });
      res.on('end', () => {
        if (!this.stopped) this.start(this.resourceVersion);
      });
    });
    req.on('error', e => {
      if (!this.stopped) this.broken = e.message;
    });
    this.request = req;
  }

  private onEvent(event: { type: string; object: any }): void {
    const p = event.object;
    if (event.type === 'ERROR') {
      this.broken = p.message ?? JSON.stringify(p);
      return;
    }
    this.resourceVersion = p.metadata.resourceVersion;
    const a = p.metadata.annotations ?? {};
    if (!a['runtime.spinkube.dev/operation'] || this.earlier.has(p.metadata.name)) return;
    const entry: InstallerPod = this.seen.get(p.metadata.name) ?? {
      name: p.metadata.name,
      node: p.spec.nodeName,
      shim: a['runtime.spinkube.dev/shim'],
      operation: a['runtime.spinkube.dev/operation'],
      revision: a['runtime.spinkube.dev/revision'],
      attempt: a['runtime.spinkube.dev/attempt'],
      phase: '',
    };
    entry.phase = p.status?.phase;
    const state = p.status?.containerStatuses?.[0]?.state ?? {};
    const t = state.terminated ?? state.running;
    if (t?.startedAt) entry.started = Date.parse(t.startedAt);
    if (state.terminated) {
      entry.finished = Date.parse(state.terminated.finishedAt);
      entry.reason = state.terminated.reason;
    }
    this.seen.set(entry.name, entry);
    if (event.type === 'DELETED') this.live.delete(entry.name);
    else this.live.add(entry.name);
    const busy = new Set([...this.live].map(n => this.seen.get(n)!).filter(x => x.phase === 'Pending' || x.phase === 'Running').map(x => x.node));
    this.maxConcurrent = Math.max(this.maxConcurrent, busy.size);
  }
}
const watchers: InstallerPods[] = [];

/** The runs of a rollout must not overlap: each starts after the one before finished (API times are in whole seconds). */
function expectOneAtATime(all: InstallerPod[]): void {
  // A pod removed before it started (its Job superseded while the node was down) never ran.
  const pods = all.filter(p => p.started !== undefined);
  // Every run that started must have finished: the watch saw every state.
  expect(pods.filter(p => p.finished === undefined)).toEqual([]);
  const sorted = [...pods].sort((x, y) => x.started! - y.started!);
  for (let i = 1; i < sorted.length; i++) {
    const [before, after] = [sorted[i - 1], sorted[i]];
    const overlaps = after.started! < before.finished!;
    expect({ after: after.name, started: after.started, before: before.name, ended: before.finished, overlaps }).toMatchObject({ overlaps: false });
  }
}

/** A scenario step (see fleet-app.ts's); `cleanup` undoes what it broke on purpose, pass or fail. The installer pod watches it started end with it. */
function step(name: string, fn: () => Promise<void>, cleanup?: () => void, timeoutMs?: number): void {
  fleetStep(name, fn, () => {
    for (const w of watchers.splice(0)) w.stop();
    cleanup?.();
  }, timeoutMs);
}

beforeAll(async () => {
  ({ cluster, api, work, server } = fleet());
  for (const v of ['v1', 'v2', 'v3', 'v4']) await publish(v, HANDLER);
  await publish('v5', NEXT_HANDLER);
  for (const w of WAVE) await publish(w, w);
  for (const n of cluster.nodes) {
    const [major, minor] = (/ v?(\d+)\.(\d+)\./.exec(n.host.run([n.containerd, '--version'])) ?? []).slice(1).map(Number);
    runtimePathHonoured[n.name] = major >= 2 || minor >= 7;
    reloadAsksPids[n.name] = major >= 2 || minor >= 7;
    ownRuncShim[n.name] = n.host.run(['readlink', '-f', path.join(path.dirname(n.containerd), 'containerd-shim-runc-v2')]).trim();
    start[n.name] = {
      dump: n.configDump(),
      edited: n.host.read(n.editedConfig)!,
      link: n.host.tryRun(['readlink', '/etc/containerd/config.toml']).stdout.trim() || undefined,
    };
  }
}, 600_000);

step('the cluster: three Ready nodes, each with its own containerd, and a hostPID pod lands in its own node\'s view', async () => {
  // GIVEN two production-shaped nodes: systemd as PID 1, Debian's stock containerd.service with
  // the default start limit, runc and the kubelet on the systemd cgroup driver
  for (const n of [cluster.node(A), cluster.node(B)]) {
    expect(n.kind).toBe('systemd');
    const sd = n.systemd!;
    expect(sd.exec(['cat', '/proc/1/comm']).trim()).toBe('systemd');
    expect(sd.show('containerd', ['StartLimitBurst', 'StartLimitIntervalUSec', 'FragmentPath', 'Restart'])).toEqual({
      StartLimitBurst: '5', StartLimitIntervalUSec: '10s', FragmentPath: '/lib/systemd/system/containerd.service', Restart: 'always',
    });
    expect(sd.unitState('containerd')).toMatchObject({ activeState: 'active', subState: 'running' });
    expect(sd.unitState('kubelet')).toMatchObject({ activeState: 'active', subState: 'running' });
    expect(handlersOf(n.configDump()).runc.options.SystemdCgroup).toBe(true);
    expect(n.host.read('/var/lib/kubelet/config.yaml')).toMatch(/^cgroupDriver: systemd$/m);
  }
  expect(cluster.node(C).kind).toBe('nodehost');
  // THEN every node runs its own containerd version
  const versions = await Promise.all(cluster.nodes.map(async n => (await getNode(n.name)).status.nodeInfo.containerRuntimeVersion));
  expect(versions).toEqual([expect.stringMatching(/^containerd:\/\/v?2\.4\./), expect.stringMatching(/^containerd:\/\/1\.7\./), expect.stringMatching(/^containerd:\/\/1\.6\./)]);
  // AND k3s's node has no containerd on its PATH, only in k3s's folder
  expect(cluster.node(C).host.tryRun(['sh', '-c', 'command -v containerd']).code).not.toBe(0);
  // WHEN a privileged hostPID pod with the host's / (as the installer's) runs on each node
  const script = [
    'const fs = require("fs"); const { execFileSync } = require("child_process");',
    'const viaHostRoot = fs.readFileSync("/host/etc/rcm-node/name", "utf8");',
    'const viaNsenter = execFileSync("nsenter", ["--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", "cat", "/etc/rcm-node/name"], { encoding: "utf8" });',
    'const init = fs.readFileSync("/proc/1/cmdline", "utf8").split("\\0").join(" ").trim();',
    'const kubeletPods = fs.readdirSync("/host/var/lib/kubelet/pods");',
    'const sockets = ["/run/containerd/containerd.sock", "/run/k3s/containerd/containerd.sock"].filter(s => fs.existsSync("/host" + s));',
    'fs.writeFileSync("/dev/termination-log", JSON.stringify({ viaHostRoot, viaNsenter, init, kubeletPods, sockets }));',
  ].join('\n');
  for (const n of cluster.nodes) {
    await createPod({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: `probe-${n.name}`, namespace: 'default', labels: { 'e2e.rcm.dev/workload': 'true' } },
      spec: {
        nodeName: n.name,
        hostPID: true,
        hostNetwork: true,
        restartPolicy: 'Never',
        automountServiceAccountToken: false,
        containers: [{
          name: 'probe',
          image: INSTALLER_IMAGE,
          imagePullPolicy: 'IfNotPresent',
          command: ['/usr/local/bin/node', '-e', script],
          securityContext: { privileged: true },
          volumeMounts: [{ name: 'host', mountPath: '/host' }],
        }],
        volumes: [{ name: 'host', hostPath: { path: '/', type: 'Directory' } }],
      },
    });
  }
  // THEN the host root and nsenter into PID 1 both land in that pod's own node: its name, its
  // init, its kubelet's pods (this probe's, none of the other nodes'), its containerd's socket
  const probes = await Promise.all(cluster.nodes.map(n => podWhen(`probe-${n.name}`, ['Succeeded', 'Failed'])));
  for (const [i, n] of cluster.nodes.entries()) {
    const done = probes[i];
    expect(done.status.phase).toBe('Succeeded');
    const seen = JSON.parse(done.status.containerStatuses[0].state.terminated.message);
    expect(seen).toMatchObject({
      viaHostRoot: `${n.name}\n`,
      viaNsenter: `${n.name}\n`,
      init: n.kind === 'systemd' ? expect.stringMatching(/^\/lib\/systemd\/systemd( |$)/) : 'bash /etc/rcm-node/init',
      sockets: [n.socket],
    });
    expect(seen.kubeletPods).toContain(done.metadata.uid);
    expect(seen.kubeletPods.filter((uid: string) => probes.some(p => p.metadata.uid === uid))).toEqual([done.metadata.uid]);
    // AND the node's containers are in the node's own cgroups: below its cgroup root (cgroupfs),
    // or in a systemd slice of the pod's (systemd driver) below the node's own cgroup on this machine
    const id = String(done.status.containerStatuses[0].containerID).replace('containerd://', '');
    const cgroupsPath = JSON.parse(n.ctr(['-n', 'k8s.io', 'containers', 'info', id])).Spec.linux.cgroupsPath;
    if (n.kind === 'systemd') {
      expect(cgroupsPath).toBe(`kubepods-besteffort-pod${done.metadata.uid.replace(/-/g, '_')}.slice:cri-containerd:${id}`);
      expect(fs.existsSync(path.join(n.cgroupRoot, 'kubepods.slice', 'kubepods-besteffort.slice'))).toBe(true);
    } else {
      expect(cgroupsPath).toMatch(new RegExp(`^${n.cgroupRoot}/`));
    }
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
  expect(handlersOf(a.configDump())[HANDLER]).toMatchObject(servedBy('v1'));
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
  const watch = await InstallerPods.from();
  // WHEN the fleet Shim is applied
  apply([{ name: SHIM, version: 'v1', selector: { [FLEET_LABEL]: 'true' } }]);
  // AND workloads keep arriving during the rollout
  const workloads: string[] = [];
  let ready: any;
  for (let i = 0; !ready; i++) {
    await watch.poll();
    if (i % 8 === 0) {
      const name = `s1-${workloads.length}`;
      // The controller creates the RuntimeClass; until it has, admission refuses such pods.
      const created = await createPod(workloadPod(name, 'true', { runtimeClassName: SHIM })).then(() => true, e => {
        if (!/RuntimeClass .* not found/.test(String(e))) throw e;
        return false;
      });
      if (created) workloads.push(name);
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
    expect((await getNode(n.name)).metadata.labels).toMatchObject({ [HANDLER_LABEL]: HANDLER, [STATE_LABEL]: 'provisioned' });
    expect(handlersOf(n.configDump())[HANDLER]).toMatchObject(servedBy('v1'));
  }
  // AND the k3s node got it through its template, which keeps the base directive and the site's runtime
  const template = cluster.node(C).host.read(cluster.node(C).editedConfig)!;
  expect(template.startsWith(K3S_TEMPLATE)).toBe(true);
  // AND the workloads ran under the installed binary, each on a node provisioned before it started
  expect(workloads.length).toBeGreaterThan(2);
  for (const name of workloads) {
    const done = await podWhen(name, ['Succeeded', 'Failed']);
    expect(done.status.phase).toBe('Succeeded');
    const install = installs.find(p => p.node === done.spec.nodeName)!;
    expect(Date.parse(done.status.startTime)).toBeGreaterThanOrEqual(install.finished!);
    expect(runtimeOf(done)).toBe(shimServing(done.spec.nodeName, 'v1'));
    expect(handlerOf(done)).toBe(HANDLER);
  }
  // AND one pinned to each node, too
  for (const n of cluster.nodes) await createPod(workloadPod(`s1-on-${n.name}`, 'true', { runtimeClassName: SHIM, nodeName: n.name }));
  for (const n of cluster.nodes) {
    const done = await podWhen(`s1-on-${n.name}`, ['Succeeded', 'Failed']);
    expect(done.status.phase).toBe('Succeeded');
    expect(runtimeOf(done)).toBe(shimServing(done.spec.nodeName, 'v1'));
    expect(handlerOf(done)).toBe(HANDLER);
  }
  await deleteWorkloads();
});

const FLEET = { [FLEET_LABEL]: 'true' };
/** The six Shims of the wave step: each its own handler, artifact and RuntimeClass (all named alike). */
const WAVE = ['wave-1', 'wave-2', 'wave-3', 'wave-4', 'wave-5', 'wave-6'];
const WAVE_LABEL = 'e2e.rcm.dev/wave';

/** Runs a pod of the Shim's RuntimeClass pinned to a node, and an ordinary one; returns the runtime of the first. */
async function serves(n: string, tag: string): Promise<string> {
  await createPod(workloadPod(`${tag}-shim-${n}`, 'true', { runtimeClassName: SHIM, nodeName: n }));
  await createPod(workloadPod(`${tag}-plain-${n}`, 'true', { nodeName: n }));
  const plain = await podWhen(`${tag}-plain-${n}`, ['Succeeded', 'Failed']);
  expect(plain.status.phase).toBe('Succeeded');
  const withShim = await podWhen(`${tag}-shim-${n}`, ['Succeeded', 'Failed']);
  expect(withShim.status.phase).toBe('Succeeded');
  expect(handlerOf(withShim)).toBe(HANDLER);
  return runtimeOf(withShim);
}

step('scenario 2: a node whose containerd refuses to come back rolls back, keeps serving, and stops the rollout (Degraded names it); the documented recovery resumes it', async () => {
  const [a, b, c] = cluster.nodes;
  const since = Date.now();
  // GIVEN node B's containerd refuses to start with the new version in its config (a broken node, on purpose)
  b.host.write('/etc/rcm-node/fault/containerd',
    `if grep -q '${installedBinary('v2')}' /etc/containerd/config.toml; then echo "containerd: refusing to start (test fault)"; exit 1; fi\n`);
  const watch = await InstallerPods.from();
  // WHEN a new version rolls out
  apply([{ name: SHIM, version: 'v2', selector: FLEET }]);
  // THEN the Shim turns Degraded, naming node B and the installer's reason
  const degraded = await eventually(async () => {
    await watch.poll();
    const s = await getShim(SHIM);
    return condition(s, 'Degraded')?.status === 'True' ? s : undefined;
  }, 240_000, diagnostics);
  expect(condition(degraded, 'Degraded')).toMatchObject({ reason: 'InstallFailed', message: expect.stringContaining(B) });
  expect(condition(degraded, 'Degraded').message).toContain('RestartFailedRolledBack');
  const bNode = await getNode(B);
  expect(bNode.metadata.labels).toMatchObject({ [STATE_LABEL]: 'failed', [HANDLER_LABEL]: HANDLER });
  expect(JSON.parse(bNode.metadata.annotations[ShimNodeLabels.failureKey(SHIM)])).toMatchObject({ reason: 'RestartFailedRolledBack' });
  // AND B's containerd did refuse (starts that failed: systemd's start jobs failed), and B was rolled back to the previous version each time
  expect(b.host.unitEvents('containerd').filter(e => e.event === 'exit' && e.at > since).length).toBeGreaterThan(0);
  expect(b.host.unitEvents('containerd').filter(e => e.event === 'failed' && e.at > since).length).toBeGreaterThan(0);
  expect(b.host.unitOutput('containerd')).toContain('refusing to start (test fault)');
  // AND B's systemd never refused a start for the start limit, and containerd runs (the installer's restarts are paced)
  expect(b.systemd!.startLimitHits('containerd')).toBe(0);
  expect(b.systemd!.unitState('containerd')).toMatchObject({ activeState: 'active', subState: 'running' });
  expect(handlersOf(b.configDump())[HANDLER]).toMatchObject(servedBy('v1'));
  expect(watch.of({ node: B, operation: 'install' }).filter(p => p.reason === 'Error')).toHaveLength(2);
  // AND A has the new version; the rollout stopped before C: no install there, still the old version
  expect(handlersOf(a.configDump())[HANDLER]).toMatchObject(servedBy('v2'));
  await sleep(8000);
  await watch.poll();
  expect(watch.of({ node: C })).toEqual([]);
  expect(handlersOf(c.configDump())[HANDLER]).toMatchObject(servedBy('v1'));
  // AND B keeps serving ordinary pods and the previous version
  expect(await serves(B, 's2')).toBe(shimServing(B, 'v1'));
  await deleteWorkloads();

  // WHEN the cause is fixed and the Shim is given a new retry annotation (the README's recovery)
  b.host.run(['rm', '/etc/rcm-node/fault/containerd']);
  cluster.controlPlane.kubectl(['annotate', 'shim', SHIM, `runtime.spinkube.dev/retry=${Date.now()}`, '--overwrite']);
  // THEN the rollout resumes: B, then C, one at a time, and the Shim is Ready again
  await eventually(async () => {
    await watch.poll();
    const s = await getShim(SHIM);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 3 && condition(s, 'Degraded')?.status === 'False';
  }, 240_000, diagnostics);
  await watch.poll();
  expectOneAtATime(watch.of({ shim: SHIM, operation: 'install' }));
  for (const n of cluster.nodes) expect(handlersOf(n.configDump())[HANDLER]).toMatchObject(servedBy('v2'));
  expect((await getNode(B)).metadata.labels[STATE_LABEL]).toBe('provisioned');
  expect((await getNode(B)).metadata.annotations[ShimNodeLabels.failureKey(SHIM)]).toBeUndefined();
}, () => void cluster.node(B).host.run(['rm', '-f', '/etc/rcm-node/fault/containerd']));

step('scenario 3: a kubelet stopped mid-rollout: the rest of the fleet completes, the node is installed when its kubelet returns', async () => {
  const c = cluster.node(C);
  const watch = await InstallerPods.from();
  // WHEN a new version starts rolling out and node C's kubelet stops while A is installing
  apply([{ name: SHIM, version: 'v3', selector: FLEET }]);
  await eventually(async () => (await watch.poll()).some(p => p.node === A), 60_000, diagnostics);
  c.host.systemctl('stop', 'kubelet');
  // THEN C goes NotReady
  await eventually(async () => {
    await watch.poll();
    return (await getNode(C)).status.conditions.find((x: any) => x.type === 'Ready')?.status !== 'True';
  }, 90_000, diagnostics);
  // AND A and B complete, while C keeps the previous version
  await eventually(async () => {
    await watch.poll();
    return [A, B].every(n => handlersOf(cluster.node(n).configDump())[HANDLER]?.runtime_path === installedBinary('v3'));
  }, 240_000, diagnostics);
  const meanwhile = await eventually(async () => {
    await watch.poll();
    const s = await getShim(SHIM);
    return s.status.nodesReady === 2 ? s : undefined;
  }, 120_000, diagnostics);
  expect(condition(meanwhile, 'Degraded')?.status).toBe('False');
  expect(handlersOf(c.configDump())[HANDLER]).toMatchObject(servedBy('v2'));
  expect(watch.of({ node: C }).filter(p => p.started !== undefined)).toEqual([]);

  // WHEN C's kubelet returns
  c.host.systemctl('start', 'kubelet');
  // THEN C is installed too, and the Shim is Ready on all three
  await eventually(async () => {
    await watch.poll();
    const s = await getShim(SHIM);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 3;
  }, 240_000, diagnostics);
  for (const n of cluster.nodes) expect(handlersOf(n.configDump())[HANDLER]).toMatchObject(servedBy('v3'));
  expectOneAtATime(watch.of({ shim: SHIM, operation: 'install' }));
  expect(await serves(C, 's3')).toBe(shimServing(C, 'v3'));
  await deleteWorkloads();
}, () => cluster.node(C).host.systemctl('start', 'kubelet'));

step('scenario 4: two controller replicas; the leader killed mid-rollout; the other takes over within the lease time and no node installs twice', async () => {
  // GIVEN two replicas of the controller
  apply([{ name: SHIM, version: 'v3', selector: FLEET }], 2);
  const controllers = async () => (await api.get(`/api/v1/namespaces/${NS}/pods?labelSelector=${encodeURIComponent('app.kubernetes.io/component=controller')}`)).items;
  // (two replicas change the pod template: the Deployment rolls its pods, and the step starts once that is over)
  await eventually(async () => {
    const d = await api.get(`/apis/apps/v1/namespaces/${NS}/deployments/rcm-controller`);
    const s = d.status ?? {};
    return s.observedGeneration === d.metadata.generation && s.replicas === 2 && s.updatedReplicas === 2 && s.readyReplicas === 2;
  }, 120_000, diagnostics);
  const lease = () => api.get(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/rcm-controller`);
  // The identity is the pod's name, '_' and a suffix per process (pod names have no '_').
  const podOf = async (identity: string) => (await controllers()).find((p: any) => p.metadata.name === identity.split('_')[0] && !p.metadata.deletionTimestamp);
  const leader = await eventually(async () => {
    const holder = (await lease()).spec.holderIdentity;
    return holder && await podOf(holder) ? holder as string : undefined;
  }, 60_000, diagnostics);
  const leaderPod = await podOf(leader);
  expect(leaderPod).toBeDefined();
  const since = Date.now();
  const watch = await InstallerPods.from();
  // WHEN a new version rolls out and the leader is killed (SIGKILL: no clean hand-over) while the first node installs
  apply([{ name: SHIM, version: 'v4', selector: FLEET }], 2);
  await eventually(async () => (await watch.poll()).some(p => p.operation === 'install'), 60_000, diagnostics);
  const containerId = String(leaderPod.status.containerStatuses[0].containerID).replace('containerd://', '');
  const killedAt = Date.now();
  cluster.node(leaderPod.spec.nodeName).ctr(['-n', 'k8s.io', 'tasks', 'kill', '--signal', 'SIGKILL', containerId]);
  // THEN the other replica holds the lease within the lease time (15 s) and a poll of the lease (3 s)
  const takeover = await eventually(async () => {
    await watch.poll();
    const l = await lease();
    return l.spec.holderIdentity !== leader && l.spec.holderIdentity ? Date.now() : undefined;
  }, 60_000, diagnostics);
  expect(takeover - killedAt).toBeLessThanOrEqual(20_000);
  // AND the rollout completes
  await eventually(async () => {
    await watch.poll();
    const s = await getShim(SHIM);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 3
      && cluster.nodes.every(n => handlersOf(n.configDump())[HANDLER]?.runtime_path === installedBinary('v4'));
  }, 240_000, diagnostics);
  await watch.poll();
  // AND every node installed once: one installer pod per node, one containerd restart per node
  const installs = watch.of({ shim: SHIM, operation: 'install' });
  expect(installs.map(p => p.node).sort()).toEqual([A, B, C]);
  expectOneAtATime(installs);
  for (const n of cluster.nodes) expect(containerdStarts(n, since)).toHaveLength(1);
});

step('upgrade from an app that synthesized its RuntimeClass: its handler change would be refused; the default output\'s applies cleanly', async () => {
  const rcPath = `/apis/node.k8s.io/v1/runtimeclasses/${SHIM}`;
  // GIVEN the app as the constructs synthesized it before (the RuntimeClass in the manifests), applied over the fleet
  const legacy = (version: string) => {
    const file = path.join(work, `app-legacy-${version}.yaml`);
    fs.writeFileSync(file, synthApp([{ name: SHIM, version, selector: FLEET }], 2, true));
    return file;
  };
  applyFile(legacy('v4'));
  // THEN the RuntimeClass is the app's and the controller's at once (adopted, not fought over)
  const rc = await api.get(rcPath);
  expect(rc.metadata.managedFields.map((f: any) => f.manager).sort()).toEqual(['e2e-gitops', 'rcm-controller']);
  expect(rc.metadata.ownerReferences[0]).toMatchObject({ kind: 'Shim', name: SHIM });
  // AND with that output a handler change is refused on the RuntimeClass (README: createRuntimeClass)
  expect(() => applyFile(legacy('v5'), ['--dry-run=server'])).toThrow(/RuntimeClass|handler/);
  // WHEN the app moves to the default output, which leaves the RuntimeClass to the controller, with the new handler
  const file = path.join(work, 'app-default-v5.yaml');
  fs.writeFileSync(file, synthApp([{ name: SHIM, version: 'v5', selector: FLEET }], 2));
  // THEN it applies cleanly (scenario 6 applies it for real and follows the rollout)
  expect(fs.readFileSync(file, 'utf8')).not.toMatch(/kind: RuntimeClass/);
  applyFile(file, ['--dry-run=server']);
});

step('scenario 6: a handler change across the fleet, applied with kubectl apply --server-side: the RuntimeClass never selects a node without the handler; no pod fails with "no runtime for"', async () => {
  const watch = await InstallerPods.from();
  const since = Date.now();
  // WHEN the Shim's handler changes (a new artifact for the new handler), in the default output
  // applied over the earlier one (the upgrade step): the apply succeeds, or this throws
  apply([{ name: SHIM, version: 'v5', selector: FLEET }], 2);
  // THEN at every poll, each node the RuntimeClass selects has its handler in containerd's config,
  // and pods of the RuntimeClass keep arriving all along
  const workloads: string[] = [];
  const refusedAtAdmission: string[] = [];
  let polls = 0;
  for (let i = 0; ; i++) {
    await watch.poll();
    // A new handler replaces the RuntimeClass (its handler is immutable): for a moment there is none.
    const rc = await api.get(`/apis/node.k8s.io/v1/runtimeclasses/${SHIM}`).catch((e: any) => {
      if (e.code !== 404) throw e;
      return undefined;
    });
    const selector = Object.entries(rc?.scheduling?.nodeSelector ?? {}).map(([k, v]) => `${k}=${v}`).join(',');
    const selected = !rc ? [] : (await api.get(`/api/v1/nodes?labelSelector=${encodeURIComponent(selector)}`)).items.map((n: any) => n.metadata.name);
    for (const name of selected) {
      const n = cluster.node(name);
      // what containerd reads, drop-ins included (containerd 2.x: the handler is in an imported file)
      expect({ node: name, handler: rc.handler, present: handlersOf(n.configDump())[rc.handler] !== undefined })
        .toEqual({ node: name, handler: rc.handler, present: true });
    }
    polls++;
    if (i % 6 === 0) {
      const name = `s6-${workloads.length}`;
      // Admission refuses a pod whose RuntimeClass does not exist (the moment of the replacement): counted, and sent again.
      // The pods restart on failure, as a Deployment's or a Job's do: a container whose start the
      // kubelet asked for as an installer restarted containerd fails with "transport is closing"
      // (RunContainerError), which ended a restartPolicy Never pod Failed in a fresh-clone CI run;
      // the kubelet's retry must then start it. A missing runtime is still checked below.
      await createPod(workloadPod(name, 'true', { runtimeClassName: SHIM, restartPolicy: 'OnFailure' })).catch(e => {
        if (!/RuntimeClass/.test(String(e))) throw e;
        refusedAtAdmission.push(String(e).slice(0, 200));
      });
      workloads.push(name);
    }
    const s = await getShim(SHIM);
    const done = condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 3
      && cluster.nodes.every(n => handlersOf(n.configDump())[HANDLER] === undefined);
    if (done) break;
    if (Date.now() - since > 300_000) throw new Error('the handler change did not finish within 300 s');
    await sleep(300);
  }
  expect(polls).toBeGreaterThan(10);
  // AND the new handler is on every node, the old one gone, each install then uninstall one node at a time
  for (const n of cluster.nodes) {
    const handlers = handlersOf(n.configDump());
    expect(handlers[NEXT_HANDLER]).toMatchObject(servedBy('v5'));
    expect(handlers[HANDLER]).toBeUndefined();
    expect((await getNode(n.name)).metadata.labels[HANDLER_LABEL]).toBe(NEXT_HANDLER);
  }
  expectOneAtATime(watch.of({ shim: SHIM }));
  // AND the RuntimeClass is the controller's alone now, for the new handler (the app's copy went with the replacement)
  const rc = await api.get(`/apis/node.k8s.io/v1/runtimeclasses/${SHIM}`);
  expect(rc.handler).toBe(NEXT_HANDLER);
  expect(rc.metadata.managedFields.map((f: any) => f.manager)).toEqual(['rcm-controller']);
  // AND every pod ran, none refused for a missing runtime (podWhen waits beyond the kubelet's
  // CRI timeout: a fresh-clone CI run saw one on B stuck for 2 minutes, RunContainerError
  // "transport is closing", then no sandbox).
  for (const name of workloads) {
    if (!await api.get(`/api/v1/namespaces/default/pods/${name}`).catch(() => undefined)) {
      await createPod(workloadPod(name, 'true', { runtimeClassName: SHIM, restartPolicy: 'OnFailure' }));
    }
    const p = await podWhen(name, ['Succeeded', 'Failed']);
    expect(p.status.phase).toBe('Succeeded');
  }
  if (refusedAtAdmission.length > 0) process.stdout.write(`scenario 6: ${refusedAtAdmission.length} pod(s) refused at admission while the RuntimeClass was replaced:\n${refusedAtAdmission.join('\n')}\n`);
  const refused = (await api.get('/api/v1/namespaces/default/events')).items
    .filter((e: any) => /no runtime for/.test(e.message ?? '')).map((e: any) => `${e.involvedObject.name}: ${e.message}`);
  expect(refused).toEqual([]);
  await deleteWorkloads();
});

step('scenario 5: deselecting a node, then deleting the Shim, uninstall one node at a time and leave every node as it started', async () => {
  const watch = await InstallerPods.from();
  const c = cluster.node(C);
  // WHEN node C stops matching the Shim's selector
  label(C, FLEET_LABEL, null);
  // THEN C is uninstalled: no label, its effective config and its template as they were
  await eventually(async () => {
    await watch.poll();
    const labels = (await getNode(C)).metadata.labels;
    return labels[HANDLER_LABEL] === undefined && labels[STATE_LABEL] === undefined
      && watch.of({ node: C, operation: 'uninstall' }).some(p => p.reason === 'Completed');
  }, 120_000, diagnostics);
  expect(c.configDump()).toEqual(start[C].dump);
  expect(c.host.read(c.editedConfig)).toEqual(K3S_TEMPLATE);
  expect(watch.of({ node: A, operation: 'uninstall' })).toEqual([]);

  // WHEN the Shim is deleted (the app no longer has it)
  cluster.controlPlane.kubectl(['delete', 'shim', SHIM, '--wait=false']);
  await eventually(async () => {
    await watch.poll();
    return (await api.get(SHIMS)).items.length === 0;
  }, 240_000, diagnostics);
  // THEN A and B were uninstalled one at a time (the rollout strategy)
  const uninstalls = watch.of({ shim: SHIM, operation: 'uninstall' });
  expect(uninstalls.map(p => p.node).sort()).toEqual([A, B, C]);
  expectOneAtATime(uninstalls);
  expect(watch.mostNodesAtOnce).toBe(1);
  // AND every node's effective config is the one it started with, its files too, and nothing is left of the shims
  for (const n of cluster.nodes) {
    expect(n.configDump()).toEqual(start[n.name].dump);
    expect(n.host.read(n.editedConfig)).toEqual(start[n.name].edited);
    expect(n.host.tryRun(['readlink', '/etc/containerd/config.toml']).stdout.trim() || undefined).toEqual(start[n.name].link);
    expect(n.host.tryRun(['sh', '-c', 'ls /opt/rcm/shims /opt/rcm/payloads /opt/rcm/state 2>/dev/null']).stdout.trim()).toBe('');
    const labels = (await getNode(n.name)).metadata.labels;
    expect(Object.keys(labels).filter(k => k.includes('shim.runtime.spinkube.dev'))).toEqual([]);
  }
  await eventually(async () => api.get(`/apis/node.k8s.io/v1/runtimeclasses/${SHIM}`).then(() => false, (e: any) => e.code === 404), 60_000, diagnostics);
});

step('six Shims applied at once: every node restarts containerd once per wave (its journal), a node that joins later gets all six with one restart, pods under all six handlers run, pods created while the wave lands start', async () => {
  // Every property is checked and what fails is listed at the end, with what each node did.
  const problems: string[] = [];
  const check = (ok: boolean, problem: string) => void (ok || problems.push(problem));
  // GIVEN two nodes selected by six Shims' selector (the third joins later), and no Shim left from the steps before
  const [first, second, joiner] = cluster.nodes;
  for (const n of [first, second]) label(n.name, WAVE_LABEL, 'true');
  // (the Shim kind is not served yet when this step runs alone: `-t "six Shims"`)
  expect((await api.get(SHIMS).catch((e: any) => (e.code === 404 ? { items: [] } : Promise.reject(e)))).items).toEqual([]);
  const limitHitsBefore = Object.fromEntries(cluster.nodes.map(n => [n.name, n.systemd?.startLimitHits('containerd') ?? 0]));
  const watch = await InstallerPods.from();
  const since = Date.now();
  // WHEN the app gets six Shims at once (each rolling one node at a time, the app's default here)
  apply(WAVE.map(w => ({ name: w, version: w, selector: { [WAVE_LABEL]: 'true' } })), 2);
  // AND ordinary pods keep being created on every node while the wave lands. They restart on
  // failure, as a Job's or a Deployment's do: a container whose start the kubelet asked for as
  // containerd stopped fails ("transport is closing", RunContainerError), and a pod with
  // restartPolicy Never ends Failed then (seen once in 17 such pods, on B). The kubelet's retry
  // must then start it.
  const during: { name: string; node: string; at: number }[] = [];
  // (the installers' logs, kept as they go: the kubelet removes them with their pods)
  const installerLogs = new Map<string, string>();
  const collectInstallerLogs = () => {
    for (const n of cluster.nodes) {
      const out = n.host.tryRun(['sh', '-c', `for f in /var/log/pods/${NS}_rcm-wave-*/installer/*.log; do [ -f "$f" ] && echo "=== $f" && cat "$f"; done; true`]).stdout;
      for (const part of out.split('=== ').filter(Boolean)) {
        const file = part.slice(0, part.indexOf('\n'));
        installerLogs.set(`${n.name} ${file}`, part.slice(part.indexOf('\n') + 1));
      }
    }
  };
  const installerLogsOf = (node: string) => [...installerLogs].filter(([k]) => k.startsWith(`${node} `))
    .map(([k, v]) => `--- ${k}\n${v.split('\n').map(l => l.replace(/^\S+ std(err|out) F /, '').slice(0, 300)).join('\n')}`).join('\n');
  // (the wave lands on the first two nodes; then the third joins the selection and gets all six at once)
  let joinedAt: number | undefined;
  for (let i = 0; ; i++) {
    await watch.poll();
    if (i % 2 === 0) collectInstallerLogs();
    if (i % 4 === 0) {
      // (once the third node joined, on it: its installers run then)
      const node = joinedAt !== undefined ? joiner.name : cluster.nodes[during.length % cluster.nodes.length].name;
      const name = `wave-during-${during.length}`;
      during.push({ name, node, at: Date.now() });
      await createPod(workloadPod(name, 'true', { nodeName: node, restartPolicy: 'OnFailure' }));
    }
    const shims = await Promise.all(WAVE.map(w => getShim(w).catch(() => undefined)));
    const readyOn = (n: number) => shims.every(sh => condition(sh, 'Ready')?.status === 'True' && sh.status.nodesReady === n && sh.status.nodes === n);
    if (joinedAt === undefined && readyOn(2)) {
      // WHEN a node joins the six Shims' selection later (a node added to the pool)
      joinedAt = Date.now();
      label(joiner.name, WAVE_LABEL, 'true');
    } else if (joinedAt !== undefined && readyOn(3)) {
      break;
    }
    if (Date.now() - since > 300_000) throw new Error(`the six Shims were not Ready on ${joinedAt === undefined ? 'the first two nodes' : 'the three nodes'} within 300 s`);
    await sleep(250);
  }
  await watch.poll();
  collectInstallerLogs();
  const took = Date.now() - since;
  const installs = watch.of({ operation: 'install' }).filter(p => WAVE.includes(p.shim));
  const describe = (p: InstallerPod) => `${p.shim} attempt ${p.attempt} ${p.reason ?? p.phase} `
    + `${p.started ? new Date(p.started).toISOString().slice(11, 19) : '-'}..${p.finished ? new Date(p.finished).toISOString().slice(11, 19) : '-'}`;
  // THEN each node has the six handlers, and restarted containerd once for all of them: the
  // start its journal (A, B: containerd's boots) or the k3s unit's log (C) shows falls within
  // every one of its installers' runs
  const report: string[] = [];
  for (const n of cluster.nodes) {
    const own = installs.filter(p => p.node === n.name).sort((x, y) => (x.started ?? 0) - (y.started ?? 0));
    const starts = containerdStarts(n, since);
    const completed = new Set(own.filter(p => p.reason === 'Completed').map(p => p.shim));
    report.push(`${n.name}: ${starts.length} containerd start(s) (${starts.map(t => new Date(t).toISOString().slice(11, 23)).join(', ')})`
      + ` for ${own.length} installer pods:\n  ${own.map(describe).join('\n  ')}`);
    check(WAVE.every(w => completed.has(w)), `${n.name}: installs completed only for ${[...completed].sort().join(' ')}`);
    check(starts.length === 1, `${n.name}: containerd started ${starts.length} times in the install wave (at most once wanted)`);
    const ran = own.filter(p => p.reason === 'Completed');
    check(starts.length === 0 || ran.every(p => starts[0] >= p.started! - 1000 && starts[0] <= p.finished! + 1000),
      `${n.name}: its first restart is not within every completed installer's run`);
    // AND on the systemd nodes no start failed and the start limit never refused one; the unit runs
    if (n.systemd) {
      check(n.host.unitEvents('containerd').filter(e => e.event === 'failed' && e.at > since).length === 0, `${n.name}: a start of containerd failed`);
      check(n.systemd.startLimitHits('containerd') === limitHitsBefore[n.name], `${n.name}: start-limit-hit`);
      check(n.systemd.unitState('containerd').activeState === 'active', `${n.name}: containerd.service is ${n.systemd.unitState('containerd').activeState}`);
    }
    // AND every handler is in the node's effective config
    const handlers = handlersOf(n.configDump());
    for (const w of WAVE) check(handlers[w]?.runtime_path === installedBinary(w), `${n.name}: ${w} not in the effective config`);
    if (starts.length !== 1) report.push(`${n.name}: its installers' logs:\n${installerLogsOf(n.name)}`);
    // (systemd's own "Started" lines against containerd's boots this boot: PID 1 may drop a line under load)
    if (n.systemd) report.push(`${n.name}: this boot, systemd's "Started containerd.service" lines: ${n.systemd.startsOf('containerd')}, containerd's boots: ${containerdStarts(n, 0).length}`);
  }
  process.stdout.write(`wave of six installs, Ready on ${first.name} and ${second.name}, then on ${joiner.name} (joined after `
    + `${((joinedAt! - since) / 1000).toFixed(1)} s), in ${(took / 1000).toFixed(1)} s:\n${report.join('\n')}\n`);
  // (the joiner's one start came after it joined: it had nothing of the wave before)
  check(containerdStarts(joiner, since).every(t => t >= joinedAt! - 1000), `${joiner.name}: containerd restarted before it joined the Shims' selection`);
  // AND the pods created while the wave landed all ran, some of them while installers ran on their node
  const whileInstalling = during.filter(d => installs.some(p => p.node === d.node && p.started && p.finished
    && p.started - 1000 <= d.at && d.at <= p.finished + 1000));
  for (const n of cluster.nodes) check(whileInstalling.some(d => d.node === n.name), `${n.name}: no pod was created while its installers ran`);
  const retried: string[] = [];
  for (const d of during) {
    const done = await podWhen(d.name, ['Succeeded', 'Failed']);
    check(done.status.phase === 'Succeeded', `pod ${d.name} created on ${d.node} during the wave ended ${done.status.phase}`);
    if (done.status.containerStatuses[0].restartCount > 0) retried.push(`${d.name}@${d.node} (${done.status.containerStatuses[0].restartCount})`);
  }
  process.stdout.write(`pods created during the wave: ${during.length}; while installers ran on their node: ${whileInstalling.map(d => `${d.name}@${d.node}`).join(' ')};`
    + ` started again by the kubelet: ${retried.join(' ') || 'none'}\n`);
  // AND a pod of each of the six handlers runs on every node, under that handler
  for (const n of cluster.nodes) for (const w of WAVE) await createPod(workloadPod(`${w}-on-${n.name}`, 'true', { runtimeClassName: w, nodeName: n.name }));
  for (const n of cluster.nodes) {
    for (const w of WAVE) {
      const done = await podWhen(`${w}-on-${n.name}`, ['Succeeded', 'Failed']);
      check(done.status.phase === 'Succeeded', `pod of ${w} on ${n.name} ended ${done.status.phase}`);
      if (done.status.phase !== 'Succeeded') continue;
      check(handlerOf(done) === w, `pod of ${w} on ${n.name} ran under handler ${handlerOf(done)}`);
      check(runtimeOf(done) === shimServing(n.name, w), `pod of ${w} on ${n.name} ran under ${runtimeOf(done)}`);
    }
  }
  await deleteWorkloads();

  // WHEN the six Shims are deleted at once
  const uninstallWatch = await InstallerPods.from();
  const deletedAt = Date.now();
  cluster.controlPlane.kubectl(['delete', 'shim', ...WAVE, '--wait=false']);
  await eventually(async () => {
    await uninstallWatch.poll();
    return (await api.get(SHIMS)).items.length === 0;
  }, 240_000, diagnostics);
  await uninstallWatch.poll();
  // THEN each node restarted containerd once for its six uninstalls, and is as it started
  const uninstalls = uninstallWatch.of({ operation: 'uninstall' }).filter(p => WAVE.includes(p.shim));
  const uninstallReport: string[] = [];
  for (const n of cluster.nodes) {
    const own = uninstalls.filter(p => p.node === n.name).sort((x, y) => (x.started ?? 0) - (y.started ?? 0));
    const starts = containerdStarts(n, deletedAt);
    uninstallReport.push(`${n.name}: ${starts.length} containerd start(s) for ${own.length} uninstaller pods:\n  ${own.map(describe).join('\n  ')}`);
    check(new Set(own.map(p => p.shim)).size === WAVE.length, `${n.name}: uninstallers ran only for ${[...new Set(own.map(p => p.shim))].sort().join(' ')}`);
    check(starts.length === 1, `${n.name}: containerd started ${starts.length} times in the uninstall wave (at most once wanted)`);
    if (n.systemd) check(n.systemd.startLimitHits('containerd') === limitHitsBefore[n.name], `${n.name}: start-limit-hit in the uninstall wave`);
    check(n.configDump() === start[n.name].dump, `${n.name}: effective config not as it started`);
    check(n.host.read(n.editedConfig) === start[n.name].edited, `${n.name}: ${n.editedConfig} not as it started`);
  }
  process.stdout.write(`wave of six uninstalls in ${((Date.now() - deletedAt) / 1000).toFixed(1)} s:\n${uninstallReport.join('\n')}\n`);
  for (const n of cluster.nodes) label(n.name, WAVE_LABEL, null);
  expect(problems).toEqual([]);
});

// WebAssembly on the systemd nodes: Debian trixie's crun built with WasmEdge as a payload (its
// library closure and loader, a wrapper, runc's shim driving it through BinaryName), the
// hand-written WASI modules of test/fixtures/wasm in images holding nothing but the .wasm file.
// crun's systemd cgroup driver on these nodes needs their systemd to manage the cgroup
// controllers (systemd-node.ts re-executes it after the boot), or every crun container shares
// one cgroup and deleting one kills the others.

const WASM_SHIM = 'fleet-wasm';
const WASM_LABEL = 'e2e.rcm.dev/wasm';
const WASM_HANDLER_LABEL = ShimNodeLabels.handlerKey(WASM_SHIM);
const HELLO_LINE = 'hello from a WASI module (rcm-wasm-e2e)';
const SLEEP_LINES = ['sleep.wasm: going to sleep 15s', 'sleep.wasm: woke up after 15s'];
const VARIANT = { [WASM_VARIANT_ANNOTATION]: 'compat' };

/** A pod running an image's entrypoint (a Wasm module's image), its node chosen by `nodeName` or by the scheduler. */
function wasmPod(name: string, image: string, extra: { nodeName?: string; nodeSelector?: Record<string, string> } = {}): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { 'e2e.rcm.dev/workload': 'true' }, annotations: VARIANT },
    spec: {
      hostNetwork: true,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      runtimeClassName: WASM_SHIM,
      ...(extra.nodeName ? { nodeName: extra.nodeName } : {}),
      ...(extra.nodeSelector ? { nodeSelector: extra.nodeSelector } : {}),
      containers: [{ name: 'main', image, imagePullPolicy: 'IfNotPresent' }],
    },
  };
}

interface LogLine {
  readonly time: number;
  readonly text: string;
}

/** A container's log as the kubelet wrote it on its node (CRI lines: time, stream, P or F, text). */
function containerLog(p: any): LogLine[] {
  const n = cluster.node(p.spec.nodeName);
  const dir = `/var/log/pods/default_${p.metadata.name}_${p.metadata.uid}/main`;
  const out = n.host.tryRun(['sh', '-c', `cat ${dir}/*.log 2>/dev/null; true`]).stdout;
  return out.split('\n').filter(Boolean).map(line => {
    const [time, , , ...text] = line.split(' ');
    return { time: Date.parse(time), text: text.join(' ') };
  });
}
const logText = (p: any) => containerLog(p).map(l => l.text);

function wasmContainerId(p: any): string {
  return String(p.status.containerStatuses[0].containerID).replace('containerd://', '');
}

async function deletePods(names: string[]): Promise<void> {
  for (const name of names) await api.request('DELETE', `/api/v1/namespaces/default/pods/${name}`);
  await eventually(async () => {
    const left = (await api.get('/api/v1/namespaces/default/pods')).items.map((p: any) => p.metadata.name);
    return names.every(n => !left.includes(n));
  }, 120_000, diagnostics);
}

step('WebAssembly under crun with WasmEdge on the nodes that boot systemd: a module runs, a long-running one is undisturbed by another starting and ending beside it, and uninstall takes payload, handler and scheduling away', async () => {
  // GIVEN the crun + WasmEdge payload (168 MiB unpacked) over HTTP, the modules' images on every node, and the systemd nodes selected
  const payload = await buildWasmPayload(path.join(work, 'crun-wasmedge.tgz'));
  const location = server.put('crun-wasmedge.tgz', fs.readFileSync(payload.file));
  const [hello, sleeper] = [await buildWasmImage('hello', work), await buildWasmImage('sleep', work)];
  cluster.importImage(hello.tarball);
  cluster.importImage(sleeper.tarball);
  const systemdNodes = cluster.nodes.filter(n => n.systemd);
  expect(systemdNodes.map(n => n.name)).toEqual([A, B]);
  for (const n of systemdNodes) label(n.name, WASM_LABEL, 'true');
  const folder = `/opt/rcm/payloads/${WASM_SHIM}/${payload.sha256.slice(0, 16)}`;
  const wasm: AppShim = {
    name: WASM_SHIM,
    version: 'wasm',
    selector: { [WASM_LABEL]: 'true' },
    props: {
      handler: WASM_SHIM,
      location,
      sha256: payload.sha256,
      allowInsecureHttp: true,
      payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
      runtimeOptions: { BinaryName: '${PAYLOAD}/bin/crun' },
      containerdRuntime: { podAnnotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'], containerAnnotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'] },
      workloadAnnotations: VARIANT,
      rollout: Rollout.recreate(),
    },
  };
  // WHEN the Wasm Shim is applied
  apply([wasm]);
  await shimReady(WASM_SHIM, systemdNodes.length);
  // THEN each of those nodes has the payload as one folder (links kept) and a handler that runs
  // the payload's shim with crun as its binary, letting crun's annotations through
  for (const n of systemdNodes) {
    expect(n.host.tryRun(['readlink', `${folder}/lib/libwasmedge.so.0`]).stdout.trim()).toBe('libwasmedge.so.0.1.0');
    expect(n.host.tryRun(['sh', '-c', `cd ${folder} && ls bin/crun bin/crun.real bin/containerd-shim-runc-v2 lib/ld-linux-x86-64.so.2`]).code).toBe(0);
    expect(handlersOf(n.configDump())[WASM_SHIM]).toMatchObject({
      runtime_type: 'io.containerd.runc.v2',
      runtime_path: `${folder}/bin/containerd-shim-runc-v2`,
      pod_annotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'],
      container_annotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'],
      options: expect.objectContaining({ BinaryName: `${folder}/bin/crun`, SystemdCgroup: true }),
    });
    expect((await getNode(n.name)).metadata.labels[WASM_HANDLER_LABEL]).toBe(WASM_SHIM);
  }
  // AND the RuntimeClass selects nodes by the handler label
  const rc = await eventually(async () => api.get(`/apis/node.k8s.io/v1/runtimeclasses/${WASM_SHIM}`).catch(() => undefined), 60_000, diagnostics);
  expect(rc).toMatchObject({ handler: WASM_SHIM, scheduling: { nodeSelector: { [WASM_HANDLER_LABEL]: WASM_SHIM } } });

  // WHEN sleep.wasm (15 s asleep through WASI) runs on each of those nodes
  for (const n of systemdNodes) await createPod(wasmPod(`wasm-sleep-${n.name}`, sleeper.reference, { nodeName: n.name }));
  const sleeping: Record<string, any> = {};
  for (const n of systemdNodes) {
    const p = await podWhen(`wasm-sleep-${n.name}`, ['Running', 'Succeeded', 'Failed']);
    expect({ node: n.name, phase: p.status.phase }).toEqual({ node: n.name, phase: 'Running' });
    await eventually(async () => logText(p).includes(SLEEP_LINES[0]), 30_000, diagnostics);
    sleeping[n.name] = p;
    // THEN it is crun (its state file is `status`; runc's is state.json) in a cgroup of its own:
    // the container's systemd scope in every v1 hierarchy (one cgroup shared by all crun containers when
    // the node's systemd does not manage the controllers: see systemd-node.ts, daemon-reexec)
    const id = wasmContainerId(p);
    expect(n.host.tryRun(['ls', `/run/containerd/runc/k8s.io/${id}`]).stdout.split('\n')).toContain('status');
    expect(n.host.tryRun(['ls', `/run/containerd/runc/k8s.io/${id}/state.json`]).code).not.toBe(0);
    const task = n.ctr(['-n', 'k8s.io', 'tasks', 'ls']).split('\n').find(l => l.startsWith(`${id} `));
    const cgroups = n.host.run(['cat', `/proc/${task!.split(/\s+/)[1]}/cgroup`]).split('\n').filter(l => l && !l.startsWith('0::'));
    expect(cgroups.map(l => l.split(':')[1])).toEqual(expect.arrayContaining(['name=systemd', 'memory', 'pids', 'cpu', 'freezer']));
    for (const line of cgroups) {
      const [, hierarchy, cgroup] = line.split(':');
      expect({ node: n.name, hierarchy, cgroup }).toEqual({ node: n.name, hierarchy, cgroup: expect.stringMatching(new RegExp(`/cri-containerd-${id}\\.scope(/container)?$`)) });
    }
  }
  // WHEN another Wasm pod starts, ends and is deleted beside each of them
  for (const n of systemdNodes) await createPod(wasmPod(`wasm-beside-${n.name}`, hello.reference, { nodeName: n.name }));
  const beside: Record<string, any> = {};
  for (const n of systemdNodes) {
    beside[n.name] = await podWhen(`wasm-beside-${n.name}`, ['Succeeded', 'Failed']);
    const done = beside[n.name];
    expect({ node: n.name, phase: done.status.phase, log: logText(done) }).toEqual({ node: n.name, phase: 'Succeeded', log: [HELLO_LINE] });
  }
  await deletePods(systemdNodes.map(n => `wasm-beside-${n.name}`));
  // THEN each sleeping pod was not disturbed: still running, same container, no restart, not woken yet
  for (const n of systemdNodes) {
    const still = await api.get(`/api/v1/namespaces/default/pods/wasm-sleep-${n.name}`);
    expect({ node: n.name, phase: still.status.phase, log: logText(still) }).toEqual({ node: n.name, phase: 'Running', log: [SLEEP_LINES[0]] });
    const { containerID } = sleeping[n.name].status.containerStatuses[0];
    expect(still.status.containerStatuses[0]).toMatchObject({ restartCount: 0, containerID });
  }
  // AND each ends on its own after sleeping through WASI, the other pod having begun and ended within the sleep
  for (const n of systemdNodes) {
    const woke = await podWhen(`wasm-sleep-${n.name}`, ['Succeeded', 'Failed'], 60_000);
    const lines = containerLog(woke);
    expect({ node: n.name, phase: woke.status.phase, log: lines.map(l => l.text) }).toEqual({ node: n.name, phase: 'Succeeded', log: SLEEP_LINES });
    expect(lines[1].time - lines[0].time).toBeGreaterThanOrEqual(14_500);
    const { startedAt, finishedAt } = beside[n.name].status.containerStatuses[0].state.terminated;
    expect(Date.parse(startedAt)).toBeGreaterThanOrEqual(Math.floor(lines[0].time / 1000) * 1000);
    expect(Date.parse(finishedAt)).toBeLessThanOrEqual(lines[1].time);
  }
  await deleteWorkloads();

  // WHEN node A no longer matches the Shim's selector
  const [a, b] = systemdNodes;
  label(a.name, WASM_LABEL, null);
  // THEN the controller uninstalls it there: the handler label, the payload and containerd's
  // handler go, and A's effective config is the one it started with
  await eventually(async () => (await getNode(a.name)).metadata.labels[WASM_HANDLER_LABEL] === undefined
    && a.host.tryRun(['ls', `/opt/rcm/payloads/${WASM_SHIM}`]).stdout.trim() === ''
    && !(WASM_SHIM in handlersOf(a.configDump())), 180_000, diagnostics);
  expect(a.configDump()).toEqual(start[a.name].dump);
  expect(a.host.tryRun(['sh', '-c', 'ls /opt/rcm/payloads 2>/dev/null']).stdout.trim()).toBe('');
  // AND B keeps it
  expect((await getNode(b.name)).metadata.labels[WASM_HANDLER_LABEL]).toBe(WASM_SHIM);
  expect(handlersOf(b.configDump())[WASM_SHIM]?.runtime_path).toBe(`${folder}/bin/containerd-shim-runc-v2`);
  // AND the RuntimeClass sends no pod to A: one that may only go there is not scheduled, one that may go anywhere runs on B
  await createPod(wasmPod('wasm-only-on-a', hello.reference, { nodeSelector: { 'kubernetes.io/hostname': a.name } }));
  await createPod(wasmPod('wasm-anywhere', hello.reference));
  const refused = await eventually(async () => (await api.get('/api/v1/namespaces/default/events')).items
    .find((e: any) => e.involvedObject.name === 'wasm-only-on-a' && e.reason === 'FailedScheduling'), 60_000, diagnostics);
  expect(refused.message).toMatch(/didn't match (node selector|Pod's node affinity)/);
  const onlyOnA = await api.get('/api/v1/namespaces/default/pods/wasm-only-on-a');
  expect({ phase: onlyOnA.status.phase, nodeName: onlyOnA.spec.nodeName, nodeSelector: onlyOnA.spec.nodeSelector })
    .toEqual({ phase: 'Pending', nodeName: undefined, nodeSelector: { 'kubernetes.io/hostname': a.name, [WASM_HANDLER_LABEL]: WASM_SHIM } });
  const anywhere = await podWhen('wasm-anywhere', ['Succeeded', 'Failed']);
  expect({ node: anywhere.spec.nodeName, phase: anywhere.status.phase, log: logText(anywhere) }).toEqual({ node: b.name, phase: 'Succeeded', log: [HELLO_LINE] });
  await deleteWorkloads();

  // WHEN the Shim is deleted THEN it is uninstalled from B too, and B and its RuntimeClass are as before
  cluster.controlPlane.kubectl(['delete', 'shim', WASM_SHIM, '--wait=false']);
  await eventually(async () => (await api.get(SHIMS)).items.length === 0, 240_000, diagnostics);
  await eventually(async () => api.get(`/apis/node.k8s.io/v1/runtimeclasses/${WASM_SHIM}`).then(() => false, (e: any) => e.code === 404), 60_000, diagnostics);
  for (const n of systemdNodes) {
    expect(n.configDump()).toEqual(start[n.name].dump);
    expect(n.host.tryRun(['sh', '-c', 'ls /opt/rcm/payloads 2>/dev/null']).stdout.trim()).toBe('');
    expect(Object.keys((await getNode(n.name)).metadata.labels).filter(k => k.includes('shim.runtime.spinkube.dev'))).toEqual([]);
  }
}, () => {
  for (const n of cluster.nodes) label(n.name, WASM_LABEL, null);
});

// ---- runwasi's wasmtime shim (containerd-shim-wasmtime-v1, built from crates.io by provisioning) on every node

const RUNWASI = 'wasmtime';
const RUNWASI_SPIN = 'spin-v2';
const RUNWASI_SPIN_CLASS = 'wasmtime-spin-v2';
const RUNWASI_LABEL = 'e2e.rcm.dev/runwasi';
const TICK_LINE = 'tick.wasm: tick';

/** A pod running an image's entrypoint (a WASI module) under `runtimeClassName` on `nodeName`: no annotation, the shim runs the module itself. */
function runwasiPod(name: string, image: string, runtimeClassName: string, nodeName: string, restartPolicy = 'Never'): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { 'e2e.rcm.dev/workload': 'true' } },
    spec: {
      hostNetwork: true,
      restartPolicy,
      terminationGracePeriodSeconds: 1,
      runtimeClassName,
      nodeName,
      containers: [{ name: 'main', image, imagePullPolicy: 'IfNotPresent' }],
    },
  };
}

step('runwasi\'s wasmtime shim from its release tarball on every node (A containerd 2.4, B 1.7, C k3s-shaped 1.6): a WASI module runs on each, a long-running one meets the Spin-shaped Shim\'s wave (kept by 1.6; ended by 1.7 and 2.4, the kubelet starts it again), and uninstall leaves each node\'s config as it started', async () => {
  // GIVEN the two release tarballs over HTTP (the Spin-shaped one holds the same shim as containerd-shim-spin-v2), the modules' images, every node selected
  const wasmtime = await packShimRelease(work, SHIM_RELEASES.wasmtime);
  const spin = await packShimRelease(work, SHIM_RELEASES.spinStandIn);
  const [hello, tick] = [await buildWasmImage('hello', work), await buildWasmImage('tick', work)];
  cluster.importImage(hello.tarball);
  cluster.importImage(tick.tarball);
  for (const n of cluster.nodes) label(n.name, RUNWASI_LABEL, 'true');
  const shim = (name: string, runtimeClassName: string, release: ShimRelease): AppShim => ({
    name,
    version: name,
    selector: { [RUNWASI_LABEL]: 'true' },
    props: {
      handler: name,
      runtimeClassName,
      location: server.put(path.basename(release.file), fs.readFileSync(release.file)),
      sha256: release.sha256,
      allowInsecureHttp: true,
      rollout: Rollout.recreate(),
    },
  });
  const wasmtimeShim = shim(RUNWASI, RUNWASI, wasmtime);
  const binary = (handler: string, release: ShimRelease) => `/opt/rcm/shims/${handler}/${release.sha256.slice(0, 16)}/${release.binary}`;
  // WHEN the wasmtime Shim is applied
  apply([wasmtimeShim]);
  await shimReady(RUNWASI, cluster.nodes.length);
  // THEN every node's containerd serves handler wasmtime with the installed binary, and runs hello.wasm under it
  for (const n of cluster.nodes) {
    const served = handlersOf(n.configDump())[RUNWASI]?.runtime_type;
    expect({ node: n.name, runtime_type: served }).toEqual({ node: n.name, runtime_type: binary(RUNWASI, wasmtime) });
    await createPod(runwasiPod(`runwasi-hello-${n.name}`, hello.reference, RUNWASI, n.name));
  }
  for (const n of cluster.nodes) {
    const done = await podWhen(`runwasi-hello-${n.name}`, ['Succeeded', 'Failed']);
    expect({ node: n.name, phase: done.status.phase, log: logText(done) }).toEqual({ node: n.name, phase: 'Succeeded', log: [HELLO_LINE] });
  }
  // WHEN tick.wasm runs on every node (a line a second, until it is stopped; restarted by the kubelet if it ends) and the
  // Spin-shaped Shim rolls out beside it
  for (const n of cluster.nodes) await createPod(runwasiPod(`runwasi-tick-${n.name}`, tick.reference, RUNWASI, n.name, 'Always'));
  const ticking: Record<string, any> = {};
  for (const n of cluster.nodes) {
    ticking[n.name] = await podWhen(`runwasi-tick-${n.name}`, ['Running']);
    await eventually(async () => logText(ticking[n.name]).includes(TICK_LINE), 30_000, diagnostics);
  }
  const since = Date.now();
  apply([wasmtimeShim, shim(RUNWASI_SPIN, RUNWASI_SPIN_CLASS, spin)]);
  await shimReady(RUNWASI_SPIN, cluster.nodes.length);
  // THEN containerd was restarted on every node. On containerd 1.6 (C) the ticking container kept running through it;
  // on 1.7 and 2.4 (B, A) containerd, reconnecting, asked its shim for Task.Pids, which runwasi's shim does not serve
  // (runwasi#207), took the shim for leaked and ended the container (255): the kubelet started it again, and it ticks again
  for (const n of cluster.nodes) {
    expect({ node: n.name, restarted: containerdStarts(n, since).length > 0 }).toEqual({ node: n.name, restarted: true });
    const { containerID } = ticking[n.name].status.containerStatuses[0];
    const now = await eventually(async () => {
      const p = await api.get(`/api/v1/namespaces/default/pods/runwasi-tick-${n.name}`);
      const c = p.status.containerStatuses[0];
      return c.state.running && (reloadAsksPids[n.name] ? c.restartCount >= 1 : true) ? c : undefined;
    }, 120_000, diagnostics);
    const ended = reloadAsksPids[n.name] ? { restartCount: 1, lastExit: 255, lastContainer: containerID } : { restartCount: 0, containerID };
    expect({
      node: n.name,
      ...(reloadAsksPids[n.name]
        ? { restartCount: now.restartCount, lastExit: now.lastState.terminated?.exitCode, lastContainer: now.lastState.terminated?.containerID }
        : { restartCount: now.restartCount, containerID: now.containerID }),
    }).toEqual({ node: n.name, ...ended });
    const lines = containerLog(ticking[n.name]).length;
    await eventually(async () => containerLog(ticking[n.name]).length > lines, 30_000, diagnostics);
    // AND a pod under RuntimeClass wasmtime-spin-v2 runs the module under the binary named as Spin's
    const spinServed = handlersOf(n.configDump())[RUNWASI_SPIN]?.runtime_type;
    expect({ node: n.name, runtime_type: spinServed }).toEqual({ node: n.name, runtime_type: binary(RUNWASI_SPIN, spin) });
    await createPod(runwasiPod(`runwasi-spin-${n.name}`, hello.reference, RUNWASI_SPIN_CLASS, n.name));
  }
  for (const n of cluster.nodes) {
    const done = await podWhen(`runwasi-spin-${n.name}`, ['Succeeded', 'Failed']);
    expect({ node: n.name, phase: done.status.phase, log: logText(done) }).toEqual({ node: n.name, phase: 'Succeeded', log: [HELLO_LINE] });
  }
  await deleteWorkloads();

  // WHEN both Shims are deleted THEN they are uninstalled everywhere: no label of theirs, each node's effective config as it started
  cluster.controlPlane.kubectl(['delete', 'shim', RUNWASI, RUNWASI_SPIN, '--wait=false']);
  await eventually(async () => (await api.get(SHIMS)).items.length === 0, 240_000, diagnostics);
  for (const name of [RUNWASI, RUNWASI_SPIN_CLASS]) {
    await eventually(async () => api.get(`/apis/node.k8s.io/v1/runtimeclasses/${name}`).then(() => false, (e: any) => e.code === 404), 60_000, diagnostics);
  }
  for (const n of cluster.nodes) {
    expect({ node: n.name, sameConfig: n.configDump() === start[n.name].dump }).toEqual({ node: n.name, sameConfig: true });
    expect(Object.keys((await getNode(n.name)).metadata.labels).filter(k => k.includes('shim.runtime.spinkube.dev'))).toEqual([]);
  }
}, () => {
  for (const n of cluster.nodes) label(n.name, RUNWASI_LABEL, null);
});

/** Every value a node's label took while `during` ran (a watch of the Node: no state missed between polls). */
async function labelValuesDuring(node: string, key: string, during: () => Promise<void>): Promise<Set<string | undefined>> {
  const states = await nodeStatesDuring(cluster.controlPlane, node, during);
  return new Set(states.map(n => n.metadata.labels?.[key]));
}

const UNLISTED = 'unlisted';
const UNLISTED_LABEL = 'e2e.rcm.dev/unlisted';
const SITE_CONFIG_DROP_IN = '/etc/systemd/system/containerd.service.d/20-site-config.conf';

step('health from the kubelet: on A (containerd 2.4, its kubelet lists runtime handlers) a handler its containerd does not serve fails the install with the kubelet\'s reason and the gate is never set; served, the retry installs it', async () => {
  const a = cluster.node(A);
  const handlerLabel = ShimNodeLabels.handlerKey(UNLISTED);
  // GIVEN A's kubelet lists the runtime handlers of its containerd; B's (containerd 1.7) and C's (1.6) list none
  expect((await getNode(A)).status.runtimeHandlers.map((h: any) => h.name)).toEqual(expect.arrayContaining(['runc']));
  for (const n of [B, C]) expect((await getNode(n)).status.runtimeHandlers ?? []).toEqual([]);
  // AND A's containerd reads a config of the site's own (an admin's unit drop-in), not the file the
  // installer edits: containerd 2.4's defaults without the import of conf.d (where the installer
  // writes the handler, the file it edits importing it)
  const site = a.host.read('/etc/containerd/config.toml')!.replace(/^imports = \[.*\]$/m, 'imports = []');
  expect(site).toMatch(/^imports = \[\]$/m);
  a.host.write('/etc/containerd/site.toml', site);
  a.host.write(SITE_CONFIG_DROP_IN, '[Service]\nExecStart=\nExecStart=/usr/bin/containerd --config /etc/containerd/site.toml\n');
  a.host.run(['systemctl', 'daemon-reload']);
  a.host.systemctl('restart', 'containerd');
  await publish('unlisted', UNLISTED);
  label(A, UNLISTED_LABEL, 'true');
  let failure: any;
  const values = await labelValuesDuring(A, handlerLabel, async () => {
    // WHEN a Shim selecting A is applied
    apply([{ name: UNLISTED, version: 'unlisted', selector: { [UNLISTED_LABEL]: 'true' } }]);
    // THEN the installer's own checks pass (the file it edits has the handler) but the kubelet
    // never lists it: the install fails on A with the kubelet's reason
    failure = await eventually(async () => {
      const raw = (await getNode(A)).metadata.annotations[ShimNodeLabels.failureKey(UNLISTED)];
      return raw ? JSON.parse(raw) : undefined;
    }, 240_000, diagnostics);
  });
  expect(failure).toMatchObject({ reason: 'HandlerNotReportedByKubelet', message: expect.stringContaining('status.runtimeHandlers') });
  expect(handlersOf(a.configDump())[UNLISTED]).toBeDefined();
  // AND the gate was never set on A while it failed: no RuntimeClass could send a pod there
  expect([...values]).toEqual([undefined]);
  expect((await getNode(A)).status.runtimeHandlers.map((h: any) => h.name)).not.toContain(UNLISTED);

  // WHEN the site's drop-in goes (containerd reads the file the installer edits) and the Shim is retried
  a.host.run(['rm', SITE_CONFIG_DROP_IN, '/etc/containerd/site.toml']);
  a.host.run(['systemctl', 'daemon-reload']);
  a.host.systemctl('restart', 'containerd');
  cluster.controlPlane.kubectl(['annotate', 'shim', UNLISTED, `runtime.spinkube.dev/retry=${Date.now()}`, '--overwrite']);
  // THEN the kubelet lists the handler and the gate is set
  await shimReady(UNLISTED, 1);
  expect((await getNode(A)).status.runtimeHandlers.map((h: any) => h.name)).toContain(UNLISTED);
  expect((await getNode(A)).metadata.labels[handlerLabel]).toBe(UNLISTED);

  // WHEN the Shim is deleted THEN A is as it started
  cluster.controlPlane.kubectl(['delete', 'shim', UNLISTED, '--wait=true', '--timeout=180s']);
  expect(a.configDump()).toEqual(start[A].dump);
}, () => {
  const a = cluster.node(A);
  label(A, UNLISTED_LABEL, null);
  if (a.host.tryRun(['test', '-e', SITE_CONFIG_DROP_IN]).code === 0) {
    a.host.run(['rm', '-f', SITE_CONFIG_DROP_IN, '/etc/containerd/site.toml']);
    a.host.run(['systemctl', 'daemon-reload']);
    a.host.systemctl('restart', 'containerd');
  }
});
