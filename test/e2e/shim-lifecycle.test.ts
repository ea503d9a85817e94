import * as fs from 'fs';
import * as path from 'path';
import * as tar from 'tar';
import { ShimNodeLabels } from '../../src';
import {
  apply, applyObject, AppShim, bed, buildCrunPayload, buildGvisorPayload, condition, containerdConfig, containerId, containerLog, CRUN_PAYLOAD,
  deletePod, diagnostics, expectGvisorInstalled, expectHelloWasmRan, expectPodInsideGvisor, expectPodUnderCrun, expectWasmInstalled, getShim, gone,
  GVISOR_PAYLOAD, HELLO_LINE, importPayloadImage, listTree, logText, nodeLabels, NS, Payload, payloadFolder, pod, podWhen, readyOnTheNode, runtimeOf,
  RUNTIMES, setUpE2eBed, sha256, SHIMS, step, underShim, VARIANT, WASM_RUNTIME, wasmPod,
} from '../support/e2e-app';
import { bindStrayControllersToV1 } from '../support/host-cgroups';
import { eventually, Rest } from '../support/rest';
import { SingleNodeCluster } from '../support/single-node-cluster';
import { PAYLOAD_RUNC_SHIM } from '../support/tools';
import { buildWasmImage, buildWasmPayload, WasmImage, WasmPayload } from '../support/wasm';

// The whole loop on a real single-node cluster: cdk8s synth -> kubectl apply -> the
// controller pod runs installer Jobs -> the installer edits containerd's config and restarts
// it -> a workload pod runs under the installed shim -> and back to a clean node.
// Needs root and the binaries of scripts/provision.sh; run it with `npx projen e2e`.

const SHIM = 'e2e-runc';
const HANDLER = 'e2e-runc';
const BAD_SHIM = 'e2e-bad';
const STATE_LABEL = ShimNodeLabels.stateKey(SHIM);
const HANDLER_LABEL = ShimNodeLabels.handlerKey(SHIM);

let cluster: SingleNodeCluster;
let api: Rest;
let work: string;
let installRoot: string;
let artifactBase: string;
let configBefore: { file: string; dump: string };
const artifacts: Record<string, { file: string; sha256: string; shimSha256: string }> = {};

/** A tarball with a real shim: containerd-shim-runc-v2 renamed, plus `extra` bytes to make a distinct version. */
async function buildArtifact(version: string, extra: string, handler = HANDLER): Promise<void> {
  const dir = path.join(work, `artifact-${version}`);
  fs.mkdirSync(dir);
  const shim = path.join(dir, `containerd-shim-${handler}-v2`);
  // Bytes after the end of an ELF file are ignored by the loader: same program, new checksum.
  fs.writeFileSync(shim, Buffer.concat([fs.readFileSync(PAYLOAD_RUNC_SHIM), Buffer.from(extra)]), { mode: 0o755 });
  const file = path.join(work, 'www', `shim-${version}.tar.gz`);
  await tar.c({ file, cwd: dir, gzip: true, portable: true }, [path.basename(shim)]);
  artifacts[version] = { file, sha256: sha256(fs.readFileSync(file)), shimSha256: sha256(fs.readFileSync(shim)) };
}

interface ShimVersion {
  readonly location: string;
  readonly sha256: string;
}

function published(v: string): ShimVersion {
  return { location: `${artifactBase}/shim-${v}.tar.gz`, sha256: artifacts[v].sha256 };
}

/** Where the installer puts a version's binary: its own folder, named by the artifact's sha256. */
function installedBinary(v: string): string {
  return path.join(installRoot, 'shims', HANDLER, artifacts[v].sha256.slice(0, 16), `containerd-shim-${HANDLER}-v2`);
}

// The app runs its controller in install mode Jobs (the default). A bad checksum is a failure
// after two quick attempts, not after minutes of backoff.
setUpE2eBed({ failureThreshold: 2 });

beforeAll(async () => {
  ({ cluster, api, work, installRoot, artifactBase } = bed());
  await buildArtifact('v1', '\nrcm-e2e v1\n');
  await buildArtifact('v2', '\nrcm-e2e v2\n');
  configBefore = containerdConfig();
}, 300_000);

