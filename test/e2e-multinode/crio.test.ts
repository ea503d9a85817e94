import * as fs from 'fs';
import * as path from 'path';
import { Duration } from 'cdk8s';
import { parse } from 'smol-toml';
import { InstallMode, RuntimeClassManager, ShimNodeLabels } from '../../src';
import { CRIO_DROPIN_DIR } from '../../src/installer/crio-config';
import { applyApp, condition, createPod, deleteWorkloads, diagnostics, fleet, getNode, NS, podWhen, setUpFleet, SHIMS, step, synthFleetApp } from '../support/fleet-app';
import { sha256, tarGz } from '../support/installer-bundle';
import { ClusterNode, MultiNodeCluster } from '../support/multi-node-cluster';
import { eventually, Rest } from '../support/rest';
import { BUSYBOX_IMAGE } from '../support/single-node-cluster';
import { KUBE_VERSION, stackBinary } from '../support/tools';

// The installer on a real CRI-O: one node whose runtime is CRI-O 1.34 (built from the Go module
// proxy) under CRI-O's own crio.service (Type=notify, ExecReload sends SIGHUP), Debian's conmon,
// runc 1.4, containerd.service masked, and a kubelet of this run's Kubernetes on CRI-O's socket
// (test/support/crio-node.ts; CRI-O's pinns is a shell stand-in there: it is C and not built here).
// The app is synthesized with the constructs and applied with kubectl; a Shim whose payload is an
// OCI runtime (runc 1.4, the current stack's: `runtimeType: io.containerd.runc.v2` with a
// BinaryName, which the installer gives CRI-O as `runtime_type = "oci"`) is installed by an installer Job through its own
// drop-in and one `systemctl restart crio`, a pod of its RuntimeClass runs under it; then in install
// mode NodeAgent the agent repairs the drop-in deleted by hand; then the Shim's deletion uninstalls
// it. CRI-O's starts and reloads come from the node's journal. (A reload is not enough on CRI-O
// 1.34: a handler added by SIGHUP is listed by `crio status config` and the kubelet, but its pods
// fail with "failed to find runtime handler ... from runtime list", cri-o/cri-o#10202, seen here;
// the installer restarts CRI-O for that reason: crioApplyBy in src/installer/crio-config.ts.
// Debian bookworm's crun 1.8.1, the payload of the containerd suites, refuses CRI-O 1.34's
// container configs, "unknown version specified": hence runc.) (CRI-O 1.34's `vm` runtime type speaks
// the old shim API and cannot run a shim built against containerd 2's: the payload is an OCI
// runtime for that reason.) Needs root and scripts/provision.sh; run it with `npx projen e2e:multinode`.

const NODE = 'rcm-crio-a';
const SHIM = 'crio-oci';
const HANDLER = 'crio-oci';
const SELECT_LABEL = 'e2e.rcm.dev/crio';
const HANDLER_LABEL = ShimNodeLabels.handlerKey(SHIM);
const DROP_IN = `${CRIO_DROPIN_DIR}/99-rcm-${HANDLER}.conf`;
const AGENT_SELECTOR = encodeURIComponent('app.kubernetes.io/component=node-agent');
/** The agent's drift check period. */
const DRIFT_SECONDS = 3;

setUpFleet({ [NODE]: 'crio' });
let cluster: MultiNodeCluster;
let api: Rest;
let n: ClusterNode;
/** The node before anything was installed: its drop-in folder (name -> text) and what CRI-O serves. */
let startFolder: Record<string, string>;
let startServed: string;
/** The runc payload as served: its sha256, and how often it was fetched. */
let payload: { location: string; sha256: string };
let fetches = 0;

/**
 * An OCI runtime as a payload, as a user would pack one for containerd and CRI-O nodes: the
 * runtime (runc 1.4.3, the current stack's build) and containerd's runc shim for containerd
 * nodes (unused on CRI-O, which runs the runtime itself).
 */
async function publishOciPayload(): Promise<void> {
  const { work, server } = fleet();
  const tgz = await tarGz(work, {
    'bin/containerd-shim-runc-v2': fs.readFileSync('/usr/bin/containerd-shim-runc-v2'),
    'bin/runc': fs.readFileSync(stackBinary('runc')),
  });
  const location = server.handle('oci-runtime.tar.gz', (_req, res) => {
    fetches++;
    res.writeHead(200, { 'content-length': tgz.length }).end(tgz);
  });
  payload = { location, sha256: sha256(tgz) };
}

/** Where the installer unpacks the payload on the node (its own folder, named by the artifact's sha256). */
function payloadDir(): string {
  return `/opt/rcm/payloads/${HANDLER}/${payload.sha256.slice(0, 16)}`;
}

