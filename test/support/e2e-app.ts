import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as path from 'path';
import { ApiObject, App, Chart, Duration } from 'cdk8s';
import * as tar from 'tar';
import { freePort } from './control-plane';
import { applyServerSide, diagnosedStep, wireForTestCluster } from './e2e-common';
import { tail } from './files';
import { buildOciImage } from './oci-image';
import { buildProductImages, CONTROLLER_IMAGE, INSTALLER_IMAGE } from './product-images';
import { eventually, Rest } from './rest';
import { BUSYBOX_IMAGE, SingleNodeCluster, startSingleNodeCluster } from './single-node-cluster';
import { CACHE_DIR, PAYLOAD_RUNC_SHIM, stackBinary } from './tools';
import { buildWasmPayload, WASM_VARIANT_ANNOTATION, WasmPayload } from './wasm';
import { ContainerdRestart, PullPolicy, RuntimeClassManager, RuntimeClassManagerProps, ShimConstruct, ShimConstructProps, ShimNodeLabels } from '../../src';

// What the single-node end-to-end suites share: the bed (the cluster, the product's images in
// it, a folder of artifacts served over HTTP on 127.0.0.1), the app a user writes with the test
// bed's overrides and its apply, pods and what they report, the payloads (gVisor, crun, crun
// with WasmEdge) and the proofs that a pod really ran under them, and the diagnostics a failed
// step carries. One bed per test file: jest gives each file its own copy of this module.

export const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
export const NS = 'runtime-class-manager';

/** A Shim of the app: its artifact and any other props (the handler defaults to its name). */
export type AppShim = Partial<ShimConstructProps>;

/** Workloads of the app, run under its Shims as a user runs them (`shim.runWorkload()`). */
export type AppWorkloads = (chart: Chart, shims: Record<string, ShimConstruct>) => void;

export interface E2eBed {
  readonly cluster: SingleNodeCluster;
  readonly api: Rest;
  /** A scratch folder; `www/` below it is served at `artifactBase`. */
  readonly work: string;
  /** The installer's root on the node (RCM_INSTALL_ROOT). */
  readonly installRoot: string;
  readonly artifactBase: string;
  readonly ports: { readonly api: number; readonly metrics: number; readonly probes: number };
}

type Bed = E2eBed & { readonly manager: Partial<RuntimeClassManagerProps>; readonly server: http.Server };
let current: Bed | undefined;

function up(): Bed {
  if (!current) throw new Error('the end-to-end bed is not up: call setUpE2eBed() at the top of the test file');
  return current;
}

/** The bed of this test file, once `setUpE2eBed`'s beforeAll has run. */
export function bed(): E2eBed {
  return up();
}

/**
 * Starts the single-node cluster before the file's tests (its hooks run before any the file
 * registers after this call) and stops it after them. `manager` is what the suite's app sets on
 * the RuntimeClassManager besides the test bed's settings (the install mode, thresholds).
 */
export function setUpE2eBed(manager: Partial<RuntimeClassManagerProps> = {}): void {
  beforeAll(async () => {
    const cluster = await startSingleNodeCluster();
    const work = path.join(cluster.dir, 'work');
    fs.mkdirSync(path.join(work, 'www'), { recursive: true });
    const cp = cluster.controlPlane;
    const images = await buildProductImages(work);
    cluster.importImage(images.controller);
    cluster.importImage(images.installer);
    const server = await serve(path.join(work, 'www'));
    current = {
      cluster,
      api: new Rest(cp.server, cp.adminToken, cp.caFile),
      work,
      installRoot: path.join(cluster.dir, 'opt-rcm'),
      artifactBase: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
      ports: { api: Number(new URL(cp.server).port), metrics: await freePort(), probes: await freePort() },
      manager,
      server,
    };
  }, 300_000);
  afterAll(async () => {
    current?.server.close();
    await current?.cluster.stop();
  }, 180_000);
}

