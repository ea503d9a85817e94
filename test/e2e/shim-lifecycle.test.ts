import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as path from 'path';
import { ApiObject, App, Chart, Duration, JsonPatch } from 'cdk8s';
import * as tar from 'tar';
import { ContainerdRestart, PullPolicy, RuntimeClassManager, ShimConstruct, ShimConstructProps, ShimNodeLabels } from '../../src';
import { freePort } from '../support/control-plane';
import { tail } from '../support/files';
import { bindStrayControllersToV1 } from '../support/host-cgroups';
import { buildOciImage } from '../support/oci-image';
import { buildProductImages, CONTROLLER_IMAGE, INSTALLER_IMAGE } from '../support/product-images';
import { eventually, Rest } from '../support/rest';
import { BUSYBOX_IMAGE, SingleNodeCluster, startSingleNodeCluster } from '../support/single-node-cluster';
import { CACHE_DIR } from '../support/tools';
import { buildWasmImage, buildWasmPayload, WASM_VARIANT_ANNOTATION, WasmImage, WasmPayload } from '../support/wasm';

// The whole loop on a real single-node cluster: cdk8s synth -> kubectl apply -> the
// controller pod runs installer Jobs -> the installer edits containerd's config and restarts
// it -> a workload pod runs under the installed shim -> and back to a clean node.
// Needs root and the binaries of scripts/provision.sh; run it with `npx projen e2e`.

const SHIM = 'e2e-runc';
const HANDLER = 'e2e-runc';
const BAD_SHIM = 'e2e-bad';
const STATE_LABEL = ShimNodeLabels.stateKey(SHIM);
const HANDLER_LABEL = ShimNodeLabels.handlerKey(SHIM);
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const NS = 'runtime-class-manager';

let cluster: SingleNodeCluster;
let api: Rest;
let work: string;
let installRoot: string;
let artifactServer: http.Server;
let artifactBase: string;
let configBefore: { file: string; dump: string };
const artifacts: Record<string, { file: string; sha256: string; shimSha256: string }> = {};

/** A tarball with a real shim: containerd-shim-runc-v2 renamed, plus `extra` bytes to make a distinct version. */
async function buildArtifact(version: string, extra: string, handler = HANDLER): Promise<void> {
  const dir = path.join(work, `artifact-${version}`);
  fs.mkdirSync(dir);
  const shim = path.join(dir, `containerd-shim-${handler}-v2`);
  // Bytes after the end of an ELF file are ignored by the loader: same program, new checksum.
  fs.writeFileSync(shim, Buffer.concat([fs.readFileSync('/usr/bin/containerd-shim-runc-v2'), Buffer.from(extra)]), { mode: 0o755 });
  const file = path.join(work, 'www', `shim-${version}.tar.gz`);
  await tar.c({ file, cwd: dir, gzip: true, portable: true }, [path.basename(shim)]);
  artifacts[version] = { file, sha256: sha256(fs.readFileSync(file)), shimSha256: sha256(fs.readFileSync(shim)) };
}

function sha256(data: Buffer): string {
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

interface ShimVersion {
  readonly location: string;
  readonly sha256: string;
}

/** A Shim of the app: its artifact and any other props (the handler defaults to its name). */
type AppShim = Partial<ShimConstructProps>;

/** Workloads of the app, run under its Shims as a user runs them (`shim.runWorkload()`). */
type AppWorkloads = (chart: Chart, shims: Record<string, ShimConstruct>) => void;

/**
 * The app a user writes (RuntimeClassManager and a Shim), plus test-only overrides through
 * escape hatches: the controller pod uses the host network and reaches the API server on
 * 127.0.0.1 (there is no kube-proxy here), binds its ports to 127.0.0.1 and has no probes
 * (the kubelet would dial the node's non-loopback address).
 */
function synthApp(shims: Record<string, AppShim>, ports: { api: number; metrics: number; probes: number }, workloads?: AppWorkloads): string {
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
    // A bad checksum is a failure after two quick attempts, not after minutes of backoff.
    retryBackoff: Duration.seconds(2),
    failureThreshold: 2,
    // This node's containerd is not at the standard paths, and its init refuses nsenter.
    installerEnv: {
      RCM_CONFIG: cluster.containerd.config,
      RCM_SOCKET: cluster.containerd.socket,
      RCM_DISTRO: 'containerd',
      RCM_INSTALL_ROOT: installRoot,
      RCM_HOST_PID: String(cluster.containerd.supervisorPid),
    },
  });
  const added: Record<string, ShimConstruct> = {};
  for (const [name, props] of Object.entries(shims)) {
    added[name] = manager.addShim(name, { handler: name, allowInsecureHttp: true, ...props });
  }
  workloads?.(chart, added);
  const container = '/spec/template/spec/containers/0';
  ApiObject.of(manager.deployment).addJsonPatch(
    JsonPatch.add('/spec/template/spec/hostNetwork', true),
    JsonPatch.add(`${container}/env/-`, { name: 'KUBERNETES_SERVICE_HOST', value: '127.0.0.1' }),
    JsonPatch.add(`${container}/env/-`, { name: 'KUBERNETES_SERVICE_PORT', value: String(ports.api) }),
    JsonPatch.remove(`${container}/livenessProbe`),
    JsonPatch.remove(`${container}/readinessProbe`),
    ...bindToLoopback(manager.deployment, ['--metrics-bind-address', '--health-probe-bind-address']),
  );
  return app.synthYaml();
}