step('before the install, a pod with the shim\'s handler cannot run', async () => {
  // GIVEN a RuntimeClass for the handler, but no shim on the node
  applyObject({ apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'e2e-probe' }, handler: HANDLER });
  // WHEN a pod uses it
  applyObject(pod('before-install', 'true', 'e2e-probe'));
  // THEN containerd refuses the sandbox: it has no runtime for the handler
  const event = await eventually(async () => (await api.get('/api/v1/namespaces/default/events')).items
    .find((e: any) => e.involvedObject.name === 'before-install' && e.reason === 'FailedCreatePodSandBox'), 60_000, diagnostics);
  expect(event.message).toContain(HANDLER);
  expect((await api.get('/api/v1/namespaces/default/pods/before-install')).status.phase).toBe('Pending');
  await deletePod('before-install');
  cluster.controlPlane.kubectl(['delete', 'runtimeclass', 'e2e-probe']);
});

step('synthesized and applied, the Shim installs on the node and a pod runs under the installed binary', async () => {
  const containerdPid = cluster.containerd.pid();
  // WHEN the app is synthesized and applied server-side
  apply({ [SHIM]: published('v1') });

  // THEN the Shim becomes Ready on the one node, which carries the handler label
  const ready = await eventually(async () => {
    const s = await getShim(SHIM);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 1 ? s : undefined;
  }, 180_000, diagnostics);
  expect(ready.status).toMatchObject({ nodes: 1, nodesReady: 1, nodesFailed: 0 });
  expect(await nodeLabels()).toMatchObject({ [STATE_LABEL]: 'provisioned', [HANDLER_LABEL]: HANDLER });
  // AND the RuntimeClass schedules onto that label
  const rc = await api.get(`/apis/node.k8s.io/v1/runtimeclasses/${SHIM}`);
  expect(rc).toMatchObject({ handler: HANDLER, scheduling: { nodeSelector: { [HANDLER_LABEL]: HANDLER } } });
  // AND the installer ran through the controller's Job, restarting containerd through nsenter
  const installed = installedBinary('v1');
  expect(sha256(fs.readFileSync(installed))).toBe(artifacts.v1.shimSha256);
  expect(containerdConfig().dump).toContain(installed);
  expect(cluster.containerd.pid()).not.toBe(containerdPid);

  // WHEN a workload pod uses the RuntimeClass THEN it succeeds under the installed binary
  applyObject(pod('workload-v1', 'echo hello from the shim > /dev/termination-log', SHIM));
  const done = await podWhen('workload-v1', ['Succeeded', 'Failed']);
  expect(done.status.phase).toBe('Succeeded');
  expect(done.spec.nodeName).toBe(cluster.nodeName);
  expect(done.status.containerStatuses[0].state.terminated.message).toBe('hello from the shim\n');
  expect(runtimeOf(done)).toBe(installed);
  await deletePod('workload-v1');
});

step('a new artifact rolls out again; a pod on the old version keeps running, new pods get the new binary', async () => {
  // GIVEN a long-running pod under v1
  applyObject(pod('long-runner', 'sleep 3600', SHIM));
  const running = await podWhen('long-runner', ['Running']);
  const v1Binary = runtimeOf(running);
  const revisionBefore = (await getShim(SHIM)).status.revision;

  // WHEN the Shim gets a new artifact with a new sha256
  apply({ [SHIM]: published('v2') });

  // THEN it rolls out again and is Ready on the new revision
  const v2Binary = installedBinary('v2');
  await eventually(async () => {
    const s = await getShim(SHIM);
    return s.status.revision !== revisionBefore && condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 1;
  }, 180_000, diagnostics);
  const { dump } = containerdConfig();
  expect(dump).toContain(v2Binary);
  expect(dump).not.toContain(v1Binary);

  // AND the old pod was not disturbed: still running, same container, same binary
  const still = await api.get('/api/v1/namespaces/default/pods/long-runner');
  expect(still.status.phase).toBe('Running');
  expect(still.status.containerStatuses[0].restartCount).toBe(0);
  expect(still.status.containerStatuses[0].containerID).toBe(running.status.containerStatuses[0].containerID);
  expect(runtimeOf(still)).toBe(v1Binary);

  // AND a new pod runs the new binary
  applyObject(pod('workload-v2', 'echo v2 > /dev/termination-log', SHIM));
  const done = await podWhen('workload-v2', ['Succeeded', 'Failed']);
  expect(done.status.phase).toBe('Succeeded');
  expect(runtimeOf(done)).toBe(v2Binary);
  expect(sha256(fs.readFileSync(v2Binary))).toBe(artifacts.v2.shimSha256);

  // AND the old pod still stops cleanly
  await deletePod('long-runner');
  await deletePod('workload-v2');
});

