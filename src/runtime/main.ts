import * as http from 'http';
import { Controller } from './controller';
import { helpText, parseArgs } from './flags';
import { LeaderElector } from './leader';
import { Metrics } from './metrics';
import { Kube, TokenBucket } from '../shared/kube/kube';
import { inClusterAccess, kubeconfigAccess } from '../shared/kube/kube-config';
import { Logger } from '../shared/log';

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
  const parsed = parseArgs(process.argv.slice(2));
  if (parsed === 'help') {
    process.stdout.write(helpText() + '\n');
    return;
  }
  const flags = parsed.values;
  const log = new Logger(flags['log-format'] === 'json');
  const config = flags.kubeconfig ? kubeconfigAccess(flags.kubeconfig) : inClusterAccess();
  const metrics = new Metrics();
  const countWrite = (verb: string) => metrics.apiWrites.inc({ verb });
  const kube = new Kube(config, countWrite, new TokenBucket(Number(flags['kube-api-qps']), Number(flags['kube-api-burst'])));
  // The Lease has a client of its own: a backlog of rollout writes must not delay its renewal.
  const leaseKube = new Kube(config, countWrite);
  const controller = new Controller(kube, {
    // Everything the controller does in a namespace concerns installer Jobs, but the Lease.
    namespace: flags['installer-namespace'] || flags.namespace,
    image: flags['installer-image'],
    pullPolicy: flags['installer-image-pull-policy'],
    ttlSeconds: Number(flags['job-ttl-seconds']),
    defaultRestartMode: flags['default-restart-mode'],
    defaultRestartCommand: flags['default-restart-command'],
    installerEnv: parsed.installerEnv,
    imagePullSecrets: parsed.imagePullSecrets,
    installMode: flags['install-mode'] as 'jobs' | 'agent',
    workers: Number(flags.workers),
    resyncSeconds: Number(flags['resync-seconds']),
    retry: {
      baseSeconds: Number(flags['retry-base-seconds']),
      maxSeconds: Number(flags['retry-max-seconds']),
      failureThreshold: Number(flags['failure-threshold']),
    },
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
    ? new LeaderElector(leaseKube, { namespace: flags.namespace, name: 'rcm-controller', identity: flags.identity, durationSeconds: Number(flags['lease-duration-seconds']) }, log)
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
