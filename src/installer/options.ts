import { HandlerSettings } from './containerd-config';
import { badInput } from './errors';
import { FlagError, FlagSpec, keyValues, parseFlags, wholeNumber } from '../shared/flags';
import { isAnnotationGlob, isDnsLabel, isRuntimeType, isSha256, isSnapshotterName, runtimeOptionKeyProblem } from '../shared/validation';

export type Command = 'install' | 'uninstall' | 'status';
export type RestartMode = 'systemd' | 'command' | 'none';
/** The node's runtime distribution: containerd in one of its layouts, or CRI-O (crio-node.ts). */
export type Distro = 'containerd' | 'k3s' | 'rke2' | 'k0s' | 'microk8s' | 'crio';
export const DISTROS: Distro[] = ['containerd', 'k3s', 'rke2', 'k0s', 'microk8s', 'crio'];

export interface InstallerOptions {
  readonly command: Command;
  readonly hostRoot: string;
  /** The host process whose namespaces host commands enter (nsenter --target). */
  readonly hostPid: number;
  readonly handler: string;
  readonly shimName: string;
  readonly location?: string;
  readonly platformLocations: Record<string, string>;
  /** The artifact is a file here (copied out of an image by an init container), not a download. */
  readonly artifactFile?: string;
  /** Where that file came from (image and path), for messages and the record. */
  readonly artifactOrigin?: string;
  readonly sha256?: string;
  readonly runtimeOptions: Record<string, string>;
  /**
   * The artifact is a payload of several files: the path of the shim inside it. Options may
   * name files of the installed payload as `${PAYLOAD}/...`.
   */
  readonly payloadShim?: string;
  /** runtime_type as a name (e.g. io.containerd.runc.v2), the shim given as runtime_path. */
  readonly runtimeType?: string;
  /** containerd's handler-level fields beside the options. */
  readonly handlerSettings: HandlerSettings;
  readonly config?: string;
  readonly distro?: Distro;
  readonly restart: RestartMode;
  readonly restartCommand?: string;
  readonly installRoot: string;
  readonly resultFile: string;
  readonly jsonLogs: boolean;
  readonly socket?: string;
  readonly platform: string;
  readonly maxSizeBytes: number;
  /** The most an archive may unpack to, in bytes and in entries. */
  readonly maxExtractedBytes: number;
  readonly maxFiles: number;
  readonly healthTimeoutSeconds: number;
  /** How long a written change waits for the other installers on the node to add theirs before containerd restarts. */
  readonly setWaitSeconds: number;
  /** How long a written change waits for other installers even when none is seen yet (they start a moment apart). */
  readonly setGatherSeconds: number;
  readonly downloadTimeoutSeconds: number;
  readonly retries: number;
}

