import * as fs from 'fs';
import * as path from 'path';
import { ShimNodeLabels } from '../../src';
import {
  apply, applyObject, bed, containerdConfig, containerId, containerLog, deletePod, diagnostics, getShim, gone, HELLO_LINE, listTree, logText,
  nodeLabels, podWhen, readyOnTheNode, runtimeOf, setUpE2eBed, sha256, SHIMS, step, underShim, wasmPod,
} from '../support/e2e-app';
import { nodeStatesDuring } from '../support/node-watch';
import { eventually, Rest } from '../support/rest';
import { SingleNodeCluster } from '../support/single-node-cluster';
import { buildWasmArtifact, buildWasmImage, packShimRelease, SHIM_RELEASES, ShimRelease, upstreamShimManifest, WasmImage } from '../support/wasm';

// Wasm the way SpinKube and kwasm run it, on the single-node cluster (kubelet 1.37, containerd
// 2.4, install mode Jobs): runwasi's wasmtime shim (containerd-shim-wasmtime-v1, built from
// crates.io by provisioning: test/fixtures/wasm-shim) in its release tarball, installed by the
// upstream project's sample Shim as published, and a Spin-shaped Shim whose tarball carries the
// same shim under Spin's binary name (a stand-in for Spin's shim, which cannot be built here).
// Pods run WASI modules from images whose entrypoint is the .wasm file, no annotation needed.
// Needs root and the binaries of scripts/provision.sh; run it with `npx projen e2e`.

const WASMTIME = 'wasmtime';
const SPIN = 'spin-v2';
const SPIN_RUNTIME_CLASS = 'wasmtime-spin-v2';
const TICK_LINE = 'tick.wasm: tick';

let cluster: SingleNodeCluster;
let api: Rest;
let installRoot: string;
let configBefore: string;
let wasmtime: ShimRelease;
let spin: ShimRelease;
const images: Record<string, WasmImage> = {};

/** The app: the manager, and the Spin-shaped Shim once `withSpin` (the wasmtime Shim is applied on its own, as upstream's sample). */
function applyApp(withSpin: boolean, workloads?: Parameters<typeof apply>[1]): void {
  const { artifactBase } = bed();
  apply(withSpin ? { [SPIN]: { runtimeClassName: SPIN_RUNTIME_CLASS, location: `${artifactBase}/${SHIM_RELEASES.spinStandIn.tarball}`, sha256: spin.sha256 } } : {}, workloads);
}

/** Where the installer puts a release's binary: the handler's folder, named by the artifact's sha256. */
function installedBinary(handler: string, release: ShimRelease): string {
  return path.join(installRoot, 'shims', handler, release.sha256.slice(0, 16), release.binary);
}

/** The runtime handlers the node's kubelet lists (status.runtimeHandlers: containerd 2.x reports them). */
const listedHandlers = (node: any): string[] => (node.status?.runtimeHandlers ?? []).map((h: any) => h.name);

setUpE2eBed();

beforeAll(async () => {
  ({ cluster, api, installRoot } = bed());
  const www = path.join(bed().work, 'www');
  wasmtime = await packShimRelease(www, SHIM_RELEASES.wasmtime);
  spin = await packShimRelease(www, SHIM_RELEASES.spinStandIn);
  for (const name of ['hello', 'tick', 'trap']) {
    images[name] = await buildWasmImage(name, bed().work);
    cluster.importImage(images[name].tarball);
  }
  configBefore = containerdConfig().dump;
}, 300_000);

