// Pure "config text in, config text out" transforms of containerd's configuration.
//
// The handler is added as a delimited block of TOML appended to the file, so comments,
// ordering, Go-template directives (k3s/rke2) and everything else stay byte for byte.
// Every edit is parsed with smol-toml before and after and must change exactly the one
// handler table; if appending cannot express that (for example the runtimes table is an
// inline table), the edit is refused rather than guessed.
import { createHash } from 'crypto';
import { parse, stringify } from 'smol-toml';

export type ConfigVersion = 1 | 2 | 3 | 4;
export const CONFIG_VERSIONS: ConfigVersion[] = [1, 2, 3, 4];

/** Where runtime handlers live, per config schema version (containerd 2.3's version 4 keeps 3's path). */
export const RUNTIMES_PATH: Record<ConfigVersion, string[]> = {
  1: ['plugins', 'cri', 'containerd', 'runtimes'],
  2: ['plugins', 'io.containerd.grpc.v1.cri', 'containerd', 'runtimes'],
  3: ['plugins', 'io.containerd.cri.v1.runtime', 'containerd', 'runtimes'],
  4: ['plugins', 'io.containerd.cri.v1.runtime', 'containerd', 'runtimes'],
};

export class ConfigError extends Error {}

export interface RuntimeEntry {
  /** The runtime handler (a DNS label, validated by the caller). */
  readonly handler: string;
  /**
   * runtime_type: the absolute path of the shim binary, or (with `runtimePath`) the name of
   * the runtime type the shim implements, e.g. `io.containerd.runc.v2`.
   */
  readonly runtimeType: string;
  /**
   * runtime_path: the shim binary when runtime_type is a name. containerd then hands the
   * options as that type's (runc's `BinaryName`, ...), where a path runtime_type gets them as
   * `runtimeoptions.v1.Options`, which runc-based shims refuse.
   */
  readonly runtimePath?: string;
  /** Values for the handler's options table. */
  readonly options: Record<string, string>;
  /** Handler-level settings runtimes such as Kata, gVisor or GPU runtimes set beside options. */
  readonly settings?: HandlerSettings;
}

/** containerd's per-handler fields beside runtime_type and options. */
export interface HandlerSettings {
  /** pod_annotations: pod annotations (globs) passed to the runtime. */
  readonly podAnnotations?: string[];
  /** container_annotations: container annotations (globs) passed to the runtime. */
  readonly containerAnnotations?: string[];
  /** privileged_without_host_devices: privileged pods do not get the host's devices. */
  readonly privilegedWithoutHostDevices?: boolean;
  /** snapshotter: the snapshotter of this handler's containers (containerd 1.7 and later). */
  readonly snapshotter?: string;
}

const TEMPLATE_LINE = /^\s*\{\{.*\}\}\s*$/;

/** The TOML part of a file; Go-template directive lines (k3s/rke2 templates) are blanked. */
export function tomlPart(text: string): string {
  return text.split('\n').map(line => (TEMPLATE_LINE.test(line) ? '' : line)).join('\n');
}

export function parseConfig(text: string, file = 'config'): Record<string, any> {
  try {
    return parse(tomlPart(text)) as Record<string, any>;
  } catch (e) {
    throw new ConfigError(`${file} is not valid TOML: ${(e as Error).message.split('\n')[0]}`);
  }
}

/**
 * The schema version a file is written in. A file without `version` is version 1 to
 * containerd; an empty (or missing) file takes the version of the running containerd.
 */
export function detectConfigVersion(text: string, containerdMajor?: number): ConfigVersion {
  const config = parseConfig(text);
  const declared = config.version;
  if (declared === undefined) {
    const meaningful = Object.keys(config).length > 0;
    if (meaningful) return 1;
    return containerdMajor !== undefined && containerdMajor >= 2 ? 3 : 2;
  }
  if (CONFIG_VERSIONS.includes(declared)) return declared;
  throw new ConfigError(`unsupported config version ${JSON.stringify(declared)} (expected 1, 2, 3 or 4)`);
}

