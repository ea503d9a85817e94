import { ChildProcess, execFileSync, spawn } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as https from 'https';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { tail } from './files';
import { eventually } from './rest';
import { KUBE_VERSION, kubeBinary, stackBinary } from './tools';

/** What a test needs to talk to the control plane. */
export interface ControlPlane {
  /** https://127.0.0.1:<port> */
  readonly server: string;
  /** Admin kubeconfig (system:masters). */
  readonly kubeconfig: string;
  /** The API server's serving certificate bundle (usable as CA). */
  readonly caFile: string;
  /** Bearer token of the admin user. */
  readonly adminToken: string;
  /** Private key that signs ServiceAccount tokens. */
  readonly serviceAccountKey: string;
  /** Working directory (logs are in logs/). */
  readonly dir: string;
  /** Run kubectl with the admin kubeconfig; returns stdout. */
  kubectl(args: string[], options?: { input?: string }): string;
  /** Tail of every component's log, for failure messages. */
  logTails(lines?: number): string;
  stop(): Promise<void>;
}

export interface ControlPlaneOptions {
  /** Also run kube-controller-manager (Job controller, garbage collector, token controller). */
  readonly controllerManager?: boolean;
  /** kube-controller-manager's --controllers. */
  readonly controllers?: string;
  /** More kube-controller-manager flags (e.g. its API rate limits for benchmarks). */
  readonly controllerManagerArgs?: string[];
  /** Also run kube-scheduler (for pods that are not bound to a node by name). */
  readonly scheduler?: boolean;
}

/** A free TCP port on 127.0.0.1 (asked of the kernel, then released). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}

function which(binary: string): string {
  for (const dir of (process.env.PATH ?? '').split(':').concat(['/usr/bin', '/usr/sbin'])) {
    const candidate = path.join(dir, binary);
    if (fs.existsSync(candidate)) return candidate;
  }
  throw new Error(`${binary} not found: run scripts/provision.sh (as root) first`);
}

function requireBinaries(): void {
  for (const b of ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubelet', 'kubectl'] as const) {
    if (!fs.existsSync(kubeBinary(b))) {
      throw new Error(`${kubeBinary(b)} is missing: run scripts/provision.sh (as root) to build Kubernetes ${KUBE_VERSION} from the Go module proxy`);
    }
  }
  stackBinary('etcd');
  which('openssl');
}

/** Ends a process: SIGTERM, then SIGKILL if it has not exited within five seconds. */
export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise(r => child.once('exit', r));
  child.kill('SIGTERM');
  const escalate = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(escalate);
}

function httpsGet(url: string, token: string, ca: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { headers: { Authorization: `Bearer ${token}` }, ca: fs.readFileSync(ca), timeout: 2000, agent: false }, res => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
  });
}

/**
 * Starts etcd and kube-apiserver (and optionally kube-controller-manager) on 127.0.0.1
 * with free ports and private folders. `stop()` kills them and removes the folders.
 */