step('runwasi\'s wasmtime shim, applied as the upstream sample\'s Shim (its release tarball\'s URL and sha256): the gate opens only once the kubelet lists the handler, and a WASI pod under RuntimeClass wasmtime prints its line', async () => {
  const handlerLabel = ShimNodeLabels.handlerKey(WASMTIME);
  const containerdPid = cluster.containerd.pid();
  // GIVEN the controller, and no wasmtime handler on the node
  applyApp(false);
  expect(listedHandlers(await api.get(`/api/v1/nodes/${cluster.nodeName}`))).not.toContain(WASMTIME);
  let early: any;
  const states = await nodeStatesDuring(cluster.controlPlane, cluster.nodeName, async () => {
    // WHEN upstream's sample Shim is applied as published
    applyObject(upstreamShimManifest(WASMTIME, WASMTIME, WASMTIME, `${bed().artifactBase}/${SHIM_RELEASES.wasmtime.tarball}`, wasmtime.sha256));
    // AND a Wasm pod is created as soon as its RuntimeClass exists, before the install is done
    await eventually(async () => api.get(`/apis/node.k8s.io/v1/runtimeclasses/${WASMTIME}`).catch(() => undefined), 60_000, diagnostics);
    applyObject(wasmPod('wasmtime-early', images.hello.reference, { runtimeClassName: WASMTIME }));
    await readyOnTheNode(WASMTIME);
    early = await podWhen('wasmtime-early', ['Succeeded', 'Failed'], 120_000);
  });
  // THEN the Node carried the handler label in no state in which its kubelet did not list the handler, and carries both now
  const gated = states.filter(n => n.metadata.labels?.[handlerLabel] === WASMTIME);
  expect(gated.length).toBeGreaterThan(0);
  expect(gated.filter(n => !listedHandlers(n).includes(WASMTIME)).map(n => n.metadata.resourceVersion)).toEqual([]);
  expect(await nodeLabels()).toMatchObject({ [handlerLabel]: WASMTIME });
  // AND the early pod waited for the gate, then ran the module under the installed binary, with no annotation
  expect({ phase: early.status.phase, log: logText(early) }).toEqual({ phase: 'Succeeded', log: [HELLO_LINE] });
  expect(Object.keys(early.metadata.annotations ?? {}).filter(k => k.startsWith('module.wasm') || k.startsWith('run.oci'))).toEqual([]);
  const binary = installedBinary(WASMTIME, wasmtime);
  expect(runtimeOf(early)).toBe(binary);
  expect(sha256(fs.readFileSync(binary))).toBe(wasmtime.binarySha256);
  // AND containerd serves the handler with that binary, restarted once for it
  expect(containerdConfig().dump).toMatch(new RegExp(`runtimes\\.${WASMTIME}\\]\\s+runtime_type = "${binary.replace(/[.]/g, '\\.')}"`));
  expect(cluster.containerd.pid()).not.toBe(containerdPid);
  await deletePod('wasmtime-early');
});

step('a module as an OCI artifact (config architecture wasm, one layer of media type application/wasm, no file system) runs under RuntimeClass wasmtime', async () => {
  // GIVEN the hello module as an artifact: no root file system at all, the module is the layer
  const artifact = await buildWasmArtifact('hello', bed().work);
  cluster.importImage(artifact.tarball);
  // WHEN a pod runs it under the wasmtime RuntimeClass
  applyObject(wasmPod('wasmtime-artifact', artifact.reference, { runtimeClassName: WASMTIME }));
  const done = await podWhen('wasmtime-artifact', ['Succeeded', 'Failed'], 120_000);
  // THEN the shim found the module in the layer and ran it
  expect({ phase: done.status.phase, log: logText(done) }).toEqual({ phase: 'Succeeded', log: [HELLO_LINE] });
  expect(runtimeOf(done)).toBe(installedBinary(WASMTIME, wasmtime));
  await deletePod('wasmtime-artifact');
});

step('negative controls: the same image without the RuntimeClass does not run (runc cannot exec a .wasm), and a module that traps fails its pod (runwasi ends a failed module with 137)', async () => {
  // GIVEN the hello image without the RuntimeClass, and a module that traps with it
  applyObject(wasmPod('wasm-without-class', images.hello.reference));
  applyObject(wasmPod('wasmtime-trap', images.trap.reference, { runtimeClassName: WASMTIME }));
  const without = await podWhen('wasm-without-class', ['Succeeded', 'Failed'], 120_000);
  const trapped = await podWhen('wasmtime-trap', ['Succeeded', 'Failed'], 120_000);
  // THEN neither succeeds: runc tried to exec the module as a program
  expect(without.status.phase).toBe('Failed');
  expect(logText(without)).not.toContain(HELLO_LINE);
  expect(logText(without).join('\n')).toMatch(/exec \/hello.wasm: exec format error/);
  // AND the trapping module ran up to its trap under wasmtime, and the pod failed with a non-zero exit
  expect(trapped.status.phase).toBe('Failed');
  expect(runtimeOf(trapped)).toBe(installedBinary(WASMTIME, wasmtime));
  const terminated = trapped.status.containerStatuses[0].state.terminated;
  expect({ exitCode: terminated.exitCode, reason: terminated.reason }).toEqual({ exitCode: 137, reason: 'Error' });
  expect(logText(trapped)[0]).toBe('trap.wasm: about to trap');
  await deletePod('wasm-without-class');
  await deletePod('wasmtime-trap');
});