step('an artifact with a wrong sha256 degrades its Shim and leaves the node and the other Shim alone', async () => {
  const before = containerdConfig();
  const filesBefore = listTree(installRoot);
  // WHEN a second Shim points at the v1 tarball with the v2 tarball's checksum
  apply({ [SHIM]: published('v2'), [BAD_SHIM]: { location: published('v1').location, sha256: artifacts.v2.sha256 } });

  // THEN it is Degraded with the reason
  const degraded = await eventually(async () => {
    const s = await getShim(BAD_SHIM);
    return condition(s, 'Degraded')?.status === 'True' ? s : undefined;
  }, 180_000, diagnostics);
  expect(condition(degraded, 'Degraded').message).toContain('ChecksumMismatch');
  expect(condition(degraded, 'Ready').status).toBe('False');
  expect(degraded.status.nodesFailed).toBe(1);
  expect((await nodeLabels())[ShimNodeLabels.stateKey(BAD_SHIM)]).toBe('failed');
  const warning = await eventually(async () => (await api.get('/api/v1/namespaces/default/events')).items
    .find((e: any) => e.involvedObject.name === BAD_SHIM && e.reason === 'InstallFailed'), 30_000, diagnostics);
  expect(warning).toMatchObject({ type: 'Warning', message: expect.stringContaining('ChecksumMismatch') });
  // AND the node is untouched: same containerd config, no new files
  expect(containerdConfig()).toEqual(before);
  expect(listTree(installRoot)).toEqual(filesBefore);
  // AND the first Shim still works
  expect(condition(await getShim(SHIM), 'Ready').status).toBe('True');
  applyObject(pod('workload-after-bad', 'true', SHIM));
  expect((await podWhen('workload-after-bad', ['Succeeded', 'Failed'])).status.phase).toBe('Succeeded');
  await deletePod('workload-after-bad');
});

let gvisor: Payload;

step('a gVisor payload (runc shim, runsc and a wrapper) is installed through a Shim and runs a pod inside gVisor', async () => {
  // GIVEN gVisor as a payload of three files: containerd's runc shim, Debian's runsc and a wrapper adding this machine's flags
  gvisor = await buildGvisorPayload();
  // WHEN a Shim with that payload is applied
  apply({ [SHIM]: published('v2'), 'e2e-gvisor': { location: gvisor.location, sha256: gvisor.sha256, ...GVISOR_PAYLOAD } });
  await readyOnTheNode('e2e-gvisor');
  // THEN the payload is one folder on the node and containerd gives the handler its shim and wrapper
  expectGvisorInstalled('e2e-gvisor', gvisor);
  // AND a pod of its RuntimeClass ran inside gVisor: its kernel is gVisor's, as the pod itself reports through the API
  await expectPodInsideGvisor('under-gvisor', 'e2e-gvisor');
});

step('a crun payload (runc shim, crun and its library) runs a pod under crun', async () => {
  // GIVEN crun as a payload: Debian's crun, the library a Debian base lacks, and a wrapper finding it
  const crun = await buildCrunPayload();
  // (crun refuses a hybrid cgroup host with controllers left in v2, which real systemd hosts do not have)
  bindStrayControllersToV1();
  apply({ [SHIM]: published('v2'), 'e2e-crun': { location: crun.location, sha256: crun.sha256, ...CRUN_PAYLOAD } });
  await readyOnTheNode('e2e-crun');
  // WHEN a pod uses its RuntimeClass THEN its container's state is crun's, not runc's
  await expectPodUnderCrun('under-crun', 'e2e-crun');
});

