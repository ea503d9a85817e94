// The controller-installer contract: what one installer run is asked to do, in one place.
//
// The controller renders a request as the environment of the installer's pod (each flag of
// the installer is also read from RCM_<FLAG>); the installer reads it back with its flag
// parser. The names the controller sets are derived from here, and so is the list of names
// a cluster-wide `--installer-env` may not set (it would fight the Shim's own values).
import { envName } from './flags';

/** One operation of one handler on one node, as the controller asks it of the installer. */
export interface InstallerRequest {
  readonly command: 'install' | 'uninstall';
  readonly handler: string;
  /** systemd, command or none. */
  readonly restart: string;
  readonly restartCommand?: string;
  /** The artifact's URL (a download). */
  readonly location?: string;
  /** The artifact as a file in the installer's pod (copied out of an image), and where it came from. */
  readonly artifactFile?: string;
  readonly artifactOrigin?: string;
  readonly sha256?: string;
  readonly runtimeOptions?: Readonly<Record<string, string>>;
  readonly payloadShim?: string;
  readonly runtimeType?: string;
  readonly podAnnotations?: readonly string[];
  readonly containerAnnotations?: readonly string[];
  readonly privilegedWithoutHostDevices?: boolean;
  readonly snapshotter?: string;
}

/** The installer flag behind each field of a request (the command is the pod's argument). */
const FLAG_OF = {
  handler: 'handler',
  restart: 'restart',
  restartCommand: 'restart-command',
  location: 'location',
  artifactFile: 'artifact-file',
  artifactOrigin: 'artifact-origin',
  sha256: 'sha256',
  runtimeOptions: 'runtime-option',
  payloadShim: 'payload-shim',
  runtimeType: 'runtime-type',
  podAnnotations: 'pod-annotation',
  containerAnnotations: 'container-annotation',
  privilegedWithoutHostDevices: 'privileged-without-host-devices',
  snapshotter: 'snapshotter',
} as const satisfies Record<Exclude<keyof InstallerRequest, 'command'>, string>;

/** Where the installer's pod mounts the host's / (the Job's hostPath volume). */
export const POD_HOST_ROOT = '/host';

/** Flags the controller sets for every run besides the request's own. */
const FIXED = { 'host-root': POD_HOST_ROOT, 'json-logs': 'true' } as const;

/**
 * Installer variables that `--installer-env` may not set: every one the controller sets from
 * a Shim or its own restart flags, and those that only make sense per Shim (the shim's name,
 * per-platform locations, the result file the controller reads).
 */
export const RESERVED_INSTALLER_ENV: readonly string[] = [
  ...Object.keys(FIXED), ...Object.values(FLAG_OF), 'shim-name', 'platform-location', 'result-file',
].map(envName);

/** The request as the installer pod's environment (lists one value per line, as the installer reads them). */
export function toEnv(request: InstallerRequest): { name: string; value: string }[] {
  const env: { name: string; value: string }[] = Object.entries(FIXED).map(([flag, value]) => ({ name: envName(flag), value }));
  for (const [field, flag] of Object.entries(FLAG_OF) as [keyof typeof FLAG_OF, string][]) {
    const value = request[field];
    if (value === undefined) continue;
    let text: string;
    if (Array.isArray(value)) text = value.join('\n');
    else if (typeof value === 'object') text = Object.entries(value as Record<string, string>).map(([k, v]) => `${k}=${v}`).join('\n');
    else text = String(value);
    if (text !== '') env.push({ name: envName(flag), value: text });
  }
  return env;
}

/** The request an installer pod's environment carries (the inverse of toEnv, for tests and tools). */
export function fromEnv(command: InstallerRequest['command'], env: Readonly<Record<string, string | undefined>>): InstallerRequest {
  const get = (field: keyof typeof FLAG_OF) => env[envName(FLAG_OF[field])];
  const lines = (field: keyof typeof FLAG_OF) => get(field)?.split('\n').filter(Boolean);
  const options = lines('runtimeOptions');
  const privileged = get('privilegedWithoutHostDevices');
  const request: Record<string, unknown> = {
    command,
    handler: get('handler') ?? '',
    restart: get('restart') ?? 'systemd',
    restartCommand: get('restartCommand'),
    location: get('location'),
    artifactFile: get('artifactFile'),
    artifactOrigin: get('artifactOrigin'),
    sha256: get('sha256'),
    runtimeOptions: options && Object.fromEntries(options.map(l => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)])),
    payloadShim: get('payloadShim'),
    runtimeType: get('runtimeType'),
    podAnnotations: lines('podAnnotations'),
    containerAnnotations: lines('containerAnnotations'),
    privilegedWithoutHostDevices: privileged === undefined ? undefined : privileged === 'true',
    snapshotter: get('snapshotter'),
  };
  return Object.fromEntries(Object.entries(request).filter(([, v]) => v !== undefined)) as unknown as InstallerRequest;
}