/** Patches that make the controller listen on 127.0.0.1 only (the construct binds every address). */
function bindToLoopback(deployment: ApiObject, flags: string[]): JsonPatch[] {
  const args: string[] = deployment.toJson().spec.template.spec.containers[0].args;
  return flags.map(flag => {
    const index = args.findIndex(a => a.startsWith(`${flag}=:`));
    if (index < 0) throw new Error(`the controller has no ${flag}=:<port> argument: ${args.join(' ')}`);
    return JsonPatch.replace(`/spec/template/spec/containers/0/args/${index}`, args[index].replace('=:', '=127.0.0.1:'));
  });
}

let ports: { api: number; metrics: number; probes: number };
/** `cdk8s synth` then `kubectl apply --server-side`, as a user without Argo CD would do it. */
function apply(shims: Record<string, AppShim>, workloads?: AppWorkloads): void {
  const file = path.join(work, `app-${Date.now()}.yaml`);
  fs.writeFileSync(file, synthApp(shims, ports, workloads));
  const kubectl = cluster.controlPlane.kubectl;
  try {
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', '-f', file]);
  } catch (e) {
    // The first apply creates the CRD together with a Shim: kubectl knows the kind only once
    // the CRD is established (Argo CD orders this with the sync waves the constructs set).
    if (!/no matches for kind "Shim"/.test(String((e as any).stderr ?? e))) throw e;
    kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', '-f', file]);
  }
}

function published(v: string): ShimVersion {
  return { location: `${artifactBase}/shim-${v}.tar.gz`, sha256: artifacts[v].sha256 };
}

/** Where the installer puts a version's binary: its own folder, named by the artifact's sha256. */
function installedBinary(v: string): string {
  return path.join(installRoot, 'shims', HANDLER, artifacts[v].sha256.slice(0, 16), `containerd-shim-${HANDLER}-v2`);
}

/** containerd's configuration: the file, and what containerd makes of it. */
function containerdConfig(): { file: string; dump: string } {
  return {
    file: fs.readFileSync(cluster.containerd.config, 'utf8'),
    dump: execFileSync('/usr/bin/containerd', ['--config', cluster.containerd.config, 'config', 'dump'], { encoding: 'utf8' }),
  };
}

function applyObject(object: object): void {
  cluster.controlPlane.kubectl(['apply', '-f', '-'], { input: JSON.stringify(object) });
}

