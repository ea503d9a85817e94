import * as http from 'http';
import * as os from 'os';
import { KubeConfig } from '@kubernetes/client-node';
import { Controller } from './controller';
import { Kube } from './kube';
import { LeaderElector } from './leader';
import { Metrics } from './metrics';
import { installerEnvNameProblem } from '../constructs/validation';
import { Logger } from '../installer/log';

interface Flag {
  readonly name: string;
  readonly help: string;
  readonly default?: string;
  /** May be given more than once (from the environment: one value per line). */
  readonly repeat?: boolean;
}

const FLAGS: Flag[] = [
  { name: 'kubeconfig', help: 'kubeconfig file (default: in-cluster config)' },
  { name: 'namespace', help: 'namespace of the controller and its installer Jobs', default: process.env.POD_NAMESPACE ?? 'runtime-class-manager' },
  { name: 'installer-image', help: 'node installer image', default: 'ghcr.io/runtime-class-manager-cdk8s/rcm-node-installer:0.1.0' },
  { name: 'installer-image-pull-policy', help: 'Always, IfNotPresent or Never', default: 'IfNotPresent' },
  { name: 'leader-elect', help: 'elect one active replica through a Lease', default: 'true' },
  { name: 'lease-duration-seconds', help: 'how long a leader holds the Lease without renewing', default: '15' },
  { name: 'identity', help: 'this replica in the Lease', default: process.env.POD_NAME ?? `${os.hostname()}-${process.pid}` },
  { name: 'metrics-bind-address', help: 'address of /metrics', default: ':8080' },
  { name: 'health-probe-bind-address', help: 'address of /healthz and /readyz', default: ':8081' },
  { name: 'log-format', help: 'json or text', default: 'json' },
  { name: 'default-restart-mode', help: 'how installers restart containerd when a Shim does not say: systemd, command, none', default: 'systemd' },
  { name: 'default-restart-command', help: 'the host command for --default-restart-mode=command' },
  { name: 'installer-env', help: 'NAME=VALUE added to every installer pod\'s environment (repeatable)', repeat: true },
  { name: 'job-ttl-seconds', help: 'how long finished installer Jobs are kept', default: '3600' },
  { name: 'workers', help: 'Shims reconciled in parallel', default: '4' },
  { name: 'resync-seconds', help: 'period of the full resync', default: '30' },
  { name: 'help', help: 'show this help' },
];

function helpText(): string {
  return ['Usage: rcm-controller [flags]', '', 'Reconciles Shims into installed nodes, RuntimeClasses and status.', '',
    'Flags (each also read from RCM_<FLAG_IN_UPPER_SNAKE_CASE>; flags win):',
    ...FLAGS.map(f => `  --${f.name}`.padEnd(34) + f.help + (f.default !== undefined ? ` (default ${f.default})` : ''))].join('\n');
}

interface Flags {
  readonly values: Record<string, string>;
  readonly repeated: Record<string, string[]>;
}

function parseFlags(argv: string[]): Flags | 'help' {
  const values: Record<string, string> = {};
  const repeated: Record<string, string[]> = {};
  for (const f of FLAGS) {
    const env = process.env[`RCM_${f.name.toUpperCase().replace(/-/g, '_')}`];
    if (f.repeat) repeated[f.name] = (env ?? '').split('\n').filter(line => line.trim() !== '');
    else if (env !== undefined && env !== '') values[f.name] = env;
    else if (f.default !== undefined) values[f.name] = f.default;
  }
  const fromArgs = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(argv[i]);
    const flag = m && FLAGS.find(f => f.name === m[1]);
    if (!m || !flag) throw new Error(`unknown argument ${argv[i]} (see --help)`);
    if (flag.name === 'help') return 'help';
    const value = m[2] ?? argv[++i] ?? '';
    if (!flag.repeat) {
      values[flag.name] = value;
      continue;
    }
    // Flags replace the environment's list rather than adding to it.
    if (!fromArgs.has(flag.name)) repeated[flag.name] = [];
    fromArgs.add(flag.name);
    repeated[flag.name].push(value);
  }
  for (const n of ['lease-duration-seconds', 'job-ttl-seconds', 'workers', 'resync-seconds']) {
    if (!/^[0-9]+$/.test(values[n]) || Number(values[n]) < 1) throw new Error(`--${n}: "${values[n]}" is not a whole number >= 1`);
  }
  if (!['systemd', 'command', 'none'].includes(values['default-restart-mode'])) throw new Error(`--default-restart-mode: "${values['default-restart-mode']}" is not systemd, command or none`);
  if (values['default-restart-mode'] === 'command' && !values['default-restart-command']) throw new Error('--default-restart-mode=command needs --default-restart-command');
  for (const entry of repeated['installer-env']) {
    const name = entry.slice(0, entry.indexOf('='));
    const problem = entry.includes('=') ? installerEnvNameProblem(name) : 'is not NAME=VALUE';
    if (problem) throw new Error(`--installer-env: ${entry.includes('=') ? problem : `"${entry}" ${problem}`}`);
  }
  return { values, repeated };
}