/** The app: the OCI-runtime Shim on the selected node (or none), in Job mode or NodeAgent mode; test-only settings as synthFleetApp's. */
function synthApp(withShim: boolean, agent: boolean): string {
  const props = agent ? { installMode: InstallMode.nodeAgent({ driftCheck: Duration.seconds(DRIFT_SECONDS) }) } : {};
  return synthFleetApp('crio', props, (manager: RuntimeClassManager) => {
    if (!withShim) return;
    manager.addShim(SHIM, {
      handler: HANDLER,
      runtimeClassName: SHIM,
      location: payload.location,
      sha256: payload.sha256,
      payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
      runtimeOptions: { BinaryName: '${PAYLOAD}/bin/runc' },
      allowInsecureHttp: true,
      nodeSelector: { [SELECT_LABEL]: 'true' },
    });
  });
}

/** The node's drop-in folder, file name -> text. */
function dropInFolder(): Record<string, string> {
  const names = n.host.run(['ls', '-1', CRIO_DROPIN_DIR]).split('\n').filter(Boolean).sort();
  return Object.fromEntries(names.map(f => [f, n.host.read(`${CRIO_DROPIN_DIR}/${f}`)!]));
}

/** The handler as the running CRI-O serves it (`crio status config`), undefined when it does not. */
function served(handler: string): any {
  return (parse(n.configDump()) as any).crio?.runtime?.runtimes?.[handler];
}

/** The runtime handlers the kubelet reports for the node. */
async function runtimeHandlers(): Promise<string[]> {
  return ((await getNode(NODE)).status.runtimeHandlers ?? []).map((h: any) => h.name).sort();
}

/** CRI-O's main process (in the node) and its starts this boot, and the reloads CRI-O logged ("Reloading configuration"). */
function crioState(): { mainPid: string; starts: number; reloads: number } {
  const sd = n.systemd!;
  return {
    mainPid: sd.show('crio', ['MainPID']).MainPID,
    starts: sd.startsOf('crio'),
    reloads: sd.journal('crio').split('\n').filter(l => /Reloading configuration/.test(l)).length,
  };
}

async function shimReady(): Promise<boolean> {
  const s = await api.get(`${SHIMS}/${SHIM}`).catch(() => undefined);
  return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 1;
}

/**
 * A pod of the RuntimeClass pinned to the node, on the host's pid namespace: its container's
 * parent is the monitor CRI-O started it with (conmon), whose arguments it writes to its
 * termination message (they name the OCI runtime, `-r PATH`). Returns the finished pod's phase,
 * the monitor's arguments and the handler CRI-O ran its sandbox with (its spec's annotation,
 * `crictl inspectp`).
 */
async function runPod(name: string): Promise<{ phase: string; monitor: string; handler: string }> {
  const parentArgs = 'while IFS= read -r -d "" a; do printf "%s " "$a"; done < /proc/$PPID/cmdline > /dev/termination-log';
  await createPod({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { 'e2e.rcm.dev/workload': 'true' } },
    spec: {
      hostNetwork: true,
      hostPID: true,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      runtimeClassName: SHIM,
      containers: [{ name: 'main', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', parentArgs] }],
    },
  });
  const done = await podWhen(name, ['Succeeded', 'Failed'], 120_000);
  const status = done.status.containerStatuses?.[0];
  const id = String(status?.containerID ?? '').replace('cri-o://', '');
  // CRI-O leaves the status's runtimeHandler empty: its sandbox spec carries the handler as an annotation
  const sandbox = id ? n.ctr(['inspectp', '-o', 'json', podSandboxOf(id)]) : '';
  const handler = /"io\.kubernetes\.cri-o\.RuntimeHandler"\s*:\s*"([^"]*)"/.exec(sandbox)?.[1] ?? '';
  return {
    phase: done.status.phase,
    monitor: String(status?.state?.terminated?.message ?? '').trim(),
    handler,
  };
}

/** The sandbox of a container (crictl ps). */
function podSandboxOf(containerId: string): string {
  const list = JSON.parse(n.ctr(['ps', '-a', '--id', containerId, '-o', 'json'])).containers as any[];
  return list[0].podSandboxId;
}

/** What the agent pod on the node logged (its JSON lines, from the node's log files). */
function agentLog(): Array<Record<string, any>> {
  const out = n.host.tryRun(['sh', '-c', `cat /var/log/pods/${NS}_rcm-node-agent-*/agent/*.log 2>/dev/null; true`]).stdout;
  return out.split('\n').filter(Boolean).flatMap(line => {
    try {
      return [JSON.parse(line.split(' ').slice(3).join(' '))];
    } catch {
      return [];
    }
  });
}