export const FLAGS: FlagSpec[] = [
  { name: 'host-root', arg: 'DIR', help: "where the host's / is mounted (default /)" },
  { name: 'host-pid', arg: 'PID', help: "host process whose namespaces host commands enter through nsenter when --host-root is not / (default 1, the host's init)" },
  { name: 'handler', arg: 'NAME', help: 'runtime handler name in containerd and the RuntimeClass (DNS label; required)' },
  { name: 'shim-name', arg: 'NAME', help: 'NAME in the binary containerd-shim-NAME-vN (default: the handler)' },
  { name: 'location', arg: 'URL', help: 'artifact URL (.tar.gz or bare binary) for any platform' },
  { name: 'platform-location', arg: 'OS/ARCH=URL', repeat: true, help: 'artifact URL for one platform (repeatable; wins over --location)' },
  { name: 'artifact-file', arg: 'PATH', help: 'the artifact is this local file (e.g. copied out of an image by an init container) instead of a download' },
  { name: 'artifact-origin', arg: 'TEXT', help: 'where --artifact-file came from (an image and path), for messages and the record' },
  { name: 'sha256', arg: 'HEX', help: 'expected sha256 of the artifact (strongly recommended)' },
  { name: 'runtime-option', arg: 'KEY=VALUE', repeat: true, help: "option for the handler's options table (repeatable); ${PAYLOAD} in a value is the installed payload's folder" },
  { name: 'payload-shim', arg: 'PATH', help: 'the artifact is a payload of several files (.tar.gz) installed as one folder; PATH is its shim, relative to the payload' },
  { name: 'runtime-type', arg: 'NAME', help: "runtime_type as a name (e.g. io.containerd.runc.v2), the shim then given as runtime_path: containerd passes that type's options" },
  { name: 'pod-annotation', arg: 'GLOB', repeat: true, help: 'pod annotations passed to the runtime (pod_annotations; repeatable)' },
  { name: 'container-annotation', arg: 'GLOB', repeat: true, help: 'container annotations passed to the runtime (container_annotations; repeatable)' },
  { name: 'privileged-without-host-devices', arg: 'BOOL', help: "privileged pods of this handler do not get the host's devices (true or false)" },
  { name: 'snapshotter', arg: 'NAME', help: "snapshotter of this handler's containers (containerd 1.7 and later)" },
  { name: 'config', arg: 'PATH', help: "containerd config (on CRI-O: the installer's own drop-in), relative to the host root (default: detected per distribution)" },
  { name: 'distro', arg: 'NAME', help: `the node's runtime: ${DISTROS.join(', ')} (a containerd distribution, or crio for CRI-O; default: detected)` },
  { name: 'restart', arg: 'MODE', help: 'systemd (default), command or none' },
  { name: 'restart-command', arg: 'CMD', help: 'host command that restarts containerd (--restart command)' },
  { name: 'install-root', arg: 'PATH', help: 'where shims, state and backups live on the host (default /opt/rcm)' },
  { name: 'result-file', arg: 'PATH', help: 'where the JSON result is written (default /dev/termination-log)' },
  { name: 'socket', arg: 'PATH', help: "containerd's (or CRI-O's) socket on the host (default: per distribution)" },
  { name: 'platform', arg: 'OS/ARCH', help: "the node's platform (default: this machine's)" },
  { name: 'max-size', arg: 'BYTES', help: 'largest artifact accepted (default 268435456)' },
  { name: 'max-extracted-size', arg: 'BYTES', help: 'most a .tar.gz artifact may unpack to (default 1073741824)' },
  { name: 'max-files', arg: 'N', help: 'most entries a .tar.gz artifact may hold (default 1000)' },
  { name: 'health-timeout', arg: 'SECONDS', help: 'how long to wait for containerd after a restart (default 60)' },
  { name: 'set-gather', arg: 'SECONDS', help: 'how long a written change waits for installers that start a moment later (a wave of Jobs is created one reconcile apart) before containerd restarts (default 3)' },
  { name: 'set-wait', arg: 'SECONDS', help: 'how long a written change waits for the other installers running on the node to add theirs, so that containerd restarts once for all (default 15)' },
  { name: 'download-timeout', arg: 'SECONDS', help: 'most one download attempt may take in all, connecting included (default 120)' },
  { name: 'retries', arg: 'N', help: 'download attempts after the first (default 3)' },
  { name: 'json-logs', help: 'log JSON lines on stderr' },
  { name: 'help', help: 'show this help' },
];

/** The package version, set by the bundler (the images are released with it); unset when not bundled. */
declare const RCM_VERSION: string | undefined;

export function helpText(): string {
  const lines = FLAGS.map(f => `  --${f.name}${f.arg ? ' ' + f.arg : ''} `.padEnd(38) + f.help);
  return [
    `rcm-node-installer ${typeof RCM_VERSION === 'string' ? RCM_VERSION : '(unversioned build)'}`,
    'Usage: rcm-node-installer install|uninstall|status [flags]',
    '',
    'Installs a containerd shim on this node and registers it as a runtime handler,',
    'restarting containerd and rolling back if it does not come back.',
    '',
    'Flags (each also read from RCM_<FLAG_IN_UPPER_SNAKE_CASE>, flags win):',
    ...lines,
    '',
    'Exit codes: 0 success, 2 bad input, 3 download or verification failed, 4 containerd',
    '(CRI-O) config failed, 5 restart failed and rolled back, 6 restart failed and NOT rolled',
    "back, 7 the runtime's systemd unit (containerd, crio) was already failed (nothing changed),",
    '143 stopped by SIGTERM before anything on the host changed.',
  ].join('\n');
}