/**
 * Whether adding a handler must also write out containerd's default runtimes: containerd
 * 1.x replaces its default runtimes map as soon as the config declares any runtime (2.x
 * merges). `effective` is the text containerd reads: for a k3s/rke2 template the rendered
 * config.toml, never the template, since what its `{{ template "base" . }}` renders may or
 * may not declare runc (k3s's own base does; a minimal base of `version = 2` does not).
 */
export function needsDefaultRuntimes(effective: string, version: ConfigVersion, containerdMajor: number | undefined): boolean {
  if (containerdMajor !== undefined && containerdMajor >= 2) return false;
  return lookup(parseConfig(effective), RUNTIMES_PATH[version]) === undefined;
}

/**
 * Refuses to edit a drop-in that declares a schema version other than that of the root
 * config importing it: a drop-in newer than its root stops containerd builds that check it
 * ("drop-in config version 4 higher than root config version 2", containerd#12891), and one
 * of another version would hold the handler at a plugin path the root's schema may not use.
 */
export function checkDropInVersion(dropIn: string, rootVersion: ConfigVersion, file: string): void {
  const declared = parseConfig(dropIn, file).version;
  if (declared === undefined || declared === rootVersion) return;
  throw new ConfigError(`${file} declares config version ${JSON.stringify(declared)} but the root config importing it declares ${rootVersion}: `
    + 'containerd refuses a drop-in newer than its root; remove the drop-in (uninstall), or align the versions, and retry');
}