/** NAME=VALUE entries as Kubernetes env entries. */
function installerEnv(entries: string[]): { name: string; value: string }[] {
  return entries.map(entry => ({ name: entry.slice(0, entry.indexOf('=')), value: entry.slice(entry.indexOf('=') + 1) }));
}

function listen(address: string, handler: http.RequestListener): Promise<http.Server> {
  const i = address.lastIndexOf(':');
  const host = address.slice(0, i) || undefined;
  const port = Number(address.slice(i + 1));
  const server = http.createServer(handler);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

async function main(): Promise<void> {
  const parsed = parseFlags(process.argv.slice(2));
  if (parsed === 'help') {
    process.stdout.write(helpText() + '\n');
    return;
  }
  const flags = parsed.values;
  const log = new Logger(flags['log-format'] === 'json');
  const config = new KubeConfig();
  if (flags.kubeconfig) config.loadFromFile(flags.kubeconfig);
  else config.loadFromCluster();
  const metrics = new Metrics();
  const kube = new Kube(config, verb => metrics.apiWrites.inc({ verb }));
  const controller = new Controller(kube, {
    namespace: flags.namespace,
    image: flags['installer-image'],
    pullPolicy: flags['installer-image-pull-policy'],
    ttlSeconds: Number(flags['job-ttl-seconds']),
    defaultRestartMode: flags['default-restart-mode'],
    defaultRestartCommand: flags['default-restart-command'],
    installerEnv: installerEnv(parsed.repeated['installer-env']),
    workers: Number(flags.workers),
    resyncSeconds: Number(flags['resync-seconds']),
  }, log, metrics);

  const servers = [
    await listen(flags['health-probe-bind-address'], (req, res) => {
      const ready = controller.ready || !leading; // a standby waiting for the lease is ready too
      if (req.url === '/healthz') res.writeHead(200).end('ok');
      else if (req.url === '/readyz') res.writeHead(ready ? 200 : 503).end(ready ? 'ok' : 'syncing');
      else res.writeHead(404).end();
    }),
    await listen(flags['metrics-bind-address'], (req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      metrics.queueDepth.set(controller.queue.depth);
      void metrics.registry.metrics().then(text => res.writeHead(200, { 'Content-Type': metrics.registry.contentType }).end(text));
    }),
  ];

  let leading = false;
  const elector = flags['leader-elect'] === 'true'
    ? new LeaderElector(kube, { namespace: flags.namespace, name: 'rcm-controller', identity: flags.identity, durationSeconds: Number(flags['lease-duration-seconds']) }, log)
    : undefined;
  let stopping = false;
  const shutdown = async (code: number) => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down');
    await controller.stop();
    if (leading) await elector?.release();
    for (const s of servers) s.close();
    process.exit(code);
  };
  process.on('SIGTERM', () => void shutdown(0));
  process.on('SIGINT', () => void shutdown(0));

  if (elector) {
    log.info('waiting for the lease', { identity: flags.identity });
    await elector.acquire();
    elector.keepRenewing(() => {
      log.error('lost the lease: stepping down');
      void shutdown(1);
    });
  }
  leading = true;
  metrics.leader.set(1);
  await controller.start();
  log.info('controller started', { namespace: flags.namespace, identity: flags.identity });
}

main().catch(e => {
  process.stderr.write(`rcm-controller: ${(e as Error).message}\n`);
  process.exit(2);
});