step('the gVisor payload delivered as an image pinned by digest runs a pod inside gVisor', async () => {
  // GIVEN the same payload inside an image known on the node by its digest only (built without Docker)
  const reference = await importPayloadImage('rcm-gvisor-payload', gvisor.path, '/payload/gvisor.tgz');
  // WHEN a Shim takes its artifact from that image, pinned by digest and checked by sha256
  apply({ [SHIM]: published('v2'), 'e2e-gvisor-image': { image: { reference, path: '/payload/gvisor.tgz', sha256: gvisor.sha256 }, ...GVISOR_PAYLOAD } });
  await readyOnTheNode('e2e-gvisor-image');
  expect(listTree(payloadFolder('e2e-gvisor-image', gvisor.sha256))).toContain('/bin/runsc');
  // THEN a pod of its RuntimeClass runs inside gVisor
  await expectPodInsideGvisor('under-gvisor-image', 'e2e-gvisor-image');
});

// WebAssembly for real: Debian trixie's crun, built with WasmEdge, as a payload for this
// bookworm node (crun.real, its library closure with trixie's own loader and libc, soname links
// kept, and a wrapper running crun through that loader), driven by runc's shim through
// BinaryName; hand-written WASI modules in images holding nothing but the .wasm file.

const WASM_SHIM = 'e2e-wasm';
const WASM_IMAGE_SHIM = 'e2e-wasm-image';
const SLEEP_LINES = ['sleep.wasm: going to sleep 15s', 'sleep.wasm: woke up after 15s'];
let wasmPayload: WasmPayload;
let helloImage: WasmImage;
let sleepImage: WasmImage;
/** The Shims each apply of the Wasm steps carries. */
let wasmShims: Record<string, AppShim>;

/** The host PID of a running container's process, as containerd reports it. */
function taskPid(id: string): number {
  const line = cluster.containerd.ctr(['-n', 'k8s.io', 'tasks', 'ls']).split('\n').find(l => l.startsWith(`${id} `));
  if (!line) throw new Error(`containerd has no task ${id}`);
  return Number(line.split(/\s+/)[1]);
}

step('crun with WasmEdge as a payload (a .tar.gz over HTTP): the Wasm Shim becomes Ready and a pod runs a WASI module under it', async () => {
  // GIVEN the payload (168 MiB of crun and its libraries, with soname links, plus runc's shim) and the modules' images
  bindStrayControllersToV1();
  wasmPayload = await buildWasmPayload(path.join(work, 'www', 'crun-wasmedge.tgz'));
  helloImage = await buildWasmImage('hello', work);
  sleepImage = await buildWasmImage('sleep', work);
  cluster.importImage(helloImage.tarball);
  cluster.importImage(sleepImage.tarball);
  wasmShims = { [SHIM]: published('v2'), [WASM_SHIM]: { location: `${artifactBase}/crun-wasmedge.tgz`, sha256: wasmPayload.sha256, ...WASM_RUNTIME } };
  // WHEN the Wasm Shim is applied
  apply(wasmShims);
  await readyOnTheNode(WASM_SHIM);
  // THEN the payload is one folder on the node, its links kept as links; containerd's handler runs the payload's shim with
  // crun as its binary and lets crun's annotations through; its RuntimeClass selects the node through the handler label
  await expectWasmInstalled(WASM_SHIM, wasmPayload);

  // WHEN the app runs hello.wasm under the Shim (runWorkload: its RuntimeClass and its workload annotation)
  apply(wasmShims, underShim(WASM_SHIM, [['wasm-hello', helloImage.reference]]));
  // THEN the pod carries both, and the module ran to its end with its line in the log
  expectHelloWasmRan(await podWhen('wasm-hello', ['Succeeded', 'Failed'], 120_000), WASM_SHIM);
  await deletePod('wasm-hello');
});