const seconds = (ms: number) => (ms / 1000).toFixed(1);

beforeAll(async () => {
  ({ cluster, api } = fleet());
  n = cluster.node(NODE);
  await publishOciPayload();
  startFolder = dropInFolder();
  startServed = n.configDump();
  cluster.controlPlane.kubectl(['label', 'node', NODE, `${SELECT_LABEL}=true`]);
}, 600_000);

step('the CRI-O node: Ready under the kubelet, cri-o://1.34.0, its runtime handlers listed, containerd masked', async () => {
  // GIVEN the node booted with CRI-O as its runtime
  const node = await getNode(NODE);
  // THEN its kubelet reports CRI-O 1.34.0 and the handlers CRI-O serves
  expect(condition(node, 'Ready')?.status).toBe('True');
  expect(node.status.nodeInfo.containerRuntimeVersion).toBe('cri-o://1.34.0');
  expect(node.status.nodeInfo.kubeletVersion).toBe(`v${KUBE_VERSION}`);
  expect(await runtimeHandlers()).toEqual(['', 'runc']);
  // AND CRI-O runs under its own unit; containerd is masked, its socket absent (the installer must take the node for CRI-O)
  expect(n.systemd!.unitState('crio')).toMatchObject({ activeState: 'active', subState: 'running' });
  expect(n.systemd!.show('crio', ['Type', 'ExecReload']).Type).toBe('notify');
  expect(n.host.tryRun(['systemctl', 'is-enabled', 'containerd']).stdout.trim()).toBe('masked');
  expect(n.host.tryRun(['test', '-e', '/run/containerd/containerd.sock']).code).not.toBe(0);
  expect(n.host.run(['crio', '--version'])).toMatch(/^crio version 1\.34\.0$/m);
  // AND CRI-O serves only its own runc, from the test bed's drop-in alone
  expect(Object.keys(startFolder)).toEqual(['10-crio.conf']);
  expect(Object.keys((parse(startServed) as any).crio.runtime.runtimes).sort()).toEqual(['runc']);
  expect(crioState().starts).toBe(1);
  process.stdout.write(`CRI-O node ${NODE}: ${node.status.nodeInfo.containerRuntimeVersion}, kubelet ${node.status.nodeInfo.kubeletVersion}, `
    + `handlers [${(await runtimeHandlers()).map(h => JSON.stringify(h)).join(', ')}]\n`);
});

step('install (Job mode): the OCI-runtime Shim goes in as the installer\'s own drop-in, CRI-O is restarted once, the kubelet lists the handler, and a pod of its RuntimeClass runs under the payload\'s runtime', async () => {
  const before = crioState();
  const since = Date.now();
  // WHEN the app with the Shim is applied (install mode Jobs, the default)
  applyApp(synthApp(true, false));
  // THEN the Shim becomes Ready on the node
  await eventually(shimReady, 240_000, diagnostics);
  const took = Date.now() - since;
  // AND the handler is the installer's own drop-in: an `oci` runtime whose path is the payload's runc
  const text = n.host.read(DROP_IN)!;
  expect(text.split('\n')[0]).toBe(`# rcm-node-installer: runtime handler ${HANDLER}`);
  expect((parse(text) as any).crio.runtime.runtimes[HANDLER]).toEqual({ runtime_type: 'oci', runtime_path: `${payloadDir()}/bin/runc` });
  // AND nothing else in the folder changed
  expect(Object.fromEntries(Object.entries(dropInFolder()).filter(([f]) => f !== path.basename(DROP_IN)))).toEqual(startFolder);
  // AND CRI-O was restarted once (a new main process, one more start in its journal), not reloaded
  const after = crioState();
  expect(after.mainPid).not.toBe(before.mainPid);
  expect(after.starts).toBe(before.starts + 1);
  expect(after.reloads).toBe(before.reloads);
  // AND the running CRI-O serves it, and the kubelet lists it
  expect(served(HANDLER)).toMatchObject({ runtime_type: 'oci', runtime_path: `${payloadDir()}/bin/runc` });
  await eventually(async () => (await runtimeHandlers()).includes(HANDLER), 60_000, diagnostics);
  expect(await runtimeHandlers()).toEqual(['', HANDLER, 'runc'].sort());
  // AND the gate is up on the node
  expect((await getNode(NODE)).metadata.labels[HANDLER_LABEL]).toBe(HANDLER);
  // WHEN a pod of the RuntimeClass runs on the node
  const ran = await runPod('crio-oci-1');
  // THEN it Succeeded, in a sandbox of the handler, its container monitored by conmon running the payload's runc
  expect(ran).toEqual({ phase: 'Succeeded', handler: HANDLER, monitor: expect.stringMatching(/conmon /) });
  expect(ran.monitor).toContain(`-r ${payloadDir()}/bin/runc `);
  process.stdout.write(`CRI-O install (Job): Ready in ${seconds(took)} s; starts ${before.starts} -> ${after.starts}, reloads ${after.reloads}; `
    + `pod under ${ran.handler}: ${ran.monitor.slice(0, 160)}...\n`);
  await deleteWorkloads();
});