/** Parses flags (and RCM_* environment variables) into validated options. */
export function parseOptions(argv: string[], env: NodeJS.ProcessEnv, defaultPlatform: string): InstallerOptions | 'help' {
  try {
    return validated(argv, env, defaultPlatform);
  } catch (e) {
    throw e instanceof FlagError ? badInput(e.message) : e;
  }
}

function validated(argv: string[], env: NodeJS.ProcessEnv, defaultPlatform: string): InstallerOptions | 'help' {
  const flags = parseFlags(FLAGS, argv, env);
  if (flags === 'help') return 'help';
  const { single, repeated, positional } = flags;

  const command = positional[0];
  if (command !== 'install' && command !== 'uninstall' && command !== 'status') {
    throw badInput(`expected a command (install, uninstall or status), got ${command === undefined ? 'none' : `"${command}"`}`);
  }
  if (positional.length > 1) throw badInput(`unexpected arguments: ${positional.slice(1).join(' ')}`);

  const handler = single.handler;
  if (!handler) throw badInput('--handler is required');
  if (!isDnsLabel(handler)) throw badInput(`--handler: "${handler}" is not a DNS label (lowercase letters, digits and '-', at most 63 characters)`);
  const shimName = single['shim-name'] ?? handler;
  if (!isDnsLabel(shimName)) throw badInput(`--shim-name: "${shimName}" is not a DNS label`);

  const platformLocations = keyValues(repeated['platform-location'] ?? [], 'platform-location');
  for (const key of Object.keys(platformLocations)) {
    if (!/^[a-z0-9]+\/[a-z0-9_]+$/.test(key)) throw badInput(`--platform-location: "${key}" is not OS/ARCH`);
  }
  const urls = [single.location, ...Object.values(platformLocations)].filter((u): u is string => u !== undefined);
  for (const url of urls) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw badInput(`artifact location "${url}" is not a valid URL`);
    }
    if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') throw badInput(`artifact location "${url}" must be http(s)`);
  }
  const artifactFile = single['artifact-file'];
  if (artifactFile !== undefined && (!artifactFile.startsWith('/') || artifactFile.split('/').includes('..'))) {
    throw badInput(`--artifact-file: "${artifactFile}" must be an absolute path without '..'`);
  }
  if (artifactFile !== undefined && urls.length > 0) throw badInput('--artifact-file: give either a file or download locations, not both');
  if (command === 'install' && urls.length === 0 && artifactFile === undefined) throw badInput('install needs --location, --platform-location or --artifact-file');
  const sha256 = single.sha256?.toLowerCase();
  if (sha256 !== undefined && !isSha256(sha256)) throw badInput(`--sha256: "${single.sha256}" is not 64 hex digits`);

  const runtimeOptions = keyValues(repeated['runtime-option'] ?? [], 'runtime-option');
  for (const key of Object.keys(runtimeOptions)) {
    const problem = runtimeOptionKeyProblem(key);
    if (problem) throw badInput(`--runtime-option: ${problem}`);
  }
  const payloadShim = single['payload-shim'];
  if (payloadShim !== undefined && (payloadShim === '' || payloadShim.startsWith('/') || payloadShim.split('/').some(p => p === '..' || p === '.' || p === ''))) {
    throw badInput(`--payload-shim: "${payloadShim}" must be a relative path inside the payload, without '.', '..' or empty parts`);
  }
  for (const [key, value] of Object.entries(runtimeOptions)) {
    if (/[\u0000-\u001f\u007f]/.test(value)) throw badInput(`--runtime-option: the value of "${key}" holds a control character (a newline would be read as another option)`);
    if (value.includes('${PAYLOAD}') && payloadShim === undefined) {
      throw badInput(`--runtime-option: "${key}" refers to \${PAYLOAD}, which only a payload (--payload-shim) has`);
    }
  }
  const runtimeType = single['runtime-type'];
  if (runtimeType !== undefined && !isRuntimeType(runtimeType)) {
    throw badInput(`--runtime-type: "${runtimeType}" is not a runtime type name such as io.containerd.runc.v2`);
  }
  const handlerSettings = parseHandlerSettings(single, repeated);
  const distro = single.distro as Distro | undefined;
  if (distro !== undefined && !DISTROS.includes(distro)) throw badInput(`--distro: "${distro}" is not one of ${DISTROS.join(', ')}`);
  const restart = (single.restart ?? 'systemd') as RestartMode;
  if (!['systemd', 'command', 'none'].includes(restart)) throw badInput(`--restart: "${restart}" is not systemd, command or none`);
  if (restart === 'command' && !single['restart-command']) throw badInput('--restart command needs --restart-command');
  const platform = single.platform ?? defaultPlatform;
  if (!/^[a-z0-9]+\/[a-z0-9_]+$/.test(platform)) throw badInput(`--platform: "${platform}" is not OS/ARCH`);
  for (const flag of ['host-root', 'install-root', 'config', 'socket', 'result-file']) {
    const value = single[flag];
    if (value !== undefined && (!value.startsWith('/') || value.split('/').includes('..'))) {
      throw badInput(`--${flag}: "${value}" must be an absolute path without '..'`);
    }
  }

  const hostPid = single['host-pid'] ?? '1';
  if (!/^[1-9][0-9]*$/.test(hostPid)) throw badInput(`--host-pid: "${hostPid}" is not a process id`);

  return {
    command,
    hostRoot: single['host-root'] ?? '/',
    hostPid: Number(hostPid),
    handler,
    shimName,
    location: single.location,
    platformLocations,
    artifactFile,
    artifactOrigin: single['artifact-origin'],
    sha256,
    runtimeOptions,
    payloadShim,
    runtimeType,
    handlerSettings,
    config: single.config,
    distro,
    restart,
    restartCommand: single['restart-command'],
    installRoot: single['install-root'] ?? '/opt/rcm',
    resultFile: single['result-file'] ?? '/dev/termination-log',
    jsonLogs: single['json-logs'] === 'true',
    socket: single.socket,
    platform,
    maxSizeBytes: wholeNumber(single['max-size'], 'max-size', 256 * 1024 * 1024),
    maxExtractedBytes: wholeNumber(single['max-extracted-size'], 'max-extracted-size', 1024 * 1024 * 1024),
    maxFiles: wholeNumber(single['max-files'], 'max-files', 1000),
    healthTimeoutSeconds: wholeNumber(single['health-timeout'], 'health-timeout', 60),
    setWaitSeconds: wholeNumber(single['set-wait'], 'set-wait', 15, 0),
    setGatherSeconds: wholeNumber(single['set-gather'], 'set-gather', 3, 0),
    downloadTimeoutSeconds: wholeNumber(single['download-timeout'], 'download-timeout', 120),
    retries: wholeNumber(single.retries, 'retries', 3, 0),
  };
}