function pod(name: string, command: string, runtimeClassName?: string): object {
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

async function podWhen(name: string, phases: string[], timeoutMs = 60_000): Promise<any> {
  return eventually(async () => {
    const p = await api.get(`/api/v1/namespaces/default/pods/${name}`);
    return phases.includes(p.status?.phase) ? p : undefined;
  }, timeoutMs, diagnostics);
}

/** Waits until the API server answers 404 for `apiPath`. */
async function gone(apiPath: string): Promise<void> {
  await eventually(async () => api.get(apiPath).then(() => false, (e: any) => e.code === 404), 60_000, diagnostics);
}

async function deletePod(name: string): Promise<void> {
  await api.request('DELETE', `/api/v1/namespaces/default/pods/${name}`).catch(() => undefined);
  await gone(`/api/v1/namespaces/default/pods/${name}`);
}

/** The runtime containerd started a pod's container with (the shim binary's path, for a path handler). */
function runtimeOf(p: any): string {
  const id = String(p.status.containerStatuses[0].containerID).replace('containerd://', '');
  return JSON.parse(cluster.containerd.ctr(['-n', 'k8s.io', 'containers', 'info', id])).Runtime.Name;
}

async function getShim(name: string): Promise<any> {
  return api.get(`${SHIMS}/${name}`);
}

function condition(s: any, type: string): any {
  return (s?.status?.conditions ?? []).find((c: any) => c.type === type);
}

async function nodeLabels(): Promise<Record<string, string>> {
  return (await api.get(`/api/v1/nodes/${cluster.nodeName}`)).metadata.labels ?? {};
}

/** Everything a developer needs when a step fails. */
async function diagnostics(): Promise<string> {
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
  const labels = await safe(nodeLabels);
  return [
    '=== end-to-end diagnostics ===',
    `shims: ${JSON.stringify(shims, undefined, 1)}`,
    `jobs: ${JSON.stringify(jobs, undefined, 1)}`,
    `pods: ${JSON.stringify(pods, undefined, 1)}`,
    `recent events:\n${Array.isArray(events) ? events.join('\n') : events}`,
    `node labels: ${JSON.stringify(labels)}`,
    `containerd config (${cluster.containerd.config}):\n${fs.existsSync(cluster.containerd.config) ? fs.readFileSync(cluster.containerd.config, 'utf8').split('\n').filter(l => l.includes('rcm') || l.includes('runtimes.')).join('\n') : 'missing'}`,
    ...podLogTails(40),
    cluster.logTails(25),
  ].join('\n');
}

/** The controller's and installers' container logs, read from the node's files (never through `kubectl logs`). */
function podLogTails(lines: number): string[] {
  const root = '/var/log/pods';
  if (!fs.existsSync(root)) return [];
  return fs.readdirSync(root).filter(d => d.startsWith(`${NS}_`)).flatMap(podDir =>
    fs.readdirSync(path.join(root, podDir)).flatMap(container => fs.readdirSync(path.join(root, podDir, container)).map(file =>
      `--- pod ${podDir} ${container}/${file} (last ${lines} lines) ---\n${tail(path.join(root, podDir, container, file), lines)}`)));
}

/** A scenario step whose failure message carries the diagnostics. */
function step(name: string, fn: () => Promise<void>, timeoutMs = 240_000): void {
  test(name, async () => {
    try {
      await fn();
    } catch (e) {
      (e as Error).message += `\n${await diagnostics()}`;
      throw e;
    }
  }, timeoutMs);
}

beforeAll(async () => {
  cluster = await startSingleNodeCluster();
  work = path.join(cluster.dir, 'work');
  fs.mkdirSync(path.join(work, 'www'), { recursive: true });
  installRoot = path.join(cluster.dir, 'opt-rcm');
  const cp = cluster.controlPlane;
  api = new Rest(cp.server, cp.adminToken, cp.caFile);
  ports = { api: Number(new URL(cp.server).port), metrics: await freePort(), probes: await freePort() };

  const images = await buildProductImages(work);
  cluster.importImage(images.controller);
  cluster.importImage(images.installer);

  await buildArtifact('v1', '\nrcm-e2e v1\n');
  await buildArtifact('v2', '\nrcm-e2e v2\n');
  artifactServer = await serve(path.join(work, 'www'));
  artifactBase = `http://127.0.0.1:${(artifactServer.address() as net.AddressInfo).port}`;
  configBefore = containerdConfig();
}, 300_000);

afterAll(async () => {
  artifactServer?.close();
  await cluster?.stop();
}, 180_000);

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

/** The runc shim's runtime root for Kubernetes' containers (its default, whatever the OCI runtime it drives). */
const RUNTIMES = '/run/containerd/runc/k8s.io';
const runtimesDir = path.join(CACHE_DIR, 'runtimes-bookworm', 'usr');

interface Payload {
  readonly location: string;
  readonly sha256: string;
  readonly path: string;
}

/** A payload tarball in the artifact folder: name in the archive -> a file to copy, or a script's text. */
async function buildPayload(file: string, files: Record<string, { source?: string; text?: string }>): Promise<Payload> {
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

/** Where a Shim's payload is installed on the node (its own folder per artifact). */
function payloadFolder(handler: string, artifactSha256: string): string {
  return path.join(installRoot, 'payloads', handler, artifactSha256.slice(0, 16));
}

async function readyOnTheNode(name: string): Promise<any> {
  return eventually(async () => {
    const s = await getShim(name);
    return condition(s, 'Ready')?.status === 'True' && s.status.nodesReady === 1 ? s : undefined;
  }, 180_000, diagnostics);
}

let gvisor: Payload;

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
const GVISOR_PAYLOAD = {
  payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
  // runc's shim drives runsc through the wrapper (ptrace platform and host network on these machines).
  runtimeOptions: { BinaryName: '${PAYLOAD}/bin/runsc-wrapper' },
  containerdRuntime: { podAnnotations: ['dev.gvisor.*'] },
};
/** What a pod reads about its kernel: gVisor's own, never the host's. */
const KERNEL_FACTS = 'cat /proc/version > /dev/termination-log; dmesg | head -1 >> /dev/termination-log';

step('a gVisor payload (runc shim, runsc and a wrapper) is installed through a Shim and runs a pod inside gVisor', async () => {
  // GIVEN gVisor as a payload of three files: containerd's runc shim, Debian's runsc and a wrapper adding this machine's flags
  gvisor = await buildPayload('gvisor.tgz', {
    'bin/containerd-shim-runc-v2': { source: '/usr/bin/containerd-shim-runc-v2' },
    'bin/runsc': { source: path.join(runtimesDir, 'bin', 'runsc') },
    'bin/runsc-wrapper': { text: RUNSC_WRAPPER },
  });
  // WHEN a Shim with that payload is applied
  apply({ [SHIM]: published('v2'), 'e2e-gvisor': { location: gvisor.location, sha256: gvisor.sha256, ...GVISOR_PAYLOAD } });
  await readyOnTheNode('e2e-gvisor');
  // THEN the payload is one folder on the node and containerd gives the handler its shim and wrapper
  const folder = payloadFolder('e2e-gvisor', gvisor.sha256);
  expect(listTree(folder)).toEqual(['/bin', '/bin/containerd-shim-runc-v2', '/bin/runsc', '/bin/runsc-wrapper']);
  expect(containerdConfig().file).toContain(`BinaryName = "${folder}/bin/runsc-wrapper"`);
  expect(containerdConfig().dump).toContain(`runtime_path = "${folder}/bin/containerd-shim-runc-v2"`);

  // WHEN a pod uses its RuntimeClass THEN it ran inside gVisor: its kernel is gVisor's, as the pod itself reports through the API
  applyObject(pod('under-gvisor', KERNEL_FACTS, 'e2e-gvisor'));
  const done = await podWhen('under-gvisor', ['Succeeded', 'Failed'], 120_000);
  expect(done.status.phase).toBe('Succeeded');
  const facts = done.status.containerStatuses[0].state.terminated.message;
  expect(facts).toMatch(/^Linux version 4\.4\.0/);
  expect(facts).toMatch(/Starting gVisor/);
  expect(facts).not.toContain(fs.readFileSync('/proc/version', 'utf8').trim());
  await deletePod('under-gvisor');
});

step('a crun payload (runc shim, crun and its library) runs a pod under crun', async () => {
  // GIVEN crun as a payload: Debian's crun, the library a Debian base lacks, and a wrapper finding it
  const crun = await buildPayload('crun.tgz', {
    'bin/containerd-shim-runc-v2': { source: '/usr/bin/containerd-shim-runc-v2' },
    'bin/crun': { source: path.join(runtimesDir, 'bin', 'crun') },
    'lib/libyajl.so.2': { source: path.join(runtimesDir, 'lib', 'x86_64-linux-gnu', 'libyajl.so.2') },
    'bin/crun-wrapper': { text: '#!/bin/sh\nd="$(dirname "$0")"\nLD_LIBRARY_PATH="$d/../lib" exec "$d/crun" "$@"\n' },
  });
  // (crun refuses a hybrid cgroup host with controllers left in v2, which real systemd hosts do not have)
  bindStrayControllersToV1();
  apply({
    [SHIM]: published('v2'),
    'e2e-crun': {
      location: crun.location,
      sha256: crun.sha256,
      payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
      runtimeOptions: { BinaryName: '${PAYLOAD}/bin/crun-wrapper' },
    },
  });
  await readyOnTheNode('e2e-crun');

  // WHEN a pod uses its RuntimeClass
  applyObject(pod('under-crun', 'echo running > /dev/termination-log; sleep 3600', 'e2e-crun'));
  const running = await podWhen('under-crun', ['Running'], 120_000);
  // THEN its container's state is crun's (a `status` file), not runc's (`state.json`), in the shim's runtime root
  const id = String(running.status.containerStatuses[0].containerID).replace('containerd://', '');
  expect(fs.readdirSync(path.join(RUNTIMES, id)).sort()).toEqual(expect.arrayContaining(['status']));
  expect(fs.existsSync(path.join(RUNTIMES, id, 'state.json'))).toBe(false);
  await deletePod('under-crun');
});

step('the gVisor payload delivered as an image pinned by digest runs a pod inside gVisor', async () => {
  // GIVEN the same payload inside an image known on the node by its digest only (built without Docker)
  const tarball = path.join(work, 'gvisor-image.tar');
  const reference = await buildOciImage({
    name: 'docker.io/library/rcm-gvisor-payload@sha256',
    files: [{ source: gvisor.path, target: '/payload/gvisor.tgz', mode: 0o644 }],
    entrypoint: ['/nothing-to-run'],
  }, tarball);
  cluster.importImage(tarball);
  // WHEN a Shim takes its artifact from that image, pinned by digest and checked by sha256
  apply({ [SHIM]: published('v2'), 'e2e-gvisor-image': { image: { reference, path: '/payload/gvisor.tgz', sha256: gvisor.sha256 }, ...GVISOR_PAYLOAD } });
  await readyOnTheNode('e2e-gvisor-image');
  expect(listTree(payloadFolder('e2e-gvisor-image', gvisor.sha256))).toContain('/bin/runsc');
  // THEN a pod of its RuntimeClass runs inside gVisor
  applyObject(pod('under-gvisor-image', KERNEL_FACTS, 'e2e-gvisor-image'));
  const done = await podWhen('under-gvisor-image', ['Succeeded', 'Failed'], 120_000);
  expect(done.status.phase).toBe('Succeeded');
  expect(done.status.containerStatuses[0].state.terminated.message).toMatch(/Starting gVisor/);
  await deletePod('under-gvisor-image');
});

// WebAssembly for real: Debian trixie's crun, built with WasmEdge, as a payload for this
// bookworm node (crun.real, its library closure with trixie's own loader and libc, soname links
// kept, and a wrapper running crun through that loader), driven by runc's shim through
// BinaryName; hand-written WASI modules in images holding nothing but the .wasm file.

const WASM_SHIM = 'e2e-wasm';
const WASM_IMAGE_SHIM = 'e2e-wasm-image';
const HELLO_LINE = 'hello from a WASI module (rcm-wasm-e2e)';
const SLEEP_LINES = ['sleep.wasm: going to sleep 15s', 'sleep.wasm: woke up after 15s'];
const VARIANT = { [WASM_VARIANT_ANNOTATION]: 'compat' };
/** A Wasm Shim through the constructs: the payload's shim and crun, the annotations crun reads let through, and the one its workloads need. */
const WASM_RUNTIME: AppShim = {
  payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
  runtimeOptions: { BinaryName: '${PAYLOAD}/bin/crun' },
  containerdRuntime: {
    podAnnotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'],
    containerAnnotations: [WASM_VARIANT_ANNOTATION, 'run.oci.handler'],
  },
  workloadAnnotations: VARIANT,
};
let wasmPayload: WasmPayload;
let helloImage: WasmImage;
let sleepImage: WasmImage;
/** The Shims each apply of the Wasm steps carries. */
let wasmShims: Record<string, AppShim>;

/** A pod running an image's entrypoint, as a plain object (the app runs it under a Shim; the controls apply it as it is). */
function wasmPod(name: string, image: string, extra: { runtimeClassName?: string; annotations?: Record<string, string> } = {}): any {
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
function underShim(shim: string, pods: Array<[string, string]>): AppWorkloads {
  return (chart, shims) => {
    for (const [name, image] of pods) shims[shim].runWorkload(new ApiObject(chart, name, wasmPod(name, image)));
  };
}

interface LogLine {
  readonly time: number;
  readonly stream: string;
  readonly text: string;
}

/** A container's log as the kubelet wrote it on the node (CRI lines: time, stream, P or F, text). */
function containerLog(p: any, container = 'main'): LogLine[] {
  const dir = path.join('/var/log/pods', `${p.metadata.namespace}_${p.metadata.name}_${p.metadata.uid}`, container);
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir).sort().flatMap(file => fs.readFileSync(path.join(dir, file), 'utf8').split('\n').filter(Boolean).map(line => {
    const [time, stream, , ...text] = line.split(' ');
    return { time: Date.parse(time), stream, text: text.join(' ') };
  }));
}

const logText = (p: any) => containerLog(p).map(l => l.text);

function containerId(p: any): string {
  return String(p.status.containerStatuses[0].containerID).replace('containerd://', '');
}

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
  // THEN the payload is one folder on the node, its links kept as links
  const folder = payloadFolder(WASM_SHIM, wasmPayload.sha256);
  const tree = listTree(folder);
  expect(tree).toEqual(expect.arrayContaining(['/bin/crun', '/bin/crun.real', '/bin/containerd-shim-runc-v2', '/lib/ld-linux-x86-64.so.2', '/lib/libLLVM.so.19.1']));
  expect(fs.readlinkSync(path.join(folder, 'lib', 'libwasmedge.so.0'))).toBe('libwasmedge.so.0.1.0');
  expect(tree.filter(f => fs.lstatSync(path.join(folder, f)).isSymbolicLink())).toHaveLength(wasmPayload.links);
  expect(tree.filter(f => fs.lstatSync(path.join(folder, f)).isFile())).toHaveLength(wasmPayload.files);
  // AND containerd's handler runs the payload's shim with crun as its binary, and lets crun's annotations through
  const { file, dump } = containerdConfig();
  expect(file).toContain(`BinaryName = "${folder}/bin/crun"`);
  const table = dump.slice(dump.indexOf(`runtimes.${WASM_SHIM}]`));
  expect(table).toContain(`runtime_path = "${folder}/bin/containerd-shim-runc-v2"`);
  expect(table).toContain('pod_annotations = ["module.wasm.image/variant", "run.oci.handler"]');
  expect(table).toContain('container_annotations = ["module.wasm.image/variant", "run.oci.handler"]');
  // AND its RuntimeClass selects the node through the handler label
  const rc = await eventually(async () => api.get(`/apis/node.k8s.io/v1/runtimeclasses/${WASM_SHIM}`).catch(() => undefined), 60_000, diagnostics);
  expect(rc).toMatchObject({ handler: WASM_SHIM, scheduling: { nodeSelector: { [ShimNodeLabels.handlerKey(WASM_SHIM)]: WASM_SHIM } } });

  // WHEN the app runs hello.wasm under the Shim (runWorkload: its RuntimeClass and its workload annotation)
  apply(wasmShims, underShim(WASM_SHIM, [['wasm-hello', helloImage.reference]]));
  const done = await podWhen('wasm-hello', ['Succeeded', 'Failed'], 120_000);
  // THEN the pod carries both, and the module ran to its end with its line in the log
  expect(done.spec.runtimeClassName).toBe(WASM_SHIM);
  expect(done.metadata.annotations).toMatchObject(VARIANT);
  expect(done.status.phase).toBe('Succeeded');
  expect(done.status.containerStatuses[0].state.terminated.exitCode).toBe(0);
  expect(containerLog(done)).toEqual([expect.objectContaining({ stream: 'stdout', text: HELLO_LINE })]);
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
    expect(failed.status.containerStatuses[0].state.terminated.exitCode).toBe(1);
    expect(logText(failed)).not.toContain(HELLO_LINE);
  }
  // AND each says who refused it: crun (its JSON log line) tried to exec the module as a program; runc did the same
  expect(logText(noAnnotation)).toEqual([expect.stringMatching(/^\{"msg":"exec container process `\/hello.wasm`: Exec format error","level":"error"/)]);
  expect(logText(noRuntimeClass)).toEqual(['exec /hello.wasm: exec format error']);
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
  const tarball = path.join(work, 'wasm-payload-image.tar');
  const reference = await buildOciImage({
    name: 'docker.io/library/rcm-wasm-payload@sha256',
    files: [{ source: wasmPayload.file, target: '/payload/crun-wasmedge.tgz', mode: 0o644 }],
    entrypoint: ['/nothing-to-run'],
  }, tarball);
  cluster.importImage(tarball);
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

/** Every file and folder below `dir`, relative to it. */
function listTree(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return (fs.readdirSync(dir, { recursive: true }) as string[]).map(f => `/${f}`).sort();
}