step('the same image fails without the annotation (crun runs it as a program) and without the RuntimeClass (runc runs it)', async () => {
  // GIVEN the hello image applied as plain pods: the RuntimeClass without the annotation, the annotation without the RuntimeClass
  applyObject(wasmPod('wasm-no-annotation', helloImage.reference, { runtimeClassName: WASM_SHIM }));
  applyObject(wasmPod('wasm-no-runtimeclass', helloImage.reference, { annotations: VARIANT }));
  // THEN both fail, and neither ran the module
  const noAnnotation = await podWhen('wasm-no-annotation', ['Succeeded', 'Failed'], 120_000);
  const noRuntimeClass = await podWhen('wasm-no-runtimeclass', ['Succeeded', 'Failed'], 120_000);
  for (const failed of [noAnnotation, noRuntimeClass]) {
    expect(failed.status.phase).toBe('Failed');
    expect(logText(failed)).not.toContain(HELLO_LINE);
  }
  // AND each says who refused it: crun (its JSON log line, exit 1) tried to exec the module as a
  // program; runc did the same (runc 1.4 ends such a container with 255, 1.1 did with 1)
  expect(noAnnotation.status.containerStatuses[0].state.terminated.exitCode).toBe(1);
  expect(logText(noAnnotation)).toEqual([expect.stringMatching(/^\{"msg":"exec container process `\/hello.wasm`: Exec format error","level":"error"/)]);
  expect(noRuntimeClass.status.containerStatuses[0].state.terminated.exitCode).not.toBe(0);
  expect(logText(noRuntimeClass).join('\n')).toMatch(/exec \/hello.wasm: exec format error/);
  await deletePod('wasm-no-annotation');
  await deletePod('wasm-no-runtimeclass');
});

step('a long-running Wasm pod keeps running while another Wasm pod starts and ends on the same node', async () => {
  // GIVEN sleep.wasm running under the Shim
  apply(wasmShims, underShim(WASM_SHIM, [['wasm-sleep', sleepImage.reference]]));
  const sleeping = await podWhen('wasm-sleep', ['Running', 'Succeeded', 'Failed'], 120_000);
  expect(sleeping.status.phase).toBe('Running');
  await eventually(async () => logText(sleeping).includes(SLEEP_LINES[0]), 30_000, diagnostics);
  // AND it is crun running WasmEdge from the payload: crun's state file (runc's is state.json), libwasmedge mapped in its process
  const folder = payloadFolder(WASM_SHIM, wasmPayload.sha256);
  const id = containerId(sleeping);
  expect(fs.existsSync(path.join(RUNTIMES, id, 'status'))).toBe(true);
  expect(fs.existsSync(path.join(RUNTIMES, id, 'state.json'))).toBe(false);
  expect(fs.readFileSync(`/proc/${taskPid(id)}/maps`, 'utf8')).toContain(`${folder}/lib/libwasmedge.so.0.1.0`);

  // WHEN another Wasm pod starts and ends meanwhile
  apply(wasmShims, underShim(WASM_SHIM, [['wasm-hello-beside', helloImage.reference]]));
  const beside = await podWhen('wasm-hello-beside', ['Succeeded', 'Failed'], 60_000);
  expect(beside.status.phase).toBe('Succeeded');
  expect(beside.spec.nodeName).toBe(sleeping.spec.nodeName);
  expect(logText(beside)).toEqual([HELLO_LINE]);
  // THEN the sleeping pod was not disturbed: still running, same container, no restart, not woken yet
  const still = await api.get('/api/v1/namespaces/default/pods/wasm-sleep');
  expect(still.status.phase).toBe('Running');
  expect(still.status.containerStatuses[0]).toMatchObject({ restartCount: 0, containerID: sleeping.status.containerStatuses[0].containerID });
  expect(logText(still)).toEqual([SLEEP_LINES[0]]);
  // AND it ends on its own after sleeping through WASI
  const woke = await podWhen('wasm-sleep', ['Succeeded', 'Failed'], 60_000);
  expect(woke.status.phase).toBe('Succeeded');
  const lines = containerLog(woke);
  expect(lines.map(l => l.text)).toEqual(SLEEP_LINES);
  expect(lines[1].time - lines[0].time).toBeGreaterThanOrEqual(14_500);
  // (the other pod began and ended within the sleep: its container's times, to the second)
  const { startedAt, finishedAt } = beside.status.containerStatuses[0].state.terminated;
  expect(Date.parse(startedAt)).toBeGreaterThanOrEqual(Math.floor(lines[0].time / 1000) * 1000);
  expect(Date.parse(finishedAt)).toBeLessThanOrEqual(lines[1].time);
  await deletePod('wasm-sleep');
  await deletePod('wasm-hello-beside');
});

step('the crun + WasmEdge payload delivered as an image pinned by digest runs a WASI module', async () => {
  // GIVEN the same payload inside an image known on the node by its digest only
  const reference = await importPayloadImage('rcm-wasm-payload', wasmPayload.file, '/payload/crun-wasmedge.tgz');
  // WHEN a second Wasm Shim takes its payload from that image
  wasmShims = { ...wasmShims, [WASM_IMAGE_SHIM]: { image: { reference, path: '/payload/crun-wasmedge.tgz', sha256: wasmPayload.sha256 }, ...WASM_RUNTIME } };
  apply(wasmShims);
  await readyOnTheNode(WASM_IMAGE_SHIM);
  // THEN it has its own copy of the payload, links kept
  expect(fs.readlinkSync(path.join(payloadFolder(WASM_IMAGE_SHIM, wasmPayload.sha256), 'lib', 'libwasmedge.so.0'))).toBe('libwasmedge.so.0.1.0');
  // AND a pod under its RuntimeClass runs the module
  apply(wasmShims, underShim(WASM_IMAGE_SHIM, [['wasm-hello-image', helloImage.reference]]));
  const done = await podWhen('wasm-hello-image', ['Succeeded', 'Failed'], 120_000);
  expect(done.spec.runtimeClassName).toBe(WASM_IMAGE_SHIM);
  expect(done.status.phase).toBe('Succeeded');
  expect(logText(done)).toEqual([HELLO_LINE]);
  await deletePod('wasm-hello-image');
});

step('uninstalling the Wasm Shim from the node removes its payload and handler, and its RuntimeClass stops selecting the node', async () => {
  const folder = payloadFolder(WASM_SHIM, wasmPayload.sha256);
  const handlerLabel = ShimNodeLabels.handlerKey(WASM_SHIM);
  // WHEN the Shim no longer selects the node
  wasmShims = { ...wasmShims, [WASM_SHIM]: { ...wasmShims[WASM_SHIM], nodeSelector: { 'rcm-e2e.example.com/wasm': 'elsewhere' } } };
  apply(wasmShims);
  // THEN the controller uninstalls it there: the handler label, the payload folder and containerd's handler go
  await eventually(async () => !(handlerLabel in await nodeLabels()) && !fs.existsSync(folder)
    && !containerdConfig().dump.includes(`runtimes.${WASM_SHIM}]`), 180_000, diagnostics);
  expect(listTree(path.join(installRoot, 'payloads', WASM_SHIM))).toEqual([]);
  // AND its RuntimeClass, still there, sends no pod to the node: the scheduler finds no node with the handler label
  expect((await api.get(`/apis/node.k8s.io/v1/runtimeclasses/${WASM_SHIM}`)).scheduling.nodeSelector).toEqual({ [handlerLabel]: WASM_SHIM });
  applyObject(wasmPod('wasm-unselected', helloImage.reference, { runtimeClassName: WASM_SHIM, annotations: VARIANT }));
  const event = await eventually(async () => (await api.get('/api/v1/namespaces/default/events')).items
    .find((e: any) => e.involvedObject.name === 'wasm-unselected' && e.reason === 'FailedScheduling'), 60_000, diagnostics);
  expect(event.message).toMatch(/0\/1 nodes are available: 1 node\(s\) didn't match (node selector|Pod's node affinity)/);
  const unselected = await api.get('/api/v1/namespaces/default/pods/wasm-unselected');
  expect(unselected.status.phase).toBe('Pending');
  expect(unselected.spec.nodeName).toBeUndefined();
  expect(unselected.spec.nodeSelector).toEqual({ [handlerLabel]: WASM_SHIM });
  await deletePod('wasm-unselected');
  // AND the other Wasm Shim, with its own copy and handler, still runs modules
  apply(wasmShims, underShim(WASM_IMAGE_SHIM, [['wasm-hello-after', helloImage.reference]]));
  const after = await podWhen('wasm-hello-after', ['Succeeded', 'Failed'], 120_000);
  expect(after.status.phase).toBe('Succeeded');
  expect(logText(after)).toEqual([HELLO_LINE]);
  await deletePod('wasm-hello-after');

  // WHEN both Wasm Shims are deleted THEN their RuntimeClasses, handlers and payloads are gone
  cluster.controlPlane.kubectl(['delete', 'shim', WASM_SHIM, WASM_IMAGE_SHIM, '--wait=false']);
  for (const name of [WASM_SHIM, WASM_IMAGE_SHIM]) {
    await gone(`${SHIMS}/${name}`);
    await gone(`/apis/node.k8s.io/v1/runtimeclasses/${name}`);
  }
  const { dump } = containerdConfig();
  expect(dump).not.toContain(`runtimes.${WASM_SHIM}]`);
  expect(dump).not.toContain(`runtimes.${WASM_IMAGE_SHIM}]`);
  expect(listTree(path.join(installRoot, 'payloads')).filter(f => f.includes('e2e-wasm'))).toEqual([]);
});