/** The artifact URL for this node's platform: an exact platform entry wins over --location. */
export function artifactFor(options: InstallerOptions): string {
  const url = options.platformLocations[options.platform] ?? options.location;
  if (!url) {
    throw badInput(`no artifact for platform ${options.platform} (have: ${Object.keys(options.platformLocations).join(', ') || 'none'})`);
  }
  return url;
}

/** containerd's handler-level fields, checked: each becomes a TOML value, never TOML text. */
function parseHandlerSettings(single: Record<string, string>, repeated: Record<string, string[]>): HandlerSettings {
  const globs = (flag: string): string[] | undefined => {
    const values = repeated[flag];
    for (const v of values ?? []) {
      if (!isAnnotationGlob(v)) throw badInput(`--${flag}: "${v}" is not an annotation key or a glob of keys (letters, digits, '-', '_', '.', '/', '*')`);
    }
    return values && values.length > 0 ? values : undefined;
  };
  const privileged = single['privileged-without-host-devices'];
  if (privileged !== undefined && privileged !== 'true' && privileged !== 'false') {
    throw badInput(`--privileged-without-host-devices: "${privileged}" is not true or false`);
  }
  const snapshotter = single.snapshotter;
  if (snapshotter !== undefined && !isSnapshotterName(snapshotter)) {
    throw badInput(`--snapshotter: "${snapshotter}" is not a snapshotter name (lowercase letters, digits, '-', '_', '.')`);
  }
  const settings: HandlerSettings = {
    podAnnotations: globs('pod-annotation'),
    containerAnnotations: globs('container-annotation'),
    privilegedWithoutHostDevices: privileged === undefined ? undefined : privileged === 'true',
    snapshotter,
  };
  return Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined));
}