step('drift (install mode NodeAgent): the drop-in deleted by hand is put back by the agent with one CRI-O restart and no download', async () => {
  // GIVEN the app in install mode NodeAgent (the agent takes over the node's installed handler)
  applyApp(synthApp(true, true));
  await eventually(async () => {
    const pods = (await api.get(`/api/v1/namespaces/${NS}/pods?labelSelector=${AGENT_SELECTOR}`)).items;
    return pods.some((p: any) => p.spec.nodeName === NODE && p.status?.phase === 'Running') && agentLog().some(l => l.msg === 'node agent starting');
  }, 180_000, diagnostics);
  await eventually(shimReady, 120_000, diagnostics);
  const installed = n.host.read(DROP_IN)!;
  const fetched = fetches;
  const before = crioState();
  await new Promise(r => setTimeout(r, 2 * DRIFT_SECONDS * 1000));
  expect(crioState()).toEqual(before);
  // WHEN an admin deletes the drop-in by hand
  const deletedAt = Date.now();
  n.host.run(['rm', DROP_IN]);
  // THEN the agent sees the drift and puts the drop-in back as it was
  await eventually(async () => n.host.read(DROP_IN) === installed && served(HANDLER) !== undefined && await shimReady(), 120_000, diagnostics);
  const repaired = Date.now() - deletedAt;
  const drift = agentLog().filter(l => /^drift: /.test(l.msg ?? '') && Date.parse(l.time ?? '') >= deletedAt - 1000);
  expect(drift.length).toBeGreaterThan(0);
  // AND CRI-O was restarted once for it, and nothing was downloaded (the payload was intact)
  const after = crioState();
  expect(after.starts).toBe(before.starts + 1);
  expect(after.reloads).toBe(before.reloads);
  expect(fetches).toBe(fetched);
  expect((await getNode(NODE)).metadata.labels[HANDLER_LABEL]).toBe(HANDLER);
  // AND a pod of the RuntimeClass runs under it again
  expect(await runPod('crio-oci-2')).toMatchObject({ phase: 'Succeeded', handler: HANDLER });
  process.stdout.write(`CRI-O drift: drop-in deleted, put back by the agent in ${seconds(repaired)} s (${drift.map(l => l.msg).join('; ').slice(0, 200)}); `
    + `starts ${before.starts} -> ${after.starts}\n`);
  await deleteWorkloads();
});

step('uninstall: deleting the Shim removes the drop-in, CRI-O is restarted once and no longer serves the handler, and the drop-in folder and CRI-O\'s running config are byte for byte as before', async () => {
  const before = crioState();
  const deletedAt = Date.now();
  // WHEN the app no longer has the Shim, and it is deleted (the GitOps prune)
  applyApp(synthApp(false, true));
  cluster.controlPlane.kubectl(['delete', 'shim', SHIM, '--wait=false']);
  // THEN the Shim goes
  await eventually(async () => (await api.get(SHIMS)).items.length === 0, 240_000, diagnostics);
  const took = Date.now() - deletedAt;
  // AND the folder is as before the suite, byte for byte, and CRI-O serves what it served then
  expect(dropInFolder()).toEqual(startFolder);
  expect(served(HANDLER)).toBeUndefined();
  expect(n.configDump()).toBe(startServed);
  // AND CRI-O was restarted once
  const after = crioState();
  expect(after.starts).toBe(before.starts + 1);
  expect(after.reloads).toBe(before.reloads);
  // AND the kubelet no longer lists the handler, the gate is gone, and the installer's files are gone
  await eventually(async () => !(await runtimeHandlers()).includes(HANDLER), 60_000, diagnostics);
  expect((await getNode(NODE)).metadata.labels[HANDLER_LABEL]).toBeUndefined();
  expect(n.host.tryRun(['sh', '-c', 'ls /opt/rcm/payloads /opt/rcm/state 2>/dev/null']).stdout.trim()).toBe('');
  process.stdout.write(`CRI-O uninstall: Shim gone in ${seconds(took)} s; starts ${before.starts} -> ${after.starts}\n`);
});
