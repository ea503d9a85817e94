import * as fs from 'fs';
import { NodeAgent } from './node-agent';
import { forgetCompileCache, thisPlatform } from '../installer/process-env';
import { FlagError, FlagSpec, parseFlags, wholeNumber } from '../shared/flags';
import { Kube } from '../shared/kube/kube';
import { inClusterAccess, kubeconfigAccess } from '../shared/kube/kube-config';
import { Logger } from '../shared/log';

const FLAGS: FlagSpec[] = [
  { name: 'node-name', arg: 'NAME', help: 'the node this agent serves (default: $NODE_NAME, from the pod\'s spec.nodeName)' },
  { name: 'namespace', arg: 'NAME', help: "the namespace of the nodes' requests ConfigMaps (default: $POD_NAMESPACE, else the pod's own)" },
  { name: 'kubeconfig', arg: 'FILE', help: 'kubeconfig file (default: in-cluster config)' },
  { name: 'drift-check-seconds', arg: 'N', help: 'how often installed handlers are checked for drift; 0: never (default 60)' },
  { name: 'progress-report-seconds', arg: 'N', help: 'a request still under way after N seconds is reported running; one done sooner gets its outcome only (default 10)' },
  { name: 'platform', arg: 'OS/ARCH', help: "the node's platform (default: this machine's)" },
  { name: 'log-format', arg: 'FORMAT', help: 'json or text (default json)' },
  { name: 'help', help: 'show this help' },
];

function helpText(): string {
  return ['Usage: rcm-node-agent [flags] [-- installer flags]', '',
    'Carries out the operations the controller admitted on this node (install mode NodeAgent),',
    'all at once with one containerd restart, reports each into the node record, and repairs drift.',
    'Installer flags after -- apply to every run (e.g. --host-root, --install-root, --restart).', '',
    'Flags:',
    ...FLAGS.map(f => `  --${f.name}${f.arg ? ` ${f.arg}` : ''}`.padEnd(34) + f.help)].join('\n');
}

/** The namespace of the pod this runs in, from its service account's token mount. */
function ownNamespace(): string | undefined {
  try {
    return fs.readFileSync('/var/run/secrets/kubernetes.io/serviceaccount/namespace', 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const split = argv.indexOf('--');
  const own = split >= 0 ? argv.slice(0, split) : argv;
  const installerArgs = split >= 0 ? argv.slice(split + 1) : [];
  let log = new Logger(true);
  const parsed = parseFlags(FLAGS, own, {});
  if (parsed === 'help') {
    process.stdout.write(helpText() + '\n');
    return 0;
  }
  if (parsed.positional.length > 0) throw new FlagError(`unknown argument ${parsed.positional[0]} (see --help)`);
  log = new Logger((parsed.single['log-format'] ?? 'json') === 'json');
  const nodeName = parsed.single['node-name'] ?? process.env.NODE_NAME;
  if (!nodeName) throw new FlagError('--node-name (or NODE_NAME) is required');
  forgetCompileCache();
  const kube = new Kube(parsed.single.kubeconfig ? kubeconfigAccess(parsed.single.kubeconfig) : inClusterAccess());
  const namespace = parsed.single.namespace ?? process.env.POD_NAMESPACE ?? ownNamespace();
  if (!namespace) throw new FlagError('--namespace (or POD_NAMESPACE) is required outside a pod');
  const agent = new NodeAgent(kube, {
    nodeName,
    namespace,
    // The agent gathers a node's requests itself and starts them together (node-agent.ts): the
    // installers' own gather window, for Jobs that start apart, would only delay each change.
    installerArgs: ['--host-root=/host', '--json-logs', '--set-gather=0', ...installerArgs],
    platform: parsed.single.platform ?? thisPlatform(),
    driftCheckSeconds: wholeNumber(parsed.single['drift-check-seconds'], 'drift-check-seconds', 60, 0),
    progressReportSeconds: wholeNumber(parsed.single['progress-report-seconds'], 'progress-report-seconds', 10, 0),
  }, log);
  process.once('SIGTERM', () => {
    log.info('SIGTERM: finishing the changes under way, then stopping');
    void agent.stop().then(() => process.exit(0));
  });
  log.info('node agent starting', { node: nodeName });
  await agent.start();
  return 0;
}

main().then(code => process.exit(code), e => {
  process.stderr.write(`${(e as Error).message}\n`);
  process.exit(2);
});
