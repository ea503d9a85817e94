// Shape checks shared by the constructs, the controller and the node installer, so that a
// name is judged the same way at synth time, at reconcile time and on the node.

import { RESERVED_INSTALLER_ENV } from './installer-contract';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const SHA256 = /^[a-f0-9]{64}$/;
const QUANTITY = /^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$/;
const PLATFORM_OS = /^[a-z0-9]+$/;
const PLATFORM_ARCH = /^[a-z0-9_]+$/;

/** RFC 1123 label: what Kubernetes requires of RuntimeClass handlers and many names. */
export function isDnsLabel(value: string): boolean {
  return value.length <= 63 && DNS_LABEL.test(value);
}

/** RFC 1123 subdomain: what Kubernetes requires of most object names. */
export function isDnsSubdomain(value: string): boolean {
  return value.length <= 253 && DNS_SUBDOMAIN.test(value);
}

export function isSha256(value: string): boolean {
  return SHA256.test(value);
}

export function isQuantity(value: string): boolean {
  return QUANTITY.test(value);
}

export function isPlatformOs(value: string): boolean {
  return PLATFORM_OS.test(value);
}

export function isPlatformArch(value: string): boolean {
  return PLATFORM_ARCH.test(value);
}

/** The upstream Shim's names (x86_64, aarch64) for what nodes label amd64 and arm64. */
const ARCH_ALIASES: Record<string, string> = { x86_64: 'amd64', aarch64: 'arm64' };

/** An architecture as nodes label it (`kubernetes.io/arch`). */
export function nodeArch(arch: string): string {
  return ARCH_ALIASES[arch] ?? arch;
}

/**
 * Why `location` is not an acceptable artifact URL, or undefined when it is.
 * Plain http is refused unless explicitly allowed: a shim runs as root-equivalent on nodes.
 */
export function artifactUrlProblem(location: string, allowInsecureHttp: boolean): string | undefined {
  let url: URL;
  try {
    url = new URL(location);
  } catch {
    return 'is not a valid URL';
  }
  if (url.protocol === 'https:') return undefined;
  if (url.protocol === 'http:') {
    return allowInsecureHttp ? undefined : 'uses plain http (set allowInsecureHttp to accept it)';
  }
  return `uses unsupported scheme "${url.protocol.replace(/:$/, '')}" (only https and http are supported)`;
}

/** Why `name` cannot be an extra environment variable of installer pods, or undefined when it can. */
export function installerEnvNameProblem(name: string): string | undefined {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) return `"${name}" is not an environment variable name`;
  if (RESERVED_INSTALLER_ENV.includes(name)) return `"${name}" is set per Shim by the controller and cannot be overridden`;
  return undefined;
}

/**
 * Why `key` cannot be a key of the handler's options table in containerd's config, or
 * undefined when it can (the node installer writes keys bare, so only these characters).
 */
export function runtimeOptionKeyProblem(key: string): string | undefined {
  if (!/^[A-Za-z0-9_]+$/.test(key)) return `key "${key}" may only hold letters, digits and '_'`;
  return undefined;
}

/**
 * Why a runtime option cannot reach the node's handler options, or undefined: its key (see
 * runtimeOptionKeyProblem), a control character in its value (the installer receives one option
 * per line: a newline would be a second option), or `${PAYLOAD}` without a payload to stand
 * for. One rule for both sides: the constructs refuse it at synth, the controller marks a Shim
 * applied without them invalid.
 */
export function runtimeOptionProblem(key: string, value: string, hasPayload: boolean): { in: 'key' | 'value'; problem: string } | undefined {
  const keyProblem = runtimeOptionKeyProblem(key);
  if (keyProblem) return { in: 'key', problem: keyProblem };
  if (/[\u0000-\u001f\u007f]/.test(value)) return { in: 'value', problem: 'holds a control character such as a newline: the value must be one line (the installer receives one option per line)' };
  if (value.includes('${PAYLOAD}') && !hasPayload) return { in: 'value', problem: 'refers to ${PAYLOAD}, but the Shim has no payload' };
  return undefined;
}

const ANNOTATION_GLOB = /^[A-Za-z0-9*]([-A-Za-z0-9_./*]*[A-Za-z0-9*])?$/;
const RUNTIME_TYPE = /^[a-z0-9]+(\.[a-z0-9_-]+)+$/;
const SNAPSHOTTER = /^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$/;

/** An annotation key or a glob of keys, as containerd's pod_annotations/container_annotations take them. */
export function isAnnotationGlob(value: string): boolean {
  return value.length <= 317 && ANNOTATION_GLOB.test(value);
}

/** A containerd runtime type name such as io.containerd.runc.v2. */
export function isRuntimeType(value: string): boolean {
  return RUNTIME_TYPE.test(value);
}

/** A containerd snapshotter name such as overlayfs or native. */
export function isSnapshotterName(value: string): boolean {
  return SNAPSHOTTER.test(value);
}

const NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** Why `key` is not a label or annotation key (`[prefix/]name`), or undefined when it is. */
export function metadataKeyProblem(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = key.slice(slash + 1);
  if (prefix !== undefined && !isDnsSubdomain(prefix)) return `key "${key}": the prefix "${prefix}" is not a DNS subdomain`;
  if (name.length > 63 || !NAME_PART.test(name)) return `key "${key}": the name "${name}" must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric`;
  return undefined;
}

/** Why `value` cannot be the value of label `key`, or undefined when it can. */
export function labelValueProblem(key: string, value: string): string | undefined {
  if (value.length > 63 || !LABEL_VALUE.test(value)) {
    return `the value "${value}" of "${key}" must be at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric`;
  }
  return undefined;
}
