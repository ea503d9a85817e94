import * as fs from 'fs';
import * as path from 'path';
import { Duration } from 'cdk8s';
import * as tar from 'tar';
import { InstallMode, ShimNodeLabels } from '../../src';
import {
  AppShim, AppWorkloads, apply, applyObject, applyShimAlone, bed, buildCrunPayload, buildGvisorPayload, condition, containerdConfig,
  containerLog, CRUN_PAYLOAD, deletePod, diagnostics, expectGvisorInstalled, expectHelloWasmRan, expectPodInsideGvisor, expectPodUnderCrun,
  expectWasmInstalled, getShim, gone, GVISOR_PAYLOAD, importPayloadImage, listTree, LogLine, nodeAnnotations, nodeLabels, NS, Payload, pod,
  podWhen, readyOnTheNode, setUpE2eBed, sha256, SHIMS, step, underShim, WASM_RUNTIME, wasmPod, logText, runtimeOf, HELLO_LINE,
} from '../support/e2e-app';
import { bindStrayControllersToV1 } from '../support/host-cgroups';
import { eventually, Rest } from '../support/rest';
import { SingleNodeCluster } from '../support/single-node-cluster';
import { PAYLOAD_RUNC_SHIM } from '../support/tools';
import { buildWasmImage, buildWasmPayload, packShimRelease, SHIM_RELEASES, WasmImage, WasmPayload } from '../support/wasm';

// Install mode NodeAgent on a real single-node cluster: the app synthesizes the controller with
// --install-mode agent and the rcm-node-agent DaemonSet; the agent pod (the installer image)
// carries out what the controller admits in the node record, restarts containerd, and
// repairs drift; workload pods run under the installed shim, and under the payloads the Jobs
// suite (shim-lifecycle.test.ts) proves too: gVisor, crun, crun with WasmEdge. No installer
// Job is made.
// Needs root and the binaries of scripts/provision.sh; run it with `npx projen e2e`.

const SHIM = 'agent-runc';
const HANDLER_LABEL = ShimNodeLabels.handlerKey(SHIM);

let cluster: SingleNodeCluster;
let api: Rest;
let installRoot: string;
let artifact: { location: string; sha256: string };
let configBefore: string;
/** The payload Shims the app carries besides the runc one. */
let payloadShims: Record<string, AppShim> = {};

setUpE2eBed({ installMode: InstallMode.nodeAgent({ driftCheck: Duration.seconds(3) }) });

beforeAll(async () => {
  ({ cluster, api, installRoot } = bed());
  const work = bed().work;
  // A real shim: containerd's runc shim under the handler's name.
  const dir = path.join(work, 'artifact');
  fs.mkdirSync(dir);
  fs.copyFileSync(PAYLOAD_RUNC_SHIM, path.join(dir, `containerd-shim-${SHIM}-v2`));
  const file = path.join(work, 'www', 'shim.tar.gz');
  await tar.c({ file, cwd: dir, gzip: true, portable: true }, [`containerd-shim-${SHIM}-v2`]);
  artifact = { location: `${bed().artifactBase}/shim.tar.gz`, sha256: sha256(fs.readFileSync(file)) };
  configBefore = fs.readFileSync(cluster.containerd.config, 'utf8');
}, 300_000);

/** The app in install mode NodeAgent: the runc Shim (or not), the payload Shims of the steps so far, and `extra`. */
function applyApp(withShim: boolean, extra: Record<string, AppShim> = {}, workloads?: AppWorkloads): void {
  apply({ ...(withShim ? { [SHIM]: { location: artifact.location, sha256: artifact.sha256 } } : {}), ...payloadShims, ...extra }, workloads);
}

const effective = () => containerdConfig().dump;

/** The agent's process on this machine (the node), and what it costs: resident and peak memory, CPU seconds so far. */
function agentProcess(): { pid: number; rssMiB: number; peakMiB: number; cpuSeconds: number } {
  const pid = fs.readdirSync('/proc').filter(p => /^\d+$/.test(p)).map(Number).find(p => {
    try {
      return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('rcm-node-agent.js');
    } catch {
      return false;
    }
  });
  if (pid === undefined) throw new Error('no rcm-node-agent process on the node');
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)![1]);
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return { pid, rssMiB: kb('VmRSS') / 1024, peakMiB: kb('VmHWM') / 1024, cpuSeconds: (Number(stat[11]) + Number(stat[12])) / 100 };
}