export async function startControlPlane(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  requireBinaries();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-cp-'));
  const logDir = path.join(dir, 'logs');
  fs.mkdirSync(logDir);
  const processes: { name: string; child: ChildProcess }[] = [];

  const start = (name: string, binary: string, args: string[]) => {
    const log = fs.openSync(path.join(logDir, `${name}.log`), 'a');
    const child = spawn(binary, args, { stdio: ['ignore', log, log], detached: false });
    fs.closeSync(log);
    processes.push({ name, child });
    return child;
  };
  const logTails = (lines = 30) => processes
    .map(({ name }) => `--- ${name} (last ${lines} lines) ---\n${tail(path.join(logDir, `${name}.log`), lines)}`).join('\n');

  const stop = async () => {
    for (const { child } of [...processes].reverse()) await stopProcess(child);
    fs.rmSync(dir, { recursive: true, force: true });
  };

  try {
    const ports: number[] = [];
    for (let i = 0; i < 5; i++) ports.push(await freePort());
    const [etcdClient, etcdPeer, apiPort, cmPort, schedulerPort] = ports;
    start('etcd', stackBinary('etcd'), [
      `--data-dir=${path.join(dir, 'etcd')}`,
      `--listen-client-urls=http://127.0.0.1:${etcdClient}`,
      `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
      `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-cluster=default=http://127.0.0.1:${etcdPeer}`,
      '--unsafe-no-fsync=true',
    ]);

    const adminToken = crypto.randomBytes(16).toString('hex');
    fs.writeFileSync(path.join(dir, 'tokens.csv'), `${adminToken},admin,admin,system:masters\n`);
    const saKey = path.join(dir, 'sa.key');
    execFileSync('openssl', ['genrsa', '-out', saKey, '2048'], { stdio: 'ignore' });
    execFileSync('openssl', ['rsa', '-in', saKey, '-pubout', '-out', path.join(dir, 'sa.pub')], { stdio: 'ignore' });
    const certDir = path.join(dir, 'certs');
    start('kube-apiserver', kubeBinary('kube-apiserver'), [
      `--etcd-servers=http://127.0.0.1:${etcdClient}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      // Since 1.3x the API server refuses a loopback advertise address with its endpoint
      // reconciler: nothing here dials the kubernetes Service, so it needs no endpoints.
      '--endpoint-reconciler-type=none',
      `--secure-port=${apiPort}`,
      `--cert-dir=${certDir}`,
      '--allow-privileged=true',
      '--authorization-mode=Node,RBAC',
      `--token-auth-file=${path.join(dir, 'tokens.csv')}`,
      `--service-account-key-file=${path.join(dir, 'sa.pub')}`,
      `--service-account-signing-key-file=${saKey}`,
      '--service-account-issuer=https://kubernetes.default.svc',
      '--service-cluster-ip-range=10.0.0.0/24',
    ]);
    const server = `https://127.0.0.1:${apiPort}`;
    const caFile = path.join(certDir, 'apiserver.crt');
    await eventually(async () => fs.existsSync(caFile) && await httpsGet(`${server}/readyz`, adminToken, caFile) === 200, 60_000,
      () => `kube-apiserver did not become ready\n${logTails()}`);

    const kubeconfig = path.join(dir, 'admin.kubeconfig');
    fs.writeFileSync(kubeconfig, [
      'apiVersion: v1', 'kind: Config',
      `clusters: [{name: test, cluster: {server: "${server}", certificate-authority: "${caFile}"}}]`,
      `users: [{name: admin, user: {token: "${adminToken}"}}]`,
      'contexts: [{name: test, context: {cluster: test, user: admin}}]',
      'current-context: test', '',
    ].join('\n'));

    if (options.controllerManager) {
      const cm = start('kube-controller-manager', kubeBinary('kube-controller-manager'), [
        `--kubeconfig=${kubeconfig}`,
        `--service-account-private-key-file=${saKey}`,
        `--root-ca-file=${caFile}`,
        '--leader-elect=false',
        '--bind-address=127.0.0.1',
        `--secure-port=${cmPort}`,
        `--controllers=${options.controllers ?? '*,-nodeipam'}`,
        '--use-service-account-credentials=true',
        ...(options.controllerManagerArgs ?? []),
      ]);
      // A bad flag ends it at once; say so here rather than as a Job that never runs.
      await new Promise(r => setTimeout(r, 1500));
      if (cm.exitCode !== null) throw new Error(`kube-controller-manager exited with ${cm.exitCode}\n${logTails(15)}`);
    }

    if (options.scheduler) {
      const scheduler = start('kube-scheduler', kubeBinary('kube-scheduler'), [
        `--kubeconfig=${kubeconfig}`,
        '--leader-elect=false',
        '--bind-address=127.0.0.1',
        `--secure-port=${schedulerPort}`,
      ]);
      await new Promise(r => setTimeout(r, 1000));
      if (scheduler.exitCode !== null) throw new Error(`kube-scheduler exited with ${scheduler.exitCode}\n${logTails(15)}`);
    }

    const kubectl = (args: string[], opts: { input?: string } = {}) => execFileSync(kubeBinary('kubectl'), ['--kubeconfig', kubeconfig, ...args], {
      input: opts.input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'],
    });
    return { server, kubeconfig, caFile, adminToken, serviceAccountKey: saKey, dir, kubectl, logTails, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