export function sha256(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

function serve(dir: string): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const file = path.join(dir, path.basename(req.url ?? ''));
    if (!fs.existsSync(file)) return void res.writeHead(404).end();
    res.writeHead(200, { 'Content-Length': fs.statSync(file).size });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/**
 * The app a user writes (RuntimeClassManager and its Shims), plus the test cluster's wiring
 * through escape hatches (wireForTestCluster: the controller pod on the host network, reaching
 * the API server on 127.0.0.1, its ports bound to 127.0.0.1, no probes; the node agent, where
 * there is one, reaching the API server the same way).
 */
export function synthApp(shims: Record<string, AppShim>, workloads?: AppWorkloads): string {
  const { cluster, installRoot, ports, manager: overrides } = up();
  const app = new App();
  const chart = new Chart(app, 'e2e');
  const manager = new RuntimeClassManager(chart, 'Manager', {
    controllerImage: CONTROLLER_IMAGE,
    installerImage: INSTALLER_IMAGE,
    imagePullPolicy: PullPolicy.IF_NOT_PRESENT,
    replicas: 1,
    metricsPort: ports.metrics,
    probePort: ports.probes,
    // The supervisor stands in for systemd; the installer reaches it through nsenter.
    defaultRestart: ContainerdRestart.command(cluster.containerd.restartCommand),
    // A failed attempt is retried after seconds, not after minutes of backoff.
    retryBackoff: Duration.seconds(2),
    // This node's containerd is not at the standard paths, and its init refuses nsenter.
    installerEnv: {
      RCM_CONFIG: cluster.containerd.config,
      RCM_SOCKET: cluster.containerd.socket,
      RCM_DISTRO: 'containerd',
      RCM_INSTALL_ROOT: installRoot,
      RCM_HOST_PID: String(cluster.containerd.supervisorPid),
    },
    ...overrides,
  });
  const added: Record<string, ShimConstruct> = {};
  for (const [name, props] of Object.entries(shims)) {
    added[name] = manager.addShim(name, { handler: name, allowInsecureHttp: true, ...props });
  }
  workloads?.(chart, added);
  wireForTestCluster(manager, ports.api);
  return app.synthYaml();
}

/** `cdk8s synth` then `kubectl apply --server-side`, as a user without Argo CD would do it. */
export function apply(shims: Record<string, AppShim>, workloads?: AppWorkloads): void {
  const { cluster, work } = bed();
  const file = path.join(work, `app-${Date.now()}.yaml`);
  fs.writeFileSync(file, synthApp(shims, workloads));
  applyServerSide(cluster.controlPlane.kubectl, file);
}

/**
 * A Shim applied on its own, not through the manager's `addShim()` (as by kubectl, or from
 * another app): for what the manager refuses at synth and the controller must refuse too.
 */
export function applyShimAlone(name: string, props: AppShim): void {
  const app = new App();
  new ShimConstruct(new Chart(app, 'alone'), name, { handler: name, allowInsecureHttp: true, ...props });
  bed().cluster.controlPlane.kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', '-f', '-'], { input: app.synthYaml() });
}

export function applyObject(object: object): void {
  bed().cluster.controlPlane.kubectl(['apply', '-f', '-'], { input: JSON.stringify(object) });
}

export function pod(name: string, command: string, runtimeClassName?: string): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: {
      hostNetwork: true,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      ...(runtimeClassName ? { runtimeClassName } : {}),
      containers: [{ name: 'main', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', command] }],
    },
  };
}

export async function podWhen(name: string, phases: string[], timeoutMs = 60_000): Promise<any> {
  return eventually(async () => {
    const p = await bed().api.get(`/api/v1/namespaces/default/pods/${name}`);
    return phases.includes(p.status?.phase) ? p : undefined;
  }, timeoutMs, diagnostics);
}

/** Waits until the API server answers 404 for `apiPath`. */
export async function gone(apiPath: string, timeoutMs = 60_000): Promise<void> {
  await eventually(async () => bed().api.get(apiPath).then(() => false, (e: any) => e.code === 404), timeoutMs, diagnostics);
}

export async function deletePod(name: string): Promise<void> {
  await bed().api.request('DELETE', `/api/v1/namespaces/default/pods/${name}`).catch(() => undefined);
  await gone(`/api/v1/namespaces/default/pods/${name}`);
}

export function containerId(p: any): string {
  return String(p.status.containerStatuses[0].containerID).replace('containerd://', '');
}

/** The runtime containerd started a pod's container with (the shim binary's path, for a path handler). */
export function runtimeOf(p: any): string {
  return JSON.parse(bed().cluster.containerd.ctr(['-n', 'k8s.io', 'containers', 'info', containerId(p)])).Runtime.Name;
}

export async function getShim(name: string): Promise<any> {
  return bed().api.get(`${SHIMS}/${name}`);
}

export function condition(s: any, type: string): any {
  return (s?.status?.conditions ?? []).find((c: any) => c.type === type);
}

export async function readyOnTheNode(name: string): Promise<any> {
  return eventually(async () => {
    const s = await getShim(name);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 1 ? s : undefined;
  }, 180_000, diagnostics);
}

export async function nodeLabels(): Promise<Record<string, string>> {
  return (await bed().api.get(`/api/v1/nodes/${bed().cluster.nodeName}`)).metadata.labels ?? {};
}

export async function nodeAnnotations(): Promise<Record<string, string>> {
  return (await bed().api.get(`/api/v1/nodes/${bed().cluster.nodeName}`)).metadata.annotations ?? {};
}

/**
 * containerd's configuration: the files it reads (the config, then the drop-ins it imports from
 * its conf.d, where the installer writes on containerd 2.x), and what containerd makes of them.
 */
export function containerdConfig(): { file: string; dump: string } {
  const config = bed().cluster.containerd.config;
  const dropIns = path.join(path.dirname(config), 'conf.d');
  const imported = fs.existsSync(dropIns) ? fs.readdirSync(dropIns).sort().map(f => fs.readFileSync(path.join(dropIns, f), 'utf8')) : [];
  return {
    file: [fs.readFileSync(config, 'utf8'), ...imported].join('\n'),
    // (containerd 2.x writes literal strings, 'like this': read as the basic strings 1.x wrote, so
    // that the checks read alike on both; no value here holds a quote or a backslash)
    dump: execFileSync(stackBinary('containerd'), ['--config', config, 'config', 'dump'], { encoding: 'utf8' }).replace(/'/g, '"'),
  };
}

/** Every file and folder below `dir`, relative to it. */
export function listTree(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return (fs.readdirSync(dir, { recursive: true }) as string[]).map(f => `/${f}`).sort();
}

/** Everything a developer needs when a step fails. */
export async function diagnostics(): Promise<string> {
  const { api, cluster } = bed();
  const safe = async (what: () => Promise<any>) => what().catch((e: Error) => `(${e.message})`);
  const shims = await safe(async () => (await api.get(SHIMS)).items
    .map((s: any) => ({ name: s.metadata.name, finalizers: s.metadata.finalizers, status: s.status })));
  const jobs = await safe(async () => (await api.get(`/apis/batch/v1/namespaces/${NS}/jobs`)).items.map((j: any) => ({ name: j.metadata.name, status: j.status })));
  const pods = await safe(async () => (await api.get('/api/v1/pods')).items.map((p: any) => ({
    name: `${p.metadata.namespace}/${p.metadata.name}`,
    phase: p.status?.phase,
    reason: p.status?.reason,
    containers: (p.status?.containerStatuses ?? []).map((c: any) => c.state),
  })));
  const events = await safe(async () => (await api.get('/api/v1/events')).items.slice(-25)
    .map((e: any) => `${e.involvedObject.kind}/${e.involvedObject.name} ${e.reason}: ${e.message}`));
  const node = await safe(async () => {
    const n = await api.get(`/api/v1/nodes/${cluster.nodeName}`);
    return { labels: n.metadata.labels, shimAnnotations: Object.fromEntries(Object.entries(n.metadata.annotations ?? {}).filter(([k]) => k.includes('shim.runtime'))) };
  });
  const config = cluster.containerd.config;
  return [
    '=== end-to-end diagnostics ===',
    `shims: ${JSON.stringify(shims, undefined, 1)}`,
    `jobs: ${JSON.stringify(jobs, undefined, 1)}`,
    `pods: ${JSON.stringify(pods, undefined, 1)}`,
    `recent events:\n${Array.isArray(events) ? events.join('\n') : events}`,
    `node: ${JSON.stringify(node)}`,
    `containerd config (${config}):\n${fs.existsSync(config) ? fs.readFileSync(config, 'utf8').split('\n').filter(l => l.includes('rcm') || l.includes('runtimes.')).join('\n') : 'missing'}`,
    ...podLogTails(40),
    cluster.logTails(25),
  ].join('\n');
}

/** The controller's, installers' and node agents' container logs, read from the node's files (never through `kubectl logs`). */
function podLogTails(lines: number): string[] {
  const root = '/var/log/pods';
  if (!fs.existsSync(root)) return [];
  return fs.readdirSync(root).filter(d => d.startsWith(`${NS}_`)).flatMap(podDir =>
    fs.readdirSync(path.join(root, podDir)).flatMap(container => fs.readdirSync(path.join(root, podDir, container)).map(file =>
      `--- pod ${podDir} ${container}/${file} (last ${lines} lines) ---\n${tail(path.join(root, podDir, container, file), lines)}`)));
}

/** A scenario step whose failure message carries the diagnostics. Steps build on the ones before them. */
export function step(name: string, fn: () => Promise<void>, timeoutMs = 240_000): void {
  diagnosedStep(name, fn, diagnostics, timeoutMs);
}

// ---- Payloads: a runtime's files in one archive, and the proofs that pods really ran under them

/** The runc shim's runtime root for Kubernetes' containers (its default, whatever the OCI runtime it drives). */
export const RUNTIMES = '/run/containerd/runc/k8s.io';
const runtimesDir = path.join(CACHE_DIR, 'runtimes-bookworm', 'usr');

export interface Payload {
  readonly location: string;
  readonly sha256: string;
  readonly path: string;
}

/** A payload tarball in the artifact folder: name in the archive -> a file to copy, or a script's text. */
export async function buildPayload(file: string, files: Record<string, { source?: string; text?: string }>): Promise<Payload> {
  const { work, artifactBase } = bed();
  const dir = fs.mkdtempSync(path.join(work, 'payload-'));
  for (const [name, f] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    // Real files only (the installer refuses links in archives): a library link is copied as its target.
    if (f.source) fs.copyFileSync(fs.realpathSync(f.source), path.join(dir, name));
    else fs.writeFileSync(path.join(dir, name), f.text!);
    fs.chmodSync(path.join(dir, name), 0o755);
  }
  const out = path.join(work, 'www', file);
  await tar.c({ file: out, cwd: dir, gzip: true, portable: true }, fs.readdirSync(dir));
  return { location: `${artifactBase}/${file}`, sha256: sha256(fs.readFileSync(out)), path: out };
}

/** A payload inside an image known on the node by its digest only (built without Docker); returns its reference. */
export async function importPayloadImage(name: string, payload: string, target: string): Promise<string> {
  const { cluster, work } = bed();
  const tarball = path.join(work, `${name}.tar`);
  const reference = await buildOciImage({
    name: `docker.io/library/${name}@sha256`,
    files: [{ source: payload, target, mode: 0o644 }],
    entrypoint: ['/nothing-to-run'],
  }, tarball);
  cluster.importImage(tarball);
  return reference;
}

/** Where a Shim's payload is installed on the node (its own folder per artifact). */
export function payloadFolder(handler: string, artifactSha256: string): string {
  return path.join(bed().installRoot, 'payloads', handler, artifactSha256.slice(0, 16));
}

/**
 * runsc as runc's shim can drive it, with this machine's flags (ptrace platform, host
 * network). runc's shim is not gVisor's own (containerd-shim-runsc-v1, which Debian does not
 * package), and two of its habits need help: it follows the process runsc names in
 * --pid-file, which for a container joining its pod's sandbox is the sandbox and outlives the
 * container (so each container gets a sandbox of its own here); and it takes a failed kill of
 * a finished container as "already finished" only in runc's words.
 */
const RUNSC_WRAPPER = `#!/bin/sh
runsc="$(dirname "$0")/runsc"
previous=""
for arg in "$@"; do
  if [ "$previous" = "--bundle" ]; then
    sed -i 's/"io.kubernetes.cri.container-type":"container"/"io.kubernetes.cri.container-type":"sandbox"/' "$arg/config.json"
  fi
  previous="$arg"
done
case " $* " in
  *" kill "*)
    if ! output=$("$runsc" --platform=ptrace --network=host "$@" 2>&1); then
      case "$output" in *"is not running"*) echo "container not running" >&2 ;; *) echo "$output" >&2 ;; esac
      exit 1
    fi
    exit 0 ;;
esac
exec "$runsc" --platform=ptrace --network=host "$@"
`;

/** gVisor as a payload of three files: containerd's runc shim, Debian's runsc and a wrapper adding this machine's flags. */
export function buildGvisorPayload(): Promise<Payload> {
  return buildPayload('gvisor.tgz', {
    'bin/containerd-shim-runc-v2': { source: PAYLOAD_RUNC_SHIM },
    'bin/runsc': { source: path.join(runtimesDir, 'bin', 'runsc') },
    'bin/runsc-wrapper': { text: RUNSC_WRAPPER },
  });
}

/** A gVisor Shim's props besides its artifact. */
export const GVISOR_PAYLOAD: AppShim = {
  payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
  // runc's shim drives runsc through the wrapper (ptrace platform and host network on these machines).
  runtimeOptions: { BinaryName: '${PAYLOAD}/bin/runsc-wrapper' },
  containerdRuntime: { podAnnotations: ['dev.gvisor.*'] },
};

/** The gVisor payload is one folder on the node, and containerd gives the handler its shim and wrapper. */
export function expectGvisorInstalled(handler: string, gvisor: Payload): void {
  const folder = payloadFolder(handler, gvisor.sha256);
  expect(listTree(folder)).toEqual(['/bin', '/bin/containerd-shim-runc-v2', '/bin/runsc', '/bin/runsc-wrapper']);
  const { file, dump } = containerdConfig();
  expect(file).toContain(`BinaryName = "${folder}/bin/runsc-wrapper"`);
  expect(dump).toContain(`runtime_path = "${folder}/bin/containerd-shim-runc-v2"`);
}

/** What a pod reads about its kernel: gVisor's own, never the host's. */
const KERNEL_FACTS = 'cat /proc/version > /dev/termination-log; dmesg | head -1 >> /dev/termination-log';

/** A pod of the RuntimeClass ran inside gVisor: its kernel is gVisor's, as the pod itself reports through the API. */
export async function expectPodInsideGvisor(name: string, runtimeClassName: string): Promise<void> {
  applyObject(pod(name, KERNEL_FACTS, runtimeClassName));
  const done = await podWhen(name, ['Succeeded', 'Failed'], 120_000);
  expect(done.status.phase).toBe('Succeeded');
  const facts = done.status.containerStatuses[0].state.terminated.message;
  expect(facts).toMatch(/^Linux version 4\.4\.0/);
  expect(facts).toMatch(/Starting gVisor/);
  expect(facts).not.toContain(fs.readFileSync('/proc/version', 'utf8').trim());
  await deletePod(name);
}

/**
 * crun as a payload: Debian trixie's crun 1.21 with the libraries and loader it needs (the
 * folder scripts/build-wasm-payload.sh makes, test/support/wasm.ts) and the runc shim.
 * Bookworm's crun 1.8.1 refuses what containerd 2.4 hands it ("OCI runtime create failed:
 * unknown version specified": a newer runtime-spec version than it knows).
 */
export async function buildCrunPayload(): Promise<Payload> {
  const { work, artifactBase } = bed();
  const out = path.join(work, 'www', 'crun.tgz');
  const built = await buildWasmPayload(out);
  return { location: `${artifactBase}/crun.tgz`, sha256: built.sha256, path: out };
}

/** A crun Shim's props besides its artifact. */
export const CRUN_PAYLOAD: AppShim = {
  payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
  runtimeOptions: { BinaryName: '${PAYLOAD}/bin/crun' },
};

/** A pod of the RuntimeClass runs under crun: its container's state is crun's (a `status` file), not runc's (`state.json`), in the shim's runtime root. */
export async function expectPodUnderCrun(name: string, runtimeClassName: string): Promise<void> {
  applyObject(pod(name, 'echo running > /dev/termination-log; sleep 3600', runtimeClassName));
  const running = await podWhen(name, ['Running'], 120_000);
  const id = containerId(running);
  expect(fs.readdirSync(path.join(RUNTIMES, id)).sort()).toEqual(expect.arrayContaining(['status']));
  expect(fs.existsSync(path.join(RUNTIMES, id, 'state.json'))).toBe(false);
  await deletePod(name);
}

// ---- WebAssembly: crun with WasmEdge as a payload (test/support/wasm.ts) and WASI modules in images

/** The crun + WasmEdge payload is one folder on the node, links kept as links, and containerd's handler runs its shim with crun, letting crun's annotations through; the RuntimeClass selects the node by the handler label. */
export async function expectWasmInstalled(handler: string, wasm: WasmPayload): Promise<void> {
  const folder = payloadFolder(handler, wasm.sha256);
  const tree = listTree(folder);
  expect(tree).toEqual(expect.arrayContaining(['/bin/crun', '/bin/crun.real', '/bin/containerd-shim-runc-v2', '/lib/ld-linux-x86-64.so.2', '/lib/libLLVM.so.19.1']));
  expect(fs.readlinkSync(path.join(folder, 'lib', 'libwasmedge.so.0'))).toBe('libwasmedge.so.0.1.0');
  expect(tree.filter(f => fs.lstatSync(path.join(folder, f)).isSymbolicLink())).toHaveLength(wasm.links);
  expect(tree.filter(f => fs.lstatSync(path.join(folder, f)).isFile())).toHaveLength(wasm.files);
  const { file, dump } = containerdConfig();
  expect(file).toContain(`BinaryName = "${folder}/bin/crun"`);
  const table = dump.slice(dump.indexOf(`runtimes.${handler}]`));
  expect(table).toContain(`runtime_path = "${folder}/bin/containerd-shim-runc-v2"`);
  expect(table).toContain('pod_annotations = ["module.wasm.image/variant", "run.oci.handler"]');
  expect(table).toContain('container_annotations = ["module.wasm.image/variant", "run.oci.handler"]');
  const rc = await eventually(async () => bed().api.get(`/apis/node.k8s.io/v1/runtimeclasses/${handler}`).catch(() => undefined), 60_000, diagnostics);
  expect(rc).toMatchObject({ handler, scheduling: { nodeSelector: { [ShimNodeLabels.handlerKey(handler)]: handler } } });
}

export const HELLO_LINE = 'hello from a WASI module (rcm-wasm-e2e)';
export const VARIANT = { [WASM_VARIANT_ANNOTATION]: 'compat' };

/** A Wasm Shim through the constructs: the payload's shim and crun, the annotations crun reads let through, and the one its workloads need. */
export const WASM_RUNTIME: AppShim = {
  payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
  runtimeOptions: { BinaryName: '${PAYLOAD}/bin/crun' },
  containerdRuntime: {
    podAnnotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'],
    containerAnnotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'],
  },
  workloadAnnotations: VARIANT,
};

/** A pod running an image's entrypoint, as a plain object (the app runs it under a Shim; the controls apply it as it is). */
export function wasmPod(name: string, image: string, extra: { runtimeClassName?: string; annotations?: Record<string, string> } = {}): any {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', ...(extra.annotations ? { annotations: extra.annotations } : {}) },
    spec: {
      hostNetwork: true,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      ...(extra.runtimeClassName ? { runtimeClassName: extra.runtimeClassName } : {}),
      containers: [{ name: 'main', image, imagePullPolicy: 'IfNotPresent' }],
    },
  };
}

/** Pods of the app, each run under `shim` with runWorkload() (which adds the RuntimeClass and the Shim's workload annotations). */
export function underShim(shim: string, pods: Array<[string, string]>): AppWorkloads {
  return (chart, shims) => {
    for (const [name, image] of pods) shims[shim].runWorkload(new ApiObject(chart, name, wasmPod(name, image)));
  };
}

export interface LogLine {
  readonly time: number;
  readonly stream: string;
  readonly text: string;
}

/** A container's log as the kubelet wrote it on the node (CRI lines: time, stream, P or F, text). */
export function containerLog(p: any, container = 'main'): LogLine[] {
  const dir = path.join('/var/log/pods', `${p.metadata.namespace}_${p.metadata.name}_${p.metadata.uid}`, container);
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir).sort().flatMap(file => fs.readFileSync(path.join(dir, file), 'utf8').split('\n').filter(Boolean).map(line => {
    const [time, stream, , ...text] = line.split(' ');
    return { time: Date.parse(time), stream, text: text.join(' ') };
  }));
}

export const logText = (p: any) => containerLog(p).map(l => l.text);

/** A pod the app ran under a Wasm Shim with runWorkload(): it carries the RuntimeClass and the annotation, and hello.wasm ran to its end with its line in the log. */
export function expectHelloWasmRan(done: any, shim: string): void {
  expect(done.spec.runtimeClassName).toBe(shim);
  expect(done.metadata.annotations).toMatchObject(VARIANT);
  expect(done.status.phase).toBe('Succeeded');
  expect(done.status.containerStatuses[0].state.terminated.exitCode).toBe(0);
  expect(containerLog(done)).toEqual([expect.objectContaining({ stream: 'stdout', text: HELLO_LINE })]);
}
