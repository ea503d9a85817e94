import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as path from 'path';
import { ApiObject, App, Chart, Duration, JsonPatch } from 'cdk8s';
import * as tar from 'tar';
import { ContainerdRestart, InstallMode, PullPolicy, RuntimeClassManager, ShimNodeLabels } from '../../src';
import { freePort } from '../support/control-plane';
import { tail } from '../support/files';
import { buildProductImages, CONTROLLER_IMAGE, INSTALLER_IMAGE } from '../support/product-images';
import { eventually, Rest } from '../support/rest';
import { BUSYBOX_IMAGE, SingleNodeCluster, startSingleNodeCluster } from '../support/single-node-cluster';

// Install mode NodeAgent on a real single-node cluster: the app synthesizes the controller with
// --install-mode agent and the rcm-node-agent DaemonSet; the agent pod (the installer image)
// carries out what the controller admits in the node record, restarts containerd, and
// repairs drift; workload pods run under the installed shim. No installer Job is made.
// Needs root and the binaries of scripts/provision.sh; run it with `npx projen e2e`.

const SHIM = 'agent-runc';
const HANDLER_LABEL = ShimNodeLabels.handlerKey(SHIM);
const SHIMS = '/apis/runtime.spinkube.dev/v1alpha1/shims';
const NS = 'runtime-class-manager';

let cluster: SingleNodeCluster;
let api: Rest;
let work: string;
let installRoot: string;
let server: http.Server;
let artifact: { location: string; sha256: string };
let configBefore: string;
let ports: { api: number; metrics: number; probes: number };