step('a Shim in the upstream runtime-class-manager\'s shape (platforms with arch x86_64) is installed and used', async () => {
  // GIVEN a manifest written for the original project, applied as it is (not synthesized)
  await buildArtifact('upstream', '\nrcm-e2e upstream\n', 'e2e-upstream');
  const manifest = {
    apiVersion: 'runtime.spinkube.dev/v1alpha1',
    kind: 'Shim',
    metadata: { name: 'e2e-upstream' },
    spec: {
      nodeSelector: { 'kubernetes.io/os': 'linux' },
      fetchStrategy: {
        type: 'anonymousHttp',
        platforms: [{ os: 'linux', arch: 'x86_64', location: `${artifactBase}/shim-upstream.tar.gz`, sha256: artifacts.upstream.sha256 }],
      },
      runtimeClass: { name: 'e2e-upstream', handler: 'e2e-upstream' },
      rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } },
    },
  };
  applyObject(manifest);
  // THEN the controller installs it and creates its RuntimeClass
  await readyOnTheNode('e2e-upstream');
  await eventually(async () => api.get('/apis/node.k8s.io/v1/runtimeclasses/e2e-upstream').catch(() => undefined), 60_000, diagnostics);
  // AND a pod runs under the installed binary
  applyObject(pod('under-upstream', 'true', 'e2e-upstream'));
  const done = await podWhen('under-upstream', ['Succeeded', 'Failed']);
  expect(done.status.phase).toBe('Succeeded');
  expect(runtimeOf(done)).toBe(path.join(installRoot, 'shims', 'e2e-upstream', artifacts.upstream.sha256.slice(0, 16), 'containerd-shim-e2e-upstream-v2'));
  await deletePod('under-upstream');
});