export function hasBaseTemplate(text: string): boolean {
  return /\{\{\s*template\s+"base"/.test(text);
}

/**
 * The folder whose `*.toml` files the config imports (containerd 2.2+ defaults to
 * `imports = ['/etc/containerd/conf.d/*.toml']`), as written (a relative one is relative to
 * the config's folder); undefined when it imports no such folder.
 */
export function importedDropInFolder(text: string): string | undefined {
  const imports = parseConfig(text).imports;
  if (!Array.isArray(imports)) return undefined;
  for (const entry of imports) {
    const m = typeof entry === 'string' ? /^(.+)\/\*\.toml$/.exec(entry) : null;
    if (m && !m[1].includes('*')) return m[1];
  }
  return undefined;
}

/** Refuses schema/daemon combinations whose edits containerd would ignore. */
export function checkVersionSupported(version: ConfigVersion, containerdMajor: number | undefined, containerdMinor?: number): void {
  if (containerdMajor === undefined) return;
  if (containerdMajor < 2 && version >= 3) {
    throw new ConfigError(`a version-${version} config file cannot be read by containerd 1.x; the file and the daemon disagree`);
  }
  if (version === 4 && containerdMajor === 2 && containerdMinor !== undefined && containerdMinor < 3) {
    throw new ConfigError(`a version-4 config file needs containerd 2.3 or newer, the host runs 2.${containerdMinor}; the file and the daemon disagree`);
  }
  if (containerdMajor >= 2 && version === 1) {
    throw new ConfigError('a version-1 config file on containerd 2: migrate it first (containerd config migrate) and retry');
  }
}

function lookup(config: Record<string, any>, path: string[]): any {
  return path.reduce<any>((node, key) => (node && typeof node === 'object' ? node[key] : undefined), config);
}

function quoteKey(key: string): string {
  return /^[A-Za-z0-9_-]+$/.test(key) ? key : JSON.stringify(key);
}

function tomlString(value: string): string {
  return JSON.stringify(value); // a JSON string is a valid TOML basic string
}

function tomlStrings(values: string[]): string {
  return `[${values.map(tomlString).join(', ')}]`;
}

/** The shim binary a handler table names: runtime_path when set, else runtime_type. */
function binaryOf(table: any): string | undefined {
  if (!table || typeof table !== 'object') return undefined;
  const value = typeof table.runtime_path === 'string' && table.runtime_path !== '' ? table.runtime_path : table.runtime_type;
  return typeof value === 'string' ? value : undefined;
}

const DEFAULTS_BLOCK = 'default runtimes';
const HANDLER_BLOCK = '# BEGIN runtime-class-manager handler ';

export function beginMarker(handler: string): string {
  return handler === DEFAULTS_BLOCK
    ? '# BEGIN runtime-class-manager default runtimes (written out so that containerd 1.x keeps them)'
    : `${HANDLER_BLOCK}${handler} (managed; edits here are overwritten)`;
}
function endMarker(handler: string): string {
  return handler === DEFAULTS_BLOCK ? '# END runtime-class-manager default runtimes' : `# END runtime-class-manager handler ${handler}`;
}

/** The block that declares one handler, delimited by markers so it can be removed exactly. */
export function runtimeBlock(version: ConfigVersion, entry: RuntimeEntry): string {
  const table = [...RUNTIMES_PATH[version], entry.handler].map(quoteKey).join('.');
  const lines = [beginMarker(entry.handler), `[${table}]`, `  runtime_type = ${tomlString(entry.runtimeType)}`];
  if (entry.runtimePath !== undefined) lines.push(`  runtime_path = ${tomlString(entry.runtimePath)}`);
  const settings = entry.settings ?? {};
  if (settings.podAnnotations?.length) lines.push(`  pod_annotations = ${tomlStrings(settings.podAnnotations)}`);
  if (settings.containerAnnotations?.length) lines.push(`  container_annotations = ${tomlStrings(settings.containerAnnotations)}`);
  if (settings.privilegedWithoutHostDevices !== undefined) lines.push(`  privileged_without_host_devices = ${settings.privilegedWithoutHostDevices}`);
  if (settings.snapshotter !== undefined) lines.push(`  snapshotter = ${tomlString(settings.snapshotter)}`);
  const optionKeys = Object.keys(entry.options).sort();
  if (optionKeys.length > 0) {
    lines.push(`[${table}.options]`);
    for (const key of optionKeys) lines.push(`  ${quoteKey(key)} = ${optionValue(entry.options[key])}`);
  }
  lines.push(endMarker(entry.handler));
  return lines.join('\n') + '\n';
}

/** Option values arrive as strings; containerd expects booleans and numbers as such. */
function optionValue(value: string): string {
  if (value === 'true' || value === 'false') return value;
  if (/^-?(0|[1-9][0-9]*)$/.test(value)) return value;
  return tomlString(value);
}

/**
 * Whether the written-out defaults block differs from what was written (its marker's hash);
 * a block of an older installer, without a hash, counts as unchanged.
 */
function defaultsBlockEdited(text: string): boolean {
  const start = text.indexOf(beginMarker(DEFAULTS_BLOCK));
  if (start < 0) return false;
  const lineEnd = text.indexOf('\n', start);
  const hash = /sha256=([0-9a-f]{64})$/.exec(text.slice(start, lineEnd))?.[1];
  const end = text.indexOf(endMarker(DEFAULTS_BLOCK), lineEnd);
  if (hash === undefined || end < 0) return false;
  return sha256Hex(text.slice(lineEnd + 1, end)) !== hash;
}

/** Removes a block's two marker lines and keeps what is between them. */
function unwrapBlock(text: string, handler: string): string {
  const start = text.indexOf(beginMarker(handler));
  const lineEnd = text.indexOf('\n', start);
  const end = text.indexOf(endMarker(handler), lineEnd);
  let after = end + endMarker(handler).length;
  if (text[after] === '\n') after++;
  return text.slice(0, start) + text.slice(lineEnd + 1, end) + text.slice(after);
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function stripBlock(text: string, handler: string): { text: string; found: boolean } {
  const start = text.indexOf(beginMarker(handler));
  if (start < 0) return { text, found: false };
  const endLine = endMarker(handler);
  const end = text.indexOf(endLine, start);
  if (end < 0) throw new ConfigError(`the managed block of handler ${handler} has no end marker; refusing to guess where it ends`);
  let after = end + endLine.length;
  if (text[after] === '\n') after++;
  return { text: text.slice(0, start) + text.slice(after), found: true };
}

function withoutHandler(config: Record<string, any>, version: ConfigVersion, handler: string): Record<string, any> {
  const copy = structuredClone(config);
  const runtimes = lookup(copy, RUNTIMES_PATH[version]);
  if (runtimes && typeof runtimes === 'object') delete runtimes[handler];
  return copy;
}

/**
 * The cgroup driver the node's pods run with: `SystemdCgroup` of the default runtime
 * (`default_runtime_name`, runc when unset), else of runc, as the option to give a new
 * handler so that its pods use the same driver as every other pod (nvidia-ctk does the same).
 * Empty when the config sets neither, or sets `false`: cgroupfs is every shim's default
 * already, and an options table costs something. containerd 1.x hands a handler whose
 * `runtime_type` is a path its options as `runtimeoptions.v1.Options`, which runc-based
 * shims refuse ("type with url runtimeoptions.v1.Options: not found", seen in the
 * end-to-end suite): writing `SystemdCgroup = false` would break them on every default node.
 */
export function inheritedCgroupOption(text: string, version: ConfigVersion): Record<string, string> {
  const containerd = lookup(parseConfig(text), RUNTIMES_PATH[version].slice(0, -1));
  const runtimes = containerd?.runtimes ?? {};
  const defaultName = typeof containerd?.default_runtime_name === 'string' ? containerd.default_runtime_name : 'runc';
  for (const name of [defaultName, 'runc']) {
    const value = runtimes[name]?.options?.SystemdCgroup;
    if (typeof value === 'boolean') return value ? { SystemdCgroup: 'true' } : {};
  }
  return {};
}

const CRI_PLUGIN_IDS = ['cri', 'io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images'];

/**
 * What containerd's effective configuration (the output of `containerd config dump`) says
 * against serving `handler` with `runtimeType`: the CRI plugin disabled (Docker's packaged
 * config), or the handler given another runtime_type (an imported file defines it too and
 * wins). With `runtimeType` undefined, any definition of the handler is a conflict (it is
 * about to be added elsewhere). Undefined when nothing is against it.
 */
export function effectiveConfigProblem(dumped: string, handler: string, binary: string | undefined): string | undefined {
  const config = parseConfig(dumped, 'containerd config dump');
  const disabled: unknown[] = Array.isArray(config.disabled_plugins) ? config.disabled_plugins : [];
  const cri = disabled.find(p => typeof p === 'string' && CRI_PLUGIN_IDS.includes(p));
  if (cri !== undefined) {
    return `containerd's CRI plugin is disabled (disabled_plugins has "${cri}", as in Docker's packaged config): Kubernetes cannot use any runtime handler here; enable the CRI plugin first`;
  }
  const defined = CONFIG_VERSIONS.map(v => lookup(config, [...RUNTIMES_PATH[v], handler])).find(r => r && typeof r === 'object');
  if (binary === undefined) {
    return defined ? `handler "${handler}" is already defined in containerd's effective config (runtime_type ${JSON.stringify(defined.runtime_type)}), by a file this installer does not edit` : undefined;
  }
  if (!defined || binaryOf(defined) !== binary) {
    const field = typeof defined?.runtime_path === 'string' && defined.runtime_path !== '' ? 'runtime_path' : 'runtime_type';
    return `containerd would not use the new handler: its effective config gives "${handler}" ${field} ${JSON.stringify(binaryOf(defined) ?? null)} `
      + '(another file, probably an imported one, defines it too and wins)';
  }
  return undefined;
}

/** The runtime_type the file gives `handler`, or undefined when it does not declare it. */
export function handlerRuntimeType(text: string, version: ConfigVersion, handler: string): string | undefined {
  return lookup(parseConfig(text), [...RUNTIMES_PATH[version], handler, 'runtime_type']);
}

/** The shim binary the file gives `handler` (runtime_path, else runtime_type), or undefined. */
export function handlerBinary(text: string, version: ConfigVersion, handler: string): string | undefined {
  return binaryOf(lookup(parseConfig(text), [...RUNTIMES_PATH[version], handler]));
}

/** What an edit added besides the blocks, so that undoing it restores the file byte for byte. */
export interface EditRecord {
  /** A newline after a last line that had none. */
  readonly addedSeparator: boolean;
  /** `version = N` in front of a file without settings. */
  readonly addedVersionLine: boolean;
}

/**
 * Tells whether a runtime_type is one of ours (a binary this installer installed). It
 * identifies our handler where a TOML round trip by another tool (nvidia-ctk,
 * `config dump > config.toml`) dropped the markers around our block.
 */
export type OwnsRuntime = (runtimeType: string) => boolean;

/**
 * Our earlier definition of `handler` in `text`: the delimited block, or, without markers,
 * the handler's tables when `owns` its runtime_type. `viaMarkers` says which.
 */
function stripOwnHandler(text: string, version: ConfigVersion, handler: string, owns?: OwnsRuntime):
{ text: string; found: boolean; viaMarkers: boolean } {
  const block = stripBlock(text, handler);
  if (block.found || !owns) return { ...block, viaMarkers: block.found };
  const runtimeType = handlerBinary(text, version, handler);
  if (typeof runtimeType !== 'string' || !owns(runtimeType)) return { text, found: false, viaMarkers: false };
  const tables = stripHandlerTables(text, version, handler);
  if (lookup(parseConfig(tables.text), [...RUNTIMES_PATH[version], handler]) !== undefined) {
    throw new ConfigError(`handler "${handler}" names our binary ${runtimeType} but is not written as tables of its own `
      + '(dotted keys or an inline table): remove it by hand');
  }
  return { ...tables, viaMarkers: false };
}

/**
 * Adds (or replaces our own earlier) handler. Refuses a handler that the file already
 * declares outside a managed block, unless `owns` its runtime_type: someone else owns it.
 */
export function addRuntime(text: string, version: ConfigVersion, entry: RuntimeEntry,
  defaultRuntimes?: Record<string, any>, owns?: OwnsRuntime): { text: string } & EditRecord {
  const original = parseConfig(text);
  const { text: base, found } = stripOwnHandler(text, version, entry.handler, owns);
  const baseConfig = found ? parseConfig(base) : original;
  if (lookup(baseConfig, [...RUNTIMES_PATH[version], entry.handler]) !== undefined) {
    throw new ConfigError(`handler "${entry.handler}" is already configured in this file by something else; not touching it`);
  }
  const separator = base.length === 0 || base.endsWith('\n') ? '' : '\n';
  // A file without settings would be read as version 1: declare the version we write in.
  const declaresNothing = Object.keys(baseConfig).length === 0 && version > 1 && !hasBaseTemplate(text);
  let result = base + separator + (declaresNothing ? versionLine(version) : '');
  // containerd 1.x replaces its default runtimes map with the file's as soon as the file
  // declares one runtime: without the defaults written out, adding a handler would drop runc.
  if (defaultRuntimes && lookup(baseConfig, RUNTIMES_PATH[version]) === undefined) {
    result += defaultRuntimesBlock(version, defaultRuntimes);
  }
  result += runtimeBlock(version, entry);
  // Against the whole original: whatever was taken out besides our handler would show.
  verifyOnlyHandlerChanged(original, result, version, entry.handler, defaultRuntimes, declaresNothing);
  const added = lookup(parseConfig(result), [...RUNTIMES_PATH[version], entry.handler]);
  if (!added || added.runtime_type !== entry.runtimeType || binaryOf(added) !== (entry.runtimePath ?? entry.runtimeType)) {
    throw new ConfigError(`the edited file does not declare handler "${entry.handler}" as expected`);
  }
  return { text: result, addedSeparator: separator.length > 0, addedVersionLine: declaresNothing };
}

/**
 * Removes our managed block of `handler` (or, without markers, its tables when `owns` their
 * runtime_type); the rest of the file is left byte for byte.
 */
export function removeRuntime(text: string, version: ConfigVersion, handler: string,
  edit: Partial<EditRecord> = {}, owns?: OwnsRuntime): { text: string; removed: boolean } {
  const before = parseConfig(text);
  const stripped = stripOwnHandler(text, version, handler, owns);
  if (!stripped.found) return { text, removed: false };
  // A file rewritten by another tool no longer has what our edit record describes.
  if (!stripped.viaMarkers) edit = {};
  let result = stripped.text;
  let defaultRuntimes: Record<string, any> | undefined;
  if (!result.includes(HANDLER_BLOCK)) {
    // The written-out defaults leave with the last managed handler.
    if (defaultsBlockEdited(result)) {
      // An admin changed containerd's defaults inside our block: the settings are theirs now.
      result = unwrapBlock(result, DEFAULTS_BLOCK);
    } else {
      const defaults = stripBlock(result, DEFAULTS_BLOCK);
      if (defaults.found) {
        defaultRuntimes = lookup(parseConfig(result), RUNTIMES_PATH[version]);
        result = defaults.text;
      }
    }
    if (edit.addedSeparator && result.endsWith('\n')) result = result.slice(0, -1);
    // The version line goes only with the last setting: without it containerd 1.x would read
    // an admin's later settings as version 1 and ignore them.
    const rest = result.startsWith(versionLine(version)) ? result.slice(versionLine(version).length) : undefined;
    if (edit.addedVersionLine && rest !== undefined && Object.keys(parseConfig(rest)).length === 0) result = rest;
  }
  verifyOnlyHandlerChanged(before, result, version, handler, defaultRuntimes, edit.addedVersionLine);
  return { text: result, removed: true };
}

/**
 * Removes the tables of `handler` (`[...runtimes.HANDLER]`, `[...runtimes.HANDLER.options]`)
 * line by line: from each header to the next table's header, keeping the comments and blank
 * lines just before that next header (they introduce it). Callers verify the result.
 */
export function stripHandlerTables(text: string, version: ConfigVersion, handler: string): { text: string; found: boolean } {
  const prefix = [...RUNTIMES_PATH[version], handler];
  const lines = text.split('\n');
  const keep = lines.map(() => true);
  let found = false;
  for (let i = 0; i < lines.length; i++) {
    const keys = tableHeaderKeys(lines[i]);
    if (!keys || keys.length < prefix.length || prefix.some((k, j) => keys[j] !== k)) continue;
    found = true;
    let end = i + 1;
    while (end < lines.length && !isTableHeader(lines[end])) end++;
    let last = end - 1;
    while (last > i && /^\s*(#.*)?$/.test(lines[last])) last--;
    for (let j = i; j <= last; j++) keep[j] = false;
  }
  return { text: lines.filter((_, i) => keep[i]).join('\n'), found };
}

function isTableHeader(line: string): boolean {
  return /^\s*\[\[?\s*[A-Za-z0-9_"'-]/.test(line) && /\]\s*(#.*)?$/.test(line) && !/,\s*$/.test(line);
}

/** The keys of a `[table.header]` line (quoted keys unquoted), or undefined for other lines. */
export function tableHeaderKeys(line: string): string[] | undefined {
  const m = /^\s*\[(?!\[)(.*)\]\s*(#.*)?$/.exec(line);
  if (!m) return undefined;
  const inner = m[1];
  const keys: string[] = [];
  let i = 0;
  for (;;) {
    while (inner[i] === ' ' || inner[i] === '\t') i++;
    let key: string;
    if (inner[i] === '"') {
      let j = i + 1;
      while (j < inner.length && inner[j] !== '"') j += inner[j] === '\\' ? 2 : 1;
      if (j >= inner.length) return undefined;
      try {
        key = JSON.parse(inner.slice(i, j + 1));
      } catch {
        return undefined;
      }
      i = j + 1;
    } else if (inner[i] === "'") {
      const j = inner.indexOf("'", i + 1);
      if (j < 0) return undefined;
      key = inner.slice(i + 1, j);
      i = j + 1;
    } else {
      const bare = /^[A-Za-z0-9_-]+/.exec(inner.slice(i));
      if (!bare) return undefined;
      key = bare[0];
      i += key.length;
    }
    keys.push(key);
    while (inner[i] === ' ' || inner[i] === '\t') i++;
    if (i >= inner.length) return keys;
    if (inner[i] !== '.') return undefined;
    i++;
  }
}

function versionLine(version: ConfigVersion): string {
  return `version = ${version}\n`;
}

/** The default runtimes (from `containerd config default`), as a managed block. */
function defaultRuntimesBlock(version: ConfigVersion, runtimes: Record<string, any>): string {
  const nested = RUNTIMES_PATH[version].reduceRight<Record<string, any>>((inner, key) => ({ [key]: inner }), structuredClone(runtimes));
  const content = `${stringify(nested)}\n`;
  // The marker carries the content's hash: whether an admin edited the block since shows.
  return `${beginMarker(DEFAULTS_BLOCK)} sha256=${sha256Hex(content)}\n${content}${endMarker(DEFAULTS_BLOCK)}\n`;
}

/** The runtimes table of `containerd config default` output, translated to `version`'s path. */
export function defaultRuntimesOf(defaultConfigText: string): Record<string, any> | undefined {
  const config = parseConfig(defaultConfigText, 'containerd config default');
  for (const v of [3, 2, 1] as ConfigVersion[]) { // 4 shares 3's path
    const runtimes = lookup(config, RUNTIMES_PATH[v]);
    if (runtimes && typeof runtimes === 'object') return runtimes;
  }
  return undefined;
}

function verifyOnlyHandlerChanged(before: Record<string, any>, resultText: string, version: ConfigVersion, handler: string,
  defaultRuntimes?: Record<string, any>, versionLineEdited = false): void {
  let after: Record<string, any>;
  try {
    after = parseConfig(resultText);
  } catch (e) {
    throw new ConfigError(`appending handler "${handler}" would make the file invalid (${(e as Error).message}); ` +
      'the runtimes table is probably an inline table or dotted keys: add the handler by hand');
  }
  // The written-out defaults are what containerd used anyway; they are not a change.
  const ignoringDefaults = (config: Record<string, any>) => {
    const copy = withoutHandler(config, version, handler);
    if (versionLineEdited) delete copy.version; // declared for a file without settings
    const runtimes = lookup(copy, RUNTIMES_PATH[version]);
    for (const name of Object.keys(defaultRuntimes ?? {})) {
      if (runtimes && deepEqual(runtimes[name], defaultRuntimes![name])) delete runtimes[name];
    }
    return copy;
  };
  if (!deepEqual(ignoringDefaults(before), ignoringDefaults(after))) {
    throw new ConfigError(`editing handler "${handler}" would change more than that handler; refusing`);
  }
}

function deepEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(normalise(a)) === JSON.stringify(normalise(b));
}

function normalise(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(normalise);
  if (value && typeof value === 'object' && !(value instanceof Date)) {
    // Empty tables mean nothing to containerd; adding a handler may create its parents.
    const entries = Object.entries(value as Record<string, unknown>)
      .map(([k, v]) => [k, normalise(v)] as const)
      .filter(([, v]) => !(v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0))
      .sort(([x], [y]) => (x < y ? -1 : 1));
    return Object.fromEntries(entries);
  }
  return value instanceof Date ? value.toISOString() : value;
}
