import { execFile, execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as path from 'path';
import * as tar from 'tar';
import { parseAllDocuments, stringify } from 'yaml';
import { freePort } from '../support/control-plane';
import { apiServerEnv, diagnosedStep } from '../support/e2e-common';
import { CodeBlock, codeBlocks, createFreshApp, FreshApp, packTarball, synthesizedObjects } from '../support/fresh-app';
import { buildProductImages, CONTROLLER_IMAGE } from '../support/product-images';
import { eventually, Rest } from '../support/rest';
import { BUSYBOX_IMAGE, SingleNodeCluster, startSingleNodeCluster } from '../support/single-node-cluster';
import { KUBE_BIN_DIR, PAYLOAD_RUNC_SHIM, stackBinary } from '../support/tools';

// The new user's path, by README.md alone, on the single-node test cluster: pack the tarball,
// create a fresh cdk8s app, paste the README's quick start (the first ```ts block after
// `<!-- quickstart -->`, read from README.md at run time), run the README's commands that
// synthesize, label the nodes and apply, wait for the Shim as the README does, and see a pod
// run under it; then remove the Shim as docs/users/day-two.md says, and see it uninstalled.
//
// What this test changes, and nothing else:
//  - in the quick start's source: the values of `imageRegistry` and `imageTag` (the test bed's
//    images, built from this repository and imported into the node);
//  - in the synthesized Shim: the artifact's location and sha256 for this node's platform. The
//    quick start names a real upstream Spin shim release that cannot be fetched here (only
//    127.0.0.1 is reachable) and no Spin binary exists here: a locally served .tar.gz holding
//    containerd's runc shim, named as the Shim's handler expects, stands in for it;
//  - in the synthesized controller Deployment, the test bed's wiring, as the other end-to-end
//    tests have it (test/e2e/shim-lifecycle.test.ts): no kube-proxy here (host network, the API
//    server on 127.0.0.1, probes off, ports on 127.0.0.1), containerd at this node's paths and
//    restarted by its supervisor (--installer-env, --default-restart-*).
// The README's workload names a Spin app image, which cannot be pulled here, and its pod is not
// on the host's network, which is all this test bed's pods can have: its pod is scheduled onto
// the node and the kubelet starts its sandbox with the Shim's handler, no further; a busybox pod
// (host network) under the same RuntimeClass runs to completion on the installed shim instead.
//
// Needs root and the binaries of scripts/provision.sh; run it with `npx projen e2e`.

const ROOT = path.join(__dirname, '..', '..');
const NS = 'runtime-class-manager';
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const PLATFORM = { os: 'linux', arch: process.arch === 'arm64' ? 'arm64' : 'amd64' };

let cluster: SingleNodeCluster;
let api: Rest;
let work: string;
let installRoot: string;
let app: FreshApp;
let server: http.Server;
let artifactBase: string;
let readmeText: string;
let readme: CodeBlock[];
let configBefore: string;
/** The Shim, RuntimeClass and workloads the quick start synthesizes. */
let shim: any;
let workloads: any[];
let artifactSha256: string;

/** The first ```ts block after the line `<!-- quickstart -->` in README.md. */
function quickStart(): CodeBlock {
  const marker = readmeText.split('\n').findIndex(l => l.trim() === '<!-- quickstart -->');
  if (marker < 0) throw new Error('README.md has no <!-- quickstart --> line');
  const block = readme.find(b => b.line > marker + 1 && ['ts', 'typescript'].includes(b.lang));
  if (!block) throw new Error('README.md has no ```ts block after <!-- quickstart -->');
  return block;
}

/** The quick start with the test bed's images (the two values the README asks a user to set). */
function forTestBed(source: string): string {
  const [registry, tag] = [CONTROLLER_IMAGE.slice(0, CONTROLLER_IMAGE.lastIndexOf('/')), CONTROLLER_IMAGE.split(':').pop()!];
  let replaced = 0;
  const set = (text: string, prop: string, value: string) => text.replace(new RegExp(`(\\b${prop}:\\s*)(['"\`])[^'"\`]*\\2`), (_m, head, q) => {
    replaced++;
    return `${head}${q}${value}${q}`;
  });
  let out = set(set(source, 'imageRegistry', registry), 'imageTag', tag);
  if (replaced !== 2) throw new Error('the quick start does not set imageRegistry and imageTag as string literals');
  return out;
}

/** README.md's ```sh blocks, from the first one after the quick start that contains `pattern`. */
function readmeBlock(pattern: RegExp): CodeBlock {
  const block = readme.find(b => b.line > quickStart().line && ['sh', 'bash'].includes(b.lang) && pattern.test(b.text));
  if (!block) throw new Error(`README.md has no shell block after the quick start matching ${pattern}`);
  return block;
}

/** The commands of a shell block, continuation lines joined, comments dropped. */
function commands(block: CodeBlock): string[] {
  return block.text.replace(/\\\n/g, ' ').split('\n').map(l => l.trim()).filter(l => l && !l.startsWith('#'));
}

/**
 * Runs a documented command as a user would, in the app's folder, kubectl on PATH and pointed at
 * the test cluster. Asynchronously: the artifact server runs in this process.
 */
function sh(command: string, timeoutMs = 180_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('bash', ['-euo', 'pipefail', '-c', command], {
      cwd: app.dir,
      encoding: 'utf8',
      timeout: timeoutMs,
      maxBuffer: 16 * 1024 * 1024,
      env: { ...process.env, PATH: `${KUBE_BIN_DIR}:${process.env.PATH}`, KUBECONFIG: cluster.controlPlane.kubeconfig, NODE_NO_WARNINGS: '1' },
    }, (error, stdout, stderr) => {
      if (error) reject(new Error(`\`${command}\` failed (${error.code ?? error.signal}):\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

function sha256(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

/** The stand-in artifact: containerd's runc shim as containerd-shim-<handler>-v2 in a .tar.gz, served on 127.0.0.1. */
async function serveArtifact(handler: string): Promise<{ location: string; sha256: string }> {
  const dir = path.join(work, 'artifact');
  fs.mkdirSync(path.join(work, 'www'), { recursive: true });
  fs.mkdirSync(dir, { recursive: true });
  fs.copyFileSync(PAYLOAD_RUNC_SHIM, path.join(dir, `containerd-shim-${handler}-v2`));
  const file = path.join(work, 'www', `containerd-shim-${handler}-v2.tar.gz`);
  await tar.c({ file, cwd: dir, gzip: true, portable: true }, [`containerd-shim-${handler}-v2`]);
  server = http.createServer((req, res) => {
    const f = path.join(work, 'www', path.basename(req.url ?? ''));
    if (!fs.existsSync(f)) return void res.writeHead(404).end();
    res.writeHead(200, { 'Content-Length': fs.statSync(f).size });
    fs.createReadStream(f).pipe(res);
  });
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r));
  artifactBase = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return { location: `${artifactBase}/${path.basename(file)}`, sha256: sha256(fs.readFileSync(file)) };
}

/** The artifact of this node's platform in the synthesized Shim, replaced by the stand-in. */
function substituteArtifact(s: any, artifact: { location: string; sha256: string }): void {
  const fetch = s.spec.fetchStrategy;
  const entries: any[] = [...(fetch.platforms ?? []), ...(fetch.anonHttp?.platforms ?? [])];
  const mine = entries.filter(p => p.os === PLATFORM.os && p.arch === PLATFORM.arch);
  const targets = mine.length > 0 ? mine : fetch.anonHttp?.location ? [fetch.anonHttp] : [];
  if (targets.length === 0) throw new Error(`the quick start's Shim has no artifact for ${PLATFORM.os}/${PLATFORM.arch}: ${JSON.stringify(fetch)}`);
  for (const t of targets) Object.assign(t, artifact);
}

/** The test bed's wiring of the controller Deployment (see the header). */
async function wireController(deployment: any): Promise<void> {
  const pod = deployment.spec.template.spec;
  const c = pod.containers[0];
  pod.hostNetwork = true;
  c.env = [...(c.env ?? []), ...apiServerEnv(new URL(cluster.controlPlane.server).port)];
  delete c.livenessProbe;
  delete c.readinessProbe;
  const [metrics, probes] = [await freePort(), await freePort()];
  const env = { RCM_CONFIG: cluster.containerd.config, RCM_SOCKET: cluster.containerd.socket, RCM_DISTRO: 'containerd', RCM_INSTALL_ROOT: installRoot, RCM_HOST_PID: String(cluster.containerd.supervisorPid) };
  c.args = [...c.args.filter((a: string) => !/^--(metrics-bind-address|health-probe-bind-address|default-restart-mode|default-restart-command)=/.test(a)),
    `--metrics-bind-address=127.0.0.1:${metrics}`, `--health-probe-bind-address=127.0.0.1:${probes}`,
    '--default-restart-mode=command', `--default-restart-command=${cluster.containerd.restartCommand}`,
    ...Object.entries(env).map(([k, v]) => `--installer-env=${k}=${v}`)];
}

/** After the README's `cdk8s synth`: the substitutions and the test bed's wiring, written back to dist/. */
async function adaptSynthesized(): Promise<void> {
  const dist = path.join(app.dir, 'dist');
  const files = fs.readdirSync(dist).filter(f => f.endsWith('.yaml'));
  const objects = synthesizedObjects(dist);
  const shims = objects.filter(o => o.kind === 'Shim');
  if (shims.length !== 1) throw new Error(`the quick start synthesizes ${shims.length} Shims, expected one`);
  shim = shims[0];
  workloads = objects.filter(o => o.spec?.template?.spec?.runtimeClassName || (o.kind === 'Pod' && o.spec?.runtimeClassName));
  const artifact = await serveArtifact(shim.spec.runtimeClass.handler);
  artifactSha256 = artifact.sha256;
  let wired = 0;
  for (const file of files) {
    const docs = parseAllDocuments(fs.readFileSync(path.join(dist, file), 'utf8')).map(d => d.toJS()).filter(o => o);
    for (const o of docs) {
      if (o.kind === 'Shim') substituteArtifact(o, artifact);
      if (o.kind === 'Deployment' && o.metadata.namespace === NS && o.spec.template.spec.containers[0].image === CONTROLLER_IMAGE) {
        await wireController(o);
        wired++;
      }
    }
    fs.writeFileSync(path.join(dist, file), docs.map(o => stringify(o)).join('---\n'));
  }
  if (wired !== 1) throw new Error(`expected one controller Deployment in ${NS} with image ${CONTROLLER_IMAGE}, found ${wired}`);
}

/** What containerd makes of its configuration. */
function containerdConfig(): string {
  return execFileSync(stackBinary('containerd'), ['--config', cluster.containerd.config, 'config', 'dump'], { encoding: 'utf8' });
}

function condition(s: any, type: string): any {
  return (s?.status?.conditions ?? []).find((c: any) => c.type === type);
}

async function nodeLabels(): Promise<Record<string, string>> {
  return (await api.get(`/api/v1/nodes/${cluster.nodeName}`)).metadata.labels ?? {};
}

/** The runtime containerd started a container with: the shim binary's path, for a path handler. */
function runtimeOfContainer(id: string): string {
  return JSON.parse(cluster.containerd.ctr(['-n', 'k8s.io', 'containers', 'info', id.replace('containerd://', '')])).Runtime.Name;
}

async function diagnostics(): Promise<string> {
  const safe = async (what: () => Promise<any>) => what().catch((e: Error) => `(${e.message})`);
  const pods = await safe(async () => (await api.get('/api/v1/pods')).items.map((p: any) =>
    `${p.metadata.namespace}/${p.metadata.name} ${p.status?.phase} ${JSON.stringify((p.status?.containerStatuses ?? []).map((c: any) => c.state))}`).join('\n'));
  const shims = await safe(async () => JSON.stringify((await api.get(SHIMS)).items
    .map((s: any) => ({ name: s.metadata.name, status: s.status })), undefined, 1));
  const events = await safe(async () => (await api.get('/api/v1/events')).items.slice(-20)
    .map((e: any) => `${e.involvedObject.kind}/${e.involvedObject.name} ${e.reason}: ${e.message}`).join('\n'));
  return ['=== new user path diagnostics ===', `shims: ${shims}`, `pods:\n${pods}`, `events:\n${events}`, `node labels: ${JSON.stringify(await safe(nodeLabels))}`,
    cluster.logTails(20)].join('\n');
}

function step(name: string, fn: () => Promise<void>, timeoutMs = 300_000): void {
  diagnosedStep(name, fn, diagnostics, timeoutMs);
}

beforeAll(async () => {
  readmeText = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  readme = codeBlocks('README.md', readmeText);
  cluster = await startSingleNodeCluster('rcm-new-user');
  work = path.join(cluster.dir, 'work');
  fs.mkdirSync(work, { recursive: true });
  installRoot = path.join(cluster.dir, 'opt-rcm');
  const cp = cluster.controlPlane;
  api = new Rest(cp.server, cp.adminToken, cp.caFile);
  configBefore = containerdConfig();
  const images = await buildProductImages(work);
  cluster.importImage(images.controller);
  cluster.importImage(images.installer);
  // The package as the README gets it (the tarball of `npm pack`, which package:js makes), in a fresh app.
  app = createFreshApp(path.join(work, 'app'), packTarball(path.join(work, 'pack')));
}, 600_000);

afterAll(async () => {
  server?.close();
  await cluster?.stop();
}, 180_000);

step('the README\'s quick start, pasted into a fresh cdk8s app, is synthesized, the nodes labelled and applied as the README says', async () => {
  app.writeMain(forTestBed(quickStart().text));
  const block = readmeBlock(/kubectl apply/);
  for (const command of commands(block)) {
    await sh(command);
    if (/\bcdk8s synth\b/.test(command)) await adaptSynthesized();
  }
  expect(shim).toBeDefined();
  // The README's label is on the node, and the Shim is in the cluster.
  const selector: Record<string, string> = shim.spec.nodeSelector ?? {};
  expect(await nodeLabels()).toMatchObject(selector);
  expect((await api.get(`${SHIMS}/${shim.metadata.name}`)).spec.runtimeClass).toMatchObject(shim.spec.runtimeClass);
});

step('the Shim becomes Ready as the README watches it, and the node carries its handler', async () => {
  const block = readmeBlock(/kubectl wait --for=condition=Ready/);
  // `kubectl port-forward` keeps running (and needs the app's container, which cannot run here): not run.
  for (const command of commands(block).filter(c => /^kubectl (get|wait|describe)\b/.test(c))) await sh(command, 660_000);
  const s = await api.get(`${SHIMS}/${shim.metadata.name}`);
  expect(condition(s, 'Ready')?.status).toBe('True');
  expect(s.status).toMatchObject({ nodesReady: 1, nodesFailed: 0 });
  expect(Object.values(await nodeLabels())).toContain(shim.spec.runtimeClass.handler);
}, 700_000);

step('pods run under the Shim: the README\'s workload is placed on the node and started with the Shim\'s handler; a busybox pod runs to completion on the installed shim', async () => {
  const runtimeClass = shim.spec.runtimeClass.name;
  const installed = (runtime: string) => runtime.startsWith(path.join(installRoot, 'shims', shim.spec.runtimeClass.handler) + '/')
    && runtime.includes(artifactSha256.slice(0, 16));
  expect(workloads.length).toBeGreaterThan(0);
  // The README's workload: scheduled here with the RuntimeClass, and the kubelet starts its sandbox
  // with the Shim's handler. It gets no further on this test bed: its image cannot be pulled, and
  // its network cannot be set up (the node's CNI is loopback only; the test pods use the host's).
  const handler = shim.spec.runtimeClass.handler;
  const podOfWorkload = await eventually(async () => (await api.get('/api/v1/namespaces/default/pods')).items
    .find((p: any) => p.spec.runtimeClassName === runtimeClass && p.spec.nodeName === cluster.nodeName
      && p.metadata.name.startsWith(workloads[0].metadata.name)),
  120_000, diagnostics);
  // (the kubelet's structured log line, 1.34 to 1.37)
  const startedWith = `"Running pod with runtime handler" pod="default/${podOfWorkload.metadata.name}" runtimeHandler="${handler}"`;
  await eventually(async () => cluster.kubelet.logTail(1_000_000).includes(startedWith), 120_000, diagnostics);

  // A pod of our own under the same RuntimeClass runs on the installed shim and succeeds.
  cluster.controlPlane.kubectl(['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'under-the-shim', namespace: 'default' },
      spec: {
        runtimeClassName: runtimeClass,
        hostNetwork: true,
        restartPolicy: 'Never',
        terminationGracePeriodSeconds: 1,
        containers: [{ name: 'main', image: BUSYBOX_IMAGE, imagePullPolicy: 'IfNotPresent', command: ['/bin/sh', '-c', 'echo under the shim'] }],
      },
    }),
  });
  const done = await eventually(async () => {
    const p = await api.get('/api/v1/namespaces/default/pods/under-the-shim');
    return ['Succeeded', 'Failed'].includes(p.status?.phase) ? p : undefined;
  }, 120_000, diagnostics);
  expect(done.status.phase).toBe('Succeeded');
  expect(installed(runtimeOfContainer(done.status.containerStatuses[0].containerID))).toBe(true);
  cluster.controlPlane.kubectl(['delete', 'pod', 'under-the-shim', '--wait=true']);
});

step('removed as docs/users/day-two.md says, the Shim is uninstalled from the node', async () => {
  const dayTwo = fs.readFileSync(path.join(ROOT, 'docs', 'users', 'day-two.md'), 'utf8');
  const lines = dayTwo.split('\n');
  const start = lines.findIndex(l => /^#+\s+remove\b/i.test(l));
  if (start < 0) throw new Error('docs/users/day-two.md has no section whose heading starts with "Remove"');
  const end = lines.findIndex((l, i) => i > start && /^#+\s/.test(l));
  const section = codeBlocks('docs/users/day-two.md', lines.slice(start, end < 0 ? undefined : end).join('\n'));
  const block = section.find(b => ['sh', 'bash'].includes(b.lang));
  if (!block) throw new Error('the "Remove" section of docs/users/day-two.md has no shell block');
  // Its first step: delete the workloads that use the Shim's RuntimeClass (the quick start's),
  // and take the Shim out of the app. Applying the app without it changes nothing in the
  // cluster (kubectl apply leaves the objects the manifests no longer have), so only the
  // workloads' deletion is carried out here.
  for (const w of workloads) await sh(`kubectl delete ${w.kind.toLowerCase()} ${w.metadata.name} -n ${w.metadata.namespace ?? 'default'} --wait=true`);
  // Then the section's commands, as written.
  for (const command of commands(block)) await sh(command, 240_000);

  const handler = shim.spec.runtimeClass.handler;
  await eventually(async () => api.get(`${SHIMS}/${shim.metadata.name}`).then(() => false, (e: any) => e.code === 404), 120_000, diagnostics);
  await eventually(async () => api.get(`/apis/node.k8s.io/v1/runtimeclasses/${shim.spec.runtimeClass.name}`).then(() => false, (e: any) => e.code === 404),
    60_000, diagnostics);
  expect(Object.values(await nodeLabels())).not.toContain(handler);
  expect(containerdConfig()).toEqual(configBefore);
  const shimDir = path.join(installRoot, 'shims', handler);
  expect(fs.existsSync(shimDir) ? fs.readdirSync(shimDir, { recursive: true }) : []).toEqual([]);
});
