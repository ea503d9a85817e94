// The controller's flags: the table its --help and docs/operators/flags.md are made from, and
// their parsing into checked values. RuntimeClassManager renders these flags from its props;
// test/constructs/controller-args.test.ts parses what it renders with this module.
import * as crypto from 'crypto';
import * as os from 'os';
import { FlagError, FlagSpec, keyValues, parseFlags, wholeNumber } from '../shared/flags';
import { installerEnvNameProblem, isDnsLabel, isDnsSubdomain } from '../shared/validation';

/** The package version, set by the bundler (the images are released with it). */
declare const RCM_VERSION: string | undefined;
const VERSION = typeof RCM_VERSION === 'string' ? RCM_VERSION : '0.0.0';

/** A flag of the controller: every one takes a value, most have a default. */
interface Flag extends FlagSpec {
  readonly default?: string;
}

export const FLAGS: Flag[] = [
  { name: 'kubeconfig', arg: 'FILE', help: 'kubeconfig file (default: in-cluster config)' },
  { name: 'namespace', arg: 'NAME', help: 'namespace of the controller (its Lease) and, by default, of its installer Jobs', default: process.env.POD_NAMESPACE ?? 'runtime-class-manager' },
  { name: 'installer-namespace', arg: 'NAME', help: 'namespace of the installer Jobs, their pods and pull secrets, and of the node agent pods (default: --namespace)' },
  { name: 'installer-image', arg: 'IMAGE', help: 'node installer image', default: `ghcr.io/runtime-class-manager-cdk8s/rcm-node-installer:${VERSION}` },
  { name: 'installer-image-pull-policy', arg: 'POLICY', help: 'Always, IfNotPresent or Never', default: 'IfNotPresent' },
  { name: 'installer-image-pull-secret', arg: 'NAME', help: 'a Secret in the installer namespace that installer pods pull their images with (repeatable)', repeat: true },
  { name: 'leader-elect', arg: 'BOOL', help: 'elect one active replica through a Lease', default: 'true' },
  { name: 'lease-duration-seconds', arg: 'N', help: 'how long a leader holds the Lease without renewing', default: '15' },
  // A new identity per process, as client-go's (host_uuid): a container the kubelet restarts
  // keeps its pod's name, and must not take over the lease its killed predecessor held as if
  // it were still that process; it waits for the lease like any other replica.
  { name: 'identity', arg: 'NAME', help: 'this replica in the Lease (default: the pod\'s name, _ and a suffix of this process)', default: `${process.env.POD_NAME ?? os.hostname()}_${crypto.randomBytes(4).toString('hex')}` },
  { name: 'metrics-bind-address', arg: 'ADDR', help: 'address of /metrics', default: ':8080' },
  { name: 'health-probe-bind-address', arg: 'ADDR', help: 'address of /healthz and /readyz', default: ':8081' },
  { name: 'log-format', arg: 'FORMAT', help: 'json or text', default: 'json' },
  { name: 'install-mode', arg: 'MODE', help: 'how operations reach the nodes: jobs (an installer Job per node and operation) or agent (requests in each node\'s requests ConfigMap, carried out by each node\'s rcm-node-agent)', default: 'jobs' },
  { name: 'default-restart-mode', arg: 'MODE', help: 'how installers restart containerd when a Shim does not say: systemd, command, none', default: 'systemd' },
  { name: 'default-restart-command', arg: 'CMD', help: 'the host command for --default-restart-mode=command' },
  { name: 'installer-env', arg: 'NAME=VALUE', help: 'a variable added to every installer pod\'s environment (repeatable)', repeat: true },
  { name: 'job-ttl-seconds', arg: 'N', help: 'how long finished installer Jobs are kept', default: '3600' },
  { name: 'retry-base-seconds', arg: 'N', help: 'delay before retrying a node whose install or uninstall failed; doubled after each failure', default: '30' },
  { name: 'retry-max-seconds', arg: 'N', help: 'longest delay between two attempts on a node', default: '900' },
  { name: 'failure-threshold', arg: 'N', help: 'failed attempts after which a node counts as failed (Degraded; the rollout stops)', default: '3' },
  { name: 'kube-api-qps', arg: 'N', help: 'requests per second to the API server, sustained (client-side rate limit; leader election is not limited)', default: '50' },
  { name: 'kube-api-burst', arg: 'N', help: 'requests to the API server in a burst', default: '100' },
  { name: 'workers', arg: 'N', help: 'Shims reconciled in parallel', default: '4' },
  { name: 'resync-seconds', arg: 'N', help: 'period of the full resync', default: '30' },
  { name: 'help', help: 'show this help' },
];

export function helpText(): string {
  return ['Usage: rcm-controller [flags]', '', 'Reconciles Shims into installed nodes, RuntimeClasses and status.', '',
    'Flags (each also read from RCM_<FLAG_IN_UPPER_SNAKE_CASE>; flags win):',
    ...FLAGS.map(f => `  --${f.name}${f.arg ? ` ${f.arg}` : ''}`.padEnd(44) + f.help + (f.default !== undefined ? ` (default ${f.default})` : ''))].join('\n');
}

export interface Flags {
  readonly values: Record<string, string>;
  /** --installer-env, as Kubernetes env entries. */
  readonly installerEnv: { name: string; value: string }[];
  /** --installer-image-pull-secret, in order. */
  readonly imagePullSecrets: string[];
}

/** The flags of `argv` over the RCM_* variables of `env`, with their defaults, checked; 'help' when --help is given. */
export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): Flags | 'help' {
  const parsed = parseFlags(FLAGS, argv, env);
  if (parsed === 'help') return 'help';
  if (parsed.positional.length > 0) throw new FlagError(`unknown argument ${parsed.positional[0]} (see --help)`);
  const values: Record<string, string> = {};
  for (const f of FLAGS) {
    const value = parsed.single[f.name] ?? f.default;
    if (value !== undefined) values[f.name] = value;
  }
  for (const n of ['lease-duration-seconds', 'job-ttl-seconds', 'workers', 'resync-seconds', 'retry-base-seconds', 'retry-max-seconds', 'failure-threshold',
    'kube-api-qps', 'kube-api-burst']) {
    wholeNumber(values[n], n, 1);
  }
  if (!['systemd', 'command', 'none'].includes(values['default-restart-mode'])) throw new Error(`--default-restart-mode: "${values['default-restart-mode']}" is not systemd, command or none`);
  if (!['jobs', 'agent'].includes(values['install-mode'])) throw new Error(`--install-mode: "${values['install-mode']}" is not jobs or agent`);
  if (values['default-restart-mode'] === 'command' && !values['default-restart-command']) throw new Error('--default-restart-mode=command needs --default-restart-command');
  const installerEnv = Object.entries(keyValues(parsed.repeated['installer-env'] ?? [], 'installer-env')).map(([name, value]) => ({ name, value }));
  for (const { name } of installerEnv) {
    const problem = installerEnvNameProblem(name);
    if (problem) throw new Error(`--installer-env: ${problem}`);
  }
  if (values['installer-namespace'] !== undefined && !isDnsLabel(values['installer-namespace'])) {
    throw new Error(`--installer-namespace: "${values['installer-namespace']}" is not a namespace name`);
  }
  const imagePullSecrets = parsed.repeated['installer-image-pull-secret'] ?? [];
  for (const name of imagePullSecrets) {
    if (!isDnsSubdomain(name)) throw new Error(`--installer-image-pull-secret: "${name}" is not a Secret name`);
  }
  return { values, installerEnv, imagePullSecrets };
}