step('a long-running Wasm pod keeps running while another starts and ends beside it; the Spin-shaped Shim\'s wave restarts containerd 2.4, which ends it (runwasi\'s shim serves no Task.Pids), and the kubelet starts it again; pods run under RuntimeClass wasmtime-spin-v2', async () => {
  // GIVEN tick.wasm running under wasmtime (a line a second, until it is stopped), restarted by the kubelet if it ends
  const tickPod = wasmPod('wasmtime-tick', images.tick.reference, { runtimeClassName: WASMTIME });
  applyObject({ ...tickPod, spec: { ...tickPod.spec, restartPolicy: 'Always' } });
  const ticking = await podWhen('wasmtime-tick', ['Running'], 120_000);
  await eventually(async () => logText(ticking).includes(TICK_LINE), 30_000, diagnostics);
  // WHEN another Wasm pod starts and ends beside it
  applyObject(wasmPod('wasmtime-beside', images.hello.reference, { runtimeClassName: WASMTIME }));
  const beside = await podWhen('wasmtime-beside', ['Succeeded', 'Failed'], 120_000);
  expect({ phase: beside.status.phase, log: logText(beside) }).toEqual({ phase: 'Succeeded', log: [HELLO_LINE] });
  await deletePod('wasmtime-beside');
  // THEN the ticking pod was not disturbed: the same container, no restart
  const undisturbed = await api.get('/api/v1/namespaces/default/pods/wasmtime-tick');
  expect(undisturbed.status.containerStatuses[0]).toMatchObject({ restartCount: 0, containerID: ticking.status.containerStatuses[0].containerID });

  // WHEN the Spin-shaped Shim (handler spin-v2, RuntimeClass wasmtime-spin-v2, the names the Spin Operator expects) is rolled out,
  // which restarts containerd
  const containerdPid = cluster.containerd.pid();
  applyApp(true);
  await readyOnTheNode(SPIN);
  expect(cluster.containerd.pid()).not.toBe(containerdPid);
  expect(await nodeLabels()).toMatchObject({ [ShimNodeLabels.handlerKey(SPIN)]: SPIN });
  // THEN containerd, reconnecting to the ticking container's shim, asked it for its processes (Task.Pids), which
  // runwasi's shim does not serve (containerd-shimkit 0.1.2, runwasi#207): it took the shim for leaked and ended the container (255)
  const id = containerId(ticking);
  const log = fs.readFileSync(cluster.containerd.log, 'utf8').split('\n');
  expect(log.filter(l => l.includes('cleaning leaked shim process') && l.includes(id))).toEqual([expect.stringContaining('/containerd.task.v2.Task/Pids is not supported')]);
  // AND the kubelet started it again, and it ticks again
  const again = await eventually(async () => {
    const p = await api.get('/api/v1/namespaces/default/pods/wasmtime-tick');
    const c = p.status.containerStatuses?.[0];
    return c?.restartCount >= 1 && c.state.running ? p : undefined;
  }, 120_000, diagnostics);
  const ended = again.status.containerStatuses[0].lastState.terminated;
  expect(ended).toMatchObject({ exitCode: 255, containerID: ticking.status.containerStatuses[0].containerID });
  const lines = containerLog(again).length;
  await eventually(async () => containerLog(again).length > lines, 30_000, diagnostics);
  await deletePod('wasmtime-tick');

  // AND a workload the app runs under the Spin-shaped Shim (runWorkload) runs the module under the binary named as Spin's
  applyApp(true, underShim(SPIN, [['spin-hello', images.hello.reference]]));
  const done = await podWhen('spin-hello', ['Succeeded', 'Failed'], 120_000);
  expect(done.spec.runtimeClassName).toBe(SPIN_RUNTIME_CLASS);
  expect({ phase: done.status.phase, log: logText(done) }).toEqual({ phase: 'Succeeded', log: [HELLO_LINE] });
  expect(runtimeOf(done)).toBe(installedBinary(SPIN, spin));
  await deletePod('spin-hello');
});

step('deleting both Wasm Shims uninstalls them: RuntimeClasses, handlers and binaries gone, containerd\'s dump as before the first install', async () => {
  cluster.controlPlane.kubectl(['delete', 'shim', WASMTIME, SPIN, '--wait=false']);
  await eventually(async () => (await api.get(SHIMS)).items.length === 0, 180_000, diagnostics);
  for (const name of [WASMTIME, SPIN_RUNTIME_CLASS]) await gone(`/apis/node.k8s.io/v1/runtimeclasses/${name}`);
  expect(Object.keys(await nodeLabels()).filter(k => k.includes('shim.runtime.spinkube.dev'))).toEqual([]);
  expect(containerdConfig().dump).toEqual(configBefore);
  expect(listTree(installRoot).filter(f => /\/(shims|payloads|state|journal)\//.test(f))).toEqual([]);
  expect(await getShim(WASMTIME).catch((e: any) => e.code)).toBe(404);
});