function sha256(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

/** The app a user writes, in install mode NodeAgent, plus the test bed's overrides (no kube-proxy: the API server on 127.0.0.1). */
function synthApp(withShim: boolean): string {
  const app = new App();
  const chart = new Chart(app, 'e2e');
  const manager = new RuntimeClassManager(chart, 'Manager', {
    controllerImage: CONTROLLER_IMAGE,
    installerImage: INSTALLER_IMAGE,
    imagePullPolicy: PullPolicy.IF_NOT_PRESENT,
    replicas: 1,
    metricsPort: ports.metrics,
    probePort: ports.probes,
    installMode: InstallMode.nodeAgent({ driftCheck: Duration.seconds(3) }),
    defaultRestart: ContainerdRestart.command(cluster.containerd.restartCommand),
    retryBackoff: Duration.seconds(2),
    installerEnv: {
      RCM_CONFIG: cluster.containerd.config,
      RCM_SOCKET: cluster.containerd.socket,
      RCM_DISTRO: 'containerd',
      RCM_INSTALL_ROOT: installRoot,
      RCM_HOST_PID: String(cluster.containerd.supervisorPid),
    },
  });
  if (withShim) manager.addShim(SHIM, { handler: SHIM, allowInsecureHttp: true, location: artifact.location, sha256: artifact.sha256 });
  const container = '/spec/template/spec/containers/0';
  const apiServer = [
    JsonPatch.add(`${container}/env/-`, { name: 'KUBERNETES_SERVICE_HOST', value: '127.0.0.1' }),
    JsonPatch.add(`${container}/env/-`, { name: 'KUBERNETES_SERVICE_PORT', value: String(ports.api) }),
  ];
  const args: string[] = manager.deployment.toJson().spec.template.spec.containers[0].args;
  ApiObject.of(manager.deployment).addJsonPatch(
    JsonPatch.add('/spec/template/spec/hostNetwork', true),
    ...apiServer,
    JsonPatch.remove(`${container}/livenessProbe`),
    JsonPatch.remove(`${container}/readinessProbe`),
    ...['--metrics-bind-address', '--health-probe-bind-address'].map(flag => {
      const i = args.findIndex(a => a.startsWith(`${flag}=:`));
      return JsonPatch.replace(`${container}/args/${i}`, args[i].replace('=:', '=127.0.0.1:'));
    }),
  );
  ApiObject.of(manager.nodeAgent!).addJsonPatch(...apiServer);
  return app.synthYaml();
}

function apply(withShim: boolean): void {
  const file = path.join(work, `app-${Date.now()}.yaml`);
  fs.writeFileSync(file, synthApp(withShim));
  const kubectl = cluster.controlPlane.kubectl;
  try {
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', '-f', file]);
  } catch (e) {
    if (!/no matches for kind "Shim"/.test(String((e as any).stderr ?? e))) throw e;
    kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
    kubectl(['apply', '--server-side', '--field-manager=e2e-gitops', '-f', file]);
  }
}

const effective = () => execFileSync('/usr/bin/containerd', ['--config', cluster.containerd.config, 'config', 'dump'], { encoding: 'utf8' });
const nodeLabels = async (): Promise<Record<string, string>> => (await api.get(`/api/v1/nodes/${cluster.nodeName}`)).metadata.labels ?? {};

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

async function podDone(name: string, timeoutMs = 120_000): Promise<any> {
  return eventually(async () => {
    const p = await api.get(`/api/v1/namespaces/default/pods/${name}`);
    return ['Succeeded', 'Failed'].includes(p.status?.phase) ? p : undefined;
  }, timeoutMs, diagnostics);
}

async function deletePod(name: string): Promise<void> {
  await api.request('DELETE', `/api/v1/namespaces/default/pods/${name}`).catch(() => undefined);
  await eventually(async () => api.get(`/api/v1/namespaces/default/pods/${name}`).then(() => false, (e: any) => e.code === 404), 60_000, diagnostics);
}

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

async function diagnostics(): Promise<string> {
  const safe = async (what: () => Promise<any>) => what().catch((e: Error) => `(${e.message})`);
  const shims = await safe(async () => (await api.get(SHIMS)).items.map((s: any) => ({ name: s.metadata.name, status: s.status })));
  const node = await safe(async () => {
    const n = await api.get(`/api/v1/nodes/${cluster.nodeName}`);
    return Object.fromEntries(Object.entries({ ...n.metadata.labels, ...n.metadata.annotations }).filter(([k]) => k.includes('shim.runtime')));
  });
  const pods = await safe(async () => (await api.get('/api/v1/pods')).items.map((p: any) => `${p.metadata.namespace}/${p.metadata.name} ${p.status?.phase}`));
  const logs = fs.existsSync('/var/log/pods') ? fs.readdirSync('/var/log/pods').filter(d => d.startsWith(`${NS}_`)).flatMap(d =>
    fs.readdirSync(path.join('/var/log/pods', d)).flatMap(c => fs.readdirSync(path.join('/var/log/pods', d, c)).map(f =>
      `--- ${d} ${c}/${f} ---\n${tail(path.join('/var/log/pods', d, c, f), 30)}`))) : [];
  return ['=== node agent e2e diagnostics ===', `shims: ${JSON.stringify(shims)}`, `node: ${JSON.stringify(node)}`, `pods: ${JSON.stringify(pods)}`,
    ...logs, cluster.logTails(20)].join('\n');
}

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
  // A real shim: containerd's runc shim under the handler's name.
  const dir = path.join(work, 'artifact');
  fs.mkdirSync(dir);
  fs.copyFileSync('/usr/bin/containerd-shim-runc-v2', path.join(dir, `containerd-shim-${SHIM}-v2`));
  const file = path.join(work, 'www', 'shim.tar.gz');
  await tar.c({ file, cwd: dir, gzip: true, portable: true }, [`containerd-shim-${SHIM}-v2`]);
  server = http.createServer((req, res) => {
    if (req.url !== '/shim.tar.gz') return void res.writeHead(404).end();
    res.writeHead(200, { 'Content-Length': fs.statSync(file).size });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve));
  artifact = { location: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/shim.tar.gz`, sha256: sha256(fs.readFileSync(file)) };
  configBefore = fs.readFileSync(cluster.containerd.config, 'utf8');
}, 300_000);

afterAll(async () => {
  server?.close();
  await cluster?.stop();
}, 180_000);

step('applied in install mode NodeAgent, the Shim is installed by the agent pod, without a Job, and a pod runs under it', async () => {
  const containerdPid = cluster.containerd.pid();
  // WHEN the app is applied
  apply(true);
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
  cluster.controlPlane.kubectl(['apply', '-f', '-'], { input: JSON.stringify(pod('agent-workload', 'echo ok', SHIM)) });
  expect((await podDone('agent-workload')).status.phase).toBe('Succeeded');
  await deletePod('agent-workload');
});

step('drift: the config rewritten without the handler drops the gate within the drift check, and the agent repairs the node without a human', async () => {
  // GIVEN the handler installed
  const installedConfig = fs.readFileSync(cluster.containerd.config, 'utf8');
  // WHEN configuration management writes back the config it knows (without our handler)
  const changedAt = Date.now();
  fs.writeFileSync(cluster.containerd.config, configBefore);
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
  // AND a pod under the RuntimeClass runs again
  cluster.controlPlane.kubectl(['apply', '-f', '-'], { input: JSON.stringify(pod('agent-after-drift', 'echo ok', SHIM)) });
  expect((await podDone('agent-after-drift')).status.phase).toBe('Succeeded');
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

step('deleting the Shim uninstalls it through the agent: the config is the original again, byte for byte', async () => {
  apply(false);
  cluster.controlPlane.kubectl(['delete', 'shim', SHIM, '--wait=false']);
  await eventually(async () => api.get(`${SHIMS}/${SHIM}`).then(() => false, (e: any) => e.code === 404), 180_000, diagnostics);
  expect(fs.readFileSync(cluster.containerd.config, 'utf8')).toBe(configBefore);
  expect((await nodeLabels())[HANDLER_LABEL]).toBeUndefined();
  expect(fs.existsSync(path.join(installRoot, 'shims', SHIM))).toBe(false);
});