step('deleting the Shims uninstalls them and leaves the node as it was', async () => {
  // WHEN both Shims are deleted
  cluster.controlPlane.kubectl(['delete', 'shim', '--all', '--wait=false']);

  // THEN an uninstall Job runs on the node
  await eventually(async () => (await api.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items
    .some((j: any) => j.metadata.annotations?.['runtime.spinkube.dev/operation'] === 'uninstall'), 60_000, diagnostics);
  // AND the finalizers are released: the Shims are gone
  await eventually(async () => (await api.get(SHIMS)).items.length === 0, 180_000, diagnostics);
  // AND the labels and the RuntimeClasses are gone
  const labels = await nodeLabels();
  expect(Object.keys(labels).filter(k => k.includes('shim.runtime.spinkube.dev'))).toEqual([]);
  for (const name of [SHIM, 'e2e-gvisor', 'e2e-crun', 'e2e-gvisor-image', 'e2e-upstream']) await gone(`/apis/node.k8s.io/v1/runtimeclasses/${name}`);
  // AND containerd's effective config is the one from before the first install, and no shim files remain
  expect(containerdConfig().dump).toEqual(configBefore.dump);
  expect(listTree(installRoot).filter(f => /\/(shims|payloads|state|journal)\//.test(f))).toEqual([]);

  // AND an ordinary runc pod still runs
  applyObject(pod('plain-runc', 'echo still fine > /dev/termination-log'));
  const done = await podWhen('plain-runc', ['Succeeded', 'Failed']);
  expect(done.status.phase).toBe('Succeeded');
  expect(runtimeOf(done)).toBe('io.containerd.runc.v2');
  await deletePod('plain-runc');
});