const agentPods = async () => (await api.get(`/api/v1/namespaces/${NS}/pods?labelSelector=${encodeURIComponent('app.kubernetes.io/component=node-agent')}`)).items;

/** What the agent pods on the node logged (their JSON lines, read from the node's log files). */
async function agentLog(): Promise<Array<Record<string, any>>> {
  return (await agentPods()).flatMap((p: any) => containerLog(p, p.spec.containers[0].name)).flatMap((line: LogLine) => {
    try {
      return [JSON.parse(line.text)];
    } catch {
      return [];
    }
  });
}

/** The agent carried out an operation of this Shim (it logs each request it takes), and there is no installer Job. */
async function expectDoneByTheAgent(operation: 'install' | 'uninstall', shim: string): Promise<void> {
  expect(await agentLog()).toEqual(expect.arrayContaining([expect.objectContaining({ msg: `${operation} of ${shim} admitted`, shim })]));
  expect((await api.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items).toEqual([]);
}

step('applied in install mode NodeAgent, the Shim is installed by the agent pod, without a Job, and a pod runs under it', async () => {
  const containerdPid = cluster.containerd.pid();
  // WHEN the app is applied
  applyApp(true);
  // THEN the agent pod runs, the Shim becomes Ready and the node carries its gate
  await eventually(async () => (await agentPods()).some((p: any) => p.status?.phase === 'Running'), 120_000, diagnostics);
  await eventually(async () => {
    const s = await api.get(`${SHIMS}/${SHIM}`);
    return s.status?.conditions?.some((c: any) => c.type === 'Ready' && c.status === 'True') && s.status.nodesReady === 1;
  }, 180_000, diagnostics);
  expect((await nodeLabels())[HANDLER_LABEL]).toBe(SHIM);
  expect(effective()).toContain(`containerd-shim-${SHIM}-v2`);
  expect(cluster.containerd.pid()).not.toBe(containerdPid);
  // AND no installer Job was made
  expect((await api.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items).toEqual([]);
  // WHEN a workload uses the RuntimeClass THEN it succeeds
  applyObject(pod('agent-workload', 'echo ok', SHIM));
  expect((await podWhen('agent-workload', ['Succeeded', 'Failed'], 120_000)).status.phase).toBe('Succeeded');
  await deletePod('agent-workload');
});

step('drift: the handler\'s drop-in deleted drops the gate within the drift check, and the agent repairs the node without a human', async () => {
  // GIVEN the handler installed, on containerd 2.4 in a drop-in of its own that the config imports
  const dropIn = path.join(path.dirname(cluster.containerd.config), 'conf.d', `rcm-${SHIM}.toml`);
  const installedDropIn = fs.readFileSync(dropIn, 'utf8');
  const installedConfig = fs.readFileSync(cluster.containerd.config, 'utf8');
  expect(installedConfig).toBe(configBefore);
  // WHEN configuration management that owns the drop-in folder removes the file it does not know
  const changedAt = Date.now();
  fs.rmSync(dropIn);
  // THEN the gate goes within the drift check's period (3 s) plus a margin
  await eventually(async () => (await nodeLabels())[HANDLER_LABEL] === undefined, 30_000, diagnostics);
  const gateGone = (Date.now() - changedAt) / 1000;
  // AND the controller admits the install again and the agent repairs the node: the handler is back
  await eventually(async () => (await nodeLabels())[HANDLER_LABEL] === SHIM && effective().includes(`containerd-shim-${SHIM}-v2`), 120_000, diagnostics);
  const repaired = (Date.now() - changedAt) / 1000;
  process.stdout.write(`node agent e2e: config rewritten -> gate gone after ${gateGone.toFixed(1)} s, repaired after ${repaired.toFixed(1)} s\n`);
  // The agent's peak memory so far: two change sets (the install, the repair) and the drift checks.
  const agent = agentProcess();
  process.stdout.write(`node agent e2e: the agent's peak RSS after two change sets ${agent.peakMiB.toFixed(0)} MiB, CPU so far ${agent.cpuSeconds.toFixed(2)} s\n`);
  expect(agent.peakMiB).toBeLessThan(512); // its memory limit
  expect(gateGone).toBeLessThan(30);
  expect(fs.readFileSync(cluster.containerd.config, 'utf8')).toBe(installedConfig);
  expect(fs.readFileSync(dropIn, 'utf8')).toBe(installedDropIn);
  // AND a pod under the RuntimeClass runs again
  applyObject(pod('agent-after-drift', 'echo ok', SHIM));
  expect((await podWhen('agent-after-drift', ['Succeeded', 'Failed'], 120_000)).status.phase).toBe('Succeeded');
  await deletePod('agent-after-drift');
});

step('the agent pod replaced (an upgrade of the DaemonSet): no containerd restart, nothing uninstalled, the gate stays', async () => {
  const containerdPid = cluster.containerd.pid();
  const [before] = await agentPods();
  await api.request('DELETE', `/api/v1/namespaces/${NS}/pods/${before.metadata.name}`);
  await eventually(async () => (await agentPods()).some((p: any) => p.metadata.uid !== before.metadata.uid && p.status?.phase === 'Running'), 120_000, diagnostics);
  // The new agent has checked the node (drift period 3 s) and found nothing to do.
  await new Promise(r => setTimeout(r, 5000));
  // Its cost while idle: 10 s of watching and drift checks (one every 3 s).
  const idleFrom = agentProcess();
  await new Promise(r => setTimeout(r, 10_000));
  const idleTo = agentProcess();
  process.stdout.write(`node agent e2e: idle agent RSS ${idleTo.rssMiB.toFixed(0)} MiB, CPU ${((idleTo.cpuSeconds - idleFrom.cpuSeconds) / 10 * 100).toFixed(1)}% of a core `
    + '(drift check every 3 s)\n');
  expect(cluster.containerd.pid()).toBe(containerdPid);
  expect((await nodeLabels())[HANDLER_LABEL]).toBe(SHIM);
  expect(effective()).toContain(`containerd-shim-${SHIM}-v2`);
});

// The payloads of the Jobs suite, through the agent: the same Shims, the same proofs on the node
// and in the pods (the helpers of test/support/e2e-app.ts), installed and removed by the agent.

const GVISOR = 'agent-gvisor';
const CRUN = 'agent-crun';
const WASM = 'agent-wasm';
const IMAGE = 'agent-gvisor-image';
const RUNWASI = 'wasmtime';
let gvisor: Payload;
let wasmPayload: WasmPayload;
let helloImage: WasmImage;
/** containerd's config with the runc Shim installed, before any payload. */
let configBeforePayloads: string;

step('the gVisor payload over HTTP, installed by the agent: a pod runs inside gVisor', async () => {
  configBeforePayloads = containerdConfig().file;
  const containerdPid = cluster.containerd.pid();
  // GIVEN gVisor as a payload (runc's shim, runsc and a wrapper) WHEN its Shim is applied in install mode NodeAgent
  gvisor = await buildGvisorPayload();
  payloadShims = { [GVISOR]: { location: gvisor.location, sha256: gvisor.sha256, ...GVISOR_PAYLOAD } };
  applyApp(true);
  // THEN the agent installs it (no Job), containerd restarted with the handler
  await readyOnTheNode(GVISOR);
  await expectDoneByTheAgent('install', GVISOR);
  expect(cluster.containerd.pid()).not.toBe(containerdPid);
  expectGvisorInstalled(GVISOR, gvisor);
  // AND a pod of its RuntimeClass runs inside gVisor: the kernel the pod reports is gVisor's, not the host's
  await expectPodInsideGvisor('agent-under-gvisor', GVISOR);
});

step('the crun payload, installed by the agent: a pod runs under crun', async () => {
  const crun = await buildCrunPayload();
  // (crun refuses a hybrid cgroup host with controllers left in v2, which real systemd hosts do not have)
  bindStrayControllersToV1();
  payloadShims = { ...payloadShims, [CRUN]: { location: crun.location, sha256: crun.sha256, ...CRUN_PAYLOAD } };
  applyApp(true);
  await readyOnTheNode(CRUN);
  await expectDoneByTheAgent('install', CRUN);
  // THEN its container's state is crun's (a `status` file), not runc's (`state.json`)
  await expectPodUnderCrun('agent-under-crun', CRUN);
});

step('crun with WasmEdge (168 MiB unpacked), installed by the agent: hello.wasm runs under the Shim with its workload annotation', async () => {
  wasmPayload = await buildWasmPayload(path.join(bed().work, 'www', 'crun-wasmedge.tgz'));
  helloImage = await buildWasmImage('hello', bed().work);
  cluster.importImage(helloImage.tarball);
  payloadShims = { ...payloadShims, [WASM]: { location: `${bed().artifactBase}/crun-wasmedge.tgz`, sha256: wasmPayload.sha256, ...WASM_RUNTIME } };
  applyApp(true);
  await readyOnTheNode(WASM);
  await expectDoneByTheAgent('install', WASM);
  // THEN the payload is on the node as the Jobs suite finds it, links kept, and containerd lets crun's annotations through
  await expectWasmInstalled(WASM, wasmPayload);
  // (the agent unpacked the payload in its own process, within its memory limit)
  const agent = agentProcess();
  process.stdout.write(`node agent e2e: the agent's peak RSS after the gVisor, crun and crun + WasmEdge payloads ${agent.peakMiB.toFixed(0)} MiB\n`);
  expect(agent.peakMiB).toBeLessThan(512);
  // WHEN the app runs hello.wasm under the Shim (runWorkload: its RuntimeClass and the Shim's workloadAnnotations)
  applyApp(true, {}, underShim(WASM, [['agent-wasm-hello', helloImage.reference]]));
  // THEN the pod carries both, and the module ran to its end with its line in the log
  expectHelloWasmRan(await podWhen('agent-wasm-hello', ['Succeeded', 'Failed'], 120_000), WASM);
  await deletePod('agent-wasm-hello');
});

step('runwasi\'s wasmtime shim from its release tarball, installed by the agent: hello.wasm runs under RuntimeClass wasmtime, no annotation needed', async () => {
  // GIVEN runwasi's shim packed as its release asset (containerd-shim-wasmtime-v1 at the top of the tarball)
  const release = await packShimRelease(path.join(bed().work, 'www'), SHIM_RELEASES.wasmtime);
  payloadShims = { ...payloadShims, [RUNWASI]: { location: `${bed().artifactBase}/${SHIM_RELEASES.wasmtime.tarball}`, sha256: release.sha256 } };
  // WHEN the app adds the Shim
  applyApp(true);
  await readyOnTheNode(RUNWASI);
  await expectDoneByTheAgent('install', RUNWASI);
  // THEN containerd serves the handler with the installed binary, and a plain pod of its RuntimeClass runs the module under it
  const binary = path.join(installRoot, 'shims', RUNWASI, release.sha256.slice(0, 16), release.binary);
  expect(sha256(fs.readFileSync(binary))).toBe(release.binarySha256);
  expect(containerdConfig().dump).toContain(`runtime_type = "${binary}"`);
  applyObject(wasmPod('agent-wasmtime-hello', helloImage.reference, { runtimeClassName: RUNWASI }));
  const done = await podWhen('agent-wasmtime-hello', ['Succeeded', 'Failed'], 120_000);
  expect({ phase: done.status.phase, log: logText(done), runtime: runtimeOf(done) }).toEqual({ phase: 'Succeeded', log: [HELLO_LINE], runtime: binary });
  await deletePod('agent-wasmtime-hello');
});

step('an artifact in an image is refused in install mode NodeAgent: the Shim is invalid at once, and nothing changes on the node', async () => {
  // GIVEN the gVisor payload in an image on the node, pinned by digest (what install mode Jobs installs: shim-lifecycle.test.ts)
  const reference = await importPayloadImage('rcm-agent-gvisor-payload', gvisor.path, '/payload/gvisor.tgz');
  const config = containerdConfig().file;
  const files = listTree(installRoot);
  const containerdPid = cluster.containerd.pid();
  const imageShim = { image: { reference, path: '/payload/gvisor.tgz', sha256: gvisor.sha256 }, ...GVISOR_PAYLOAD };
  // WHEN the app adds a Shim that takes its artifact from it THEN synth refuses it, naming the field
  expect(() => applyApp(true, { [IMAGE]: imageShim })).toThrow(`addShim("${IMAGE}"): image: install mode NodeAgent fetches artifacts over HTTP(S) only`);
  // WHEN the Shim is applied on its own (kubectl, another app), in install mode NodeAgent
  const appliedAt = Date.now();
  applyShimAlone(IMAGE, imageShim);
  // THEN the controller marks it invalid, on its first pass, with the reason and what to do
  const degraded = await eventually(async () => {
    const s = await getShim(IMAGE);
    return condition(s, 'Degraded')?.status === 'True' ? s : undefined;
  }, 120_000, diagnostics);
  process.stdout.write(`node agent e2e: an artifact in an image, invalid after ${((Date.now() - appliedAt) / 1000).toFixed(1)} s: ${condition(degraded, 'Degraded').message}\n`);
  expect(condition(degraded, 'Degraded')).toMatchObject({ reason: 'InvalidShim', message: expect.stringContaining('ImageArtifactNeedsJobs') });
  expect(condition(degraded, 'Degraded').message).toContain('use install mode Jobs');
  expect(condition(degraded, 'Ready').status).toBe('False');
  expect(degraded.status.nodesFailed ?? 0).toBe(0);
  // AND no request was ever admitted on the node
  expect(Object.keys(await nodeAnnotations()).filter(k => k.startsWith(`${IMAGE}.`))).toEqual([]);
  // AND nothing changed on the node: no gate, the same config and files, no containerd restart, no Job
  expect((await nodeLabels())[ShimNodeLabels.handlerKey(IMAGE)]).toBeUndefined();
  expect(containerdConfig().file).toBe(config);
  expect(listTree(installRoot)).toEqual(files);
  expect(cluster.containerd.pid()).toBe(containerdPid);
  expect((await api.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items).toEqual([]);
  // AND the other Shims are still Ready
  for (const name of [SHIM, GVISOR, CRUN, WASM]) expect(condition(await getShim(name), 'Ready').status).toBe('True');
  // WHEN the refused Shim is deleted THEN it goes, and still nothing changed on the node
  applyApp(true);
  cluster.controlPlane.kubectl(['delete', 'shim', IMAGE, '--wait=false']);
  await gone(`${SHIMS}/${IMAGE}`, 120_000);
  expect(containerdConfig().file).toBe(config);
  expect(listTree(installRoot)).toEqual(files);
  expect(cluster.containerd.pid()).toBe(containerdPid);
});

step('deleting the payload Shims uninstalls them through the agent: the config is as before the payloads, byte for byte', async () => {
  const names = Object.keys(payloadShims);
  payloadShims = {};
  applyApp(true);
  cluster.controlPlane.kubectl(['delete', 'shim', ...names, '--wait=false']);
  for (const name of names) {
    await gone(`${SHIMS}/${name}`, 180_000);
    await gone(`/apis/node.k8s.io/v1/runtimeclasses/${name}`);
    await expectDoneByTheAgent('uninstall', name);
  }
  expect(containerdConfig().file).toBe(configBeforePayloads);
  expect(listTree(path.join(installRoot, 'payloads'))).toEqual([]);
  const labels = await nodeLabels();
  for (const name of names) expect(labels[ShimNodeLabels.handlerKey(name)]).toBeUndefined();
  // AND the runc Shim still serves the node
  expect(labels[HANDLER_LABEL]).toBe(SHIM);
});

step('deleting the Shim uninstalls it through the agent: the config is the original again, byte for byte', async () => {
  applyApp(false);
  cluster.controlPlane.kubectl(['delete', 'shim', SHIM, '--wait=false']);
  await gone(`${SHIMS}/${SHIM}`, 180_000);
  expect(fs.readFileSync(cluster.containerd.config, 'utf8')).toBe(configBefore);
  expect((await nodeLabels())[HANDLER_LABEL]).toBeUndefined();
  expect(fs.existsSync(path.join(installRoot, 'shims', SHIM))).toBe(false);
});
