// The installer's record of what it changed on a host (<install root>/state/<handler>.json).
//
// The record is a help, not a precondition: a file emptied by a full disk, cut short by a
// crash or edited by hand must not block every later command (an uninstall that fails holds
// the Shim's finalizer forever). An unusable record is reported and ignored; the installer
// then goes by what containerd's config itself shows (our delimited block and the binary it
// names).
import { CONFIG_VERSIONS, ConfigVersion, EditRecord, HandlerSettings } from './containerd-config';
import type { CrioKind } from './crio-config';

/** What this installer changed on the host, so that uninstall reverses exactly that. */
export type InstallState = ContainerdInstallState | CrioInstallState;

/** A record of a handler registered with containerd (the records older installers wrote). */
export interface ContainerdInstallState extends CommonInstallState {
  readonly runtime?: undefined;
  readonly configVersion: ConfigVersion;
  readonly edit: EditRecord;
}

/** A record of a handler registered with CRI-O, in a drop-in file of its own (crio-node.ts). */
export interface CrioInstallState extends CommonInstallState {
  readonly runtime: 'crio';
  readonly configVersion?: undefined;
  readonly edit?: undefined;
  readonly crio: {
    readonly kind: CrioKind;
    /** The handler's runtime_path (the shim for `vm`, the OCI runtime for `oci`). */
    readonly runtimePath: string;
    /** CRI-O's version lines when the handler was installed. */
    readonly build?: string;
  };
}

interface CommonInstallState {
  readonly handler: string;
  readonly shimName: string;
  readonly sha256: string;
  /** The installed binary's own sha256 (absent in records of older installers). */
  readonly binarySha256?: string;
  readonly location: string;
  /** Host path of the installed binary (also the handler's runtime_type). */
  readonly binary: string;
  /** The options the Shim asked for. */
  readonly runtimeOptions: Record<string, string>;
  /** Options taken from the node's config (the cgroup driver of its default runtime). */
  readonly inheritedOptions?: Record<string, string>;
  /** runtime_type as a name; `binary` is then the runtime_path. */
  readonly runtimeType?: string;
  /** containerd's handler-level fields as written. */
  readonly handlerSettings?: HandlerSettings;
  /** A payload install: the shim's path inside it, its folder (a host path) and content digest. */
  readonly payloadShim?: string;
  readonly payloadDir?: string;
  readonly payloadDigest?: string;
  readonly distro: string;
  /** Host path of the edited file. */
  readonly configFile: string;
  readonly configCreated: boolean;
  /** The folder of the edited file was made by this installer (a drop-in folder). */
  readonly configFolderCreated?: boolean;
  readonly installedAt: string;
  /**
   * containerd's `--version` line when the handler was installed or last verified (absent in
   * records of older installers): another one means containerd was replaced since, and the
   * handler is verified with it again before it counts as installed.
   */
  readonly containerdBuild?: string;
}

/** A state file's content: the record, or what is wrong with it (never both). */
export type ParsedState = { state: InstallState; problem?: undefined } | { state?: undefined; problem: string };

const STRING_FIELDS = ['handler', 'shimName', 'sha256', 'location', 'binary', 'distro', 'configFile'] as const;

/** Checks the text of `handler`'s state file; `file` names it in the problem. */
export function parseState(text: string, handler: string, file: string): ParsedState {
  if (text.trim() === '') return { problem: `the state file ${file} is empty` };
  let value: any;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { problem: `the state file ${file} is not valid JSON (${(e as Error).message})` };
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return { problem: `the state file ${file} does not hold a JSON object` };
  const missing = STRING_FIELDS.filter(f => typeof value[f] !== 'string');
  if (missing.length > 0) return { problem: `the state file ${file} lacks ${missing.join(', ')}` };
  if (value.handler !== handler) return { problem: `the state file ${file} is for handler "${value.handler}", not "${handler}"` };
  const crio = value.runtime === 'crio';
  if (crio && !(value.crio && ['vm', 'oci'].includes(value.crio.kind) && typeof value.crio.runtimePath === 'string')) {
    return { problem: `the state file ${file} is a CRI-O record without its handler (crio.kind, crio.runtimePath)` };
  }
  if (!crio && !CONFIG_VERSIONS.includes(value.configVersion)) return { problem: `the state file ${file} has no valid configVersion` };
  if (!value.binary.startsWith('/') || !value.configFile.startsWith('/')) return { problem: `the state file ${file} names relative paths` };
  const common = {
    ...value,
    runtimeOptions: isStringRecord(value.runtimeOptions) ? value.runtimeOptions : {},
    inheritedOptions: isStringRecord(value.inheritedOptions) ? value.inheritedOptions : undefined,
    binarySha256: typeof value.binarySha256 === 'string' ? value.binarySha256 : undefined,
    runtimeType: typeof value.runtimeType === 'string' ? value.runtimeType : undefined,
    handlerSettings: value.handlerSettings && typeof value.handlerSettings === 'object' && !Array.isArray(value.handlerSettings) ? value.handlerSettings : undefined,
    payloadShim: typeof value.payloadShim === 'string' ? value.payloadShim : undefined,
    payloadDir: typeof value.payloadDir === 'string' && value.payloadDir.startsWith('/') ? value.payloadDir : undefined,
    payloadDigest: typeof value.payloadDigest === 'string' ? value.payloadDigest : undefined,
    configCreated: value.configCreated === true,
    configFolderCreated: value.configFolderCreated === true,
  };
  if (crio) return { state: { ...common, runtime: 'crio', configVersion: undefined, edit: undefined, crio: value.crio } };
  return {
    state: {
      ...common,
      runtime: undefined,
      edit: {
        addedSeparator: value.edit?.addedSeparator === true,
        addedVersionLine: value.edit?.addedVersionLine === true,
      },
    },
  };
}

function isStringRecord(value: unknown): value is Record<string, string> {
  return !!value && typeof value === 'object' && !Array.isArray(value) && Object.values(value).every(v => typeof v === 'string');
}
