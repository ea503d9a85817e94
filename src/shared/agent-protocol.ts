// The node record's agent part (install mode NodeAgent): what the controller admitted on a
// node and what the node's agent made of it.
//
// - The requests (written by the controller): the operation it admitted for each Shim, as
//   JSON (AdmittedRequest), in the node's requests ConfigMap (requestsConfigMapName, in the
//   agents' namespace), one data key per Shim (its name). One per Shim and node at a time:
//   the planner never runs two operations of one Shim on one node. Removing it withdraws the
//   request. They are not on the Node: the controller watches the Nodes, and each request
//   it wrote there came back to it as one more watch event (a third of what it read in a
//   rollout). It is their only writer, so it keeps them in memory and lists them at start.
// - `<shim>.shim.runtime.spinkube.dev/result` (an annotation on the Node, written by the
//   agent): the request's progress and outcome (AgentResult), naming the request it is about.
//
// Both programs read them merged, as annotations (a request under requestKey(shim)): the
// controller as it read an installer Job and its pod; the agent runs every request of its
// node that has no outcome yet, all at once (one change set, one restart). A request whose
// outcome the controller has recorded may stay in the ConfigMap until its next write there:
// its result, on the Node, says it is done.
import { createHash } from 'crypto';
import { InstallerRequest } from './installer-contract';
import { ShimNodeLabels } from './node-labels';

/** What the controller admitted: one operation of one Shim on the node, and what the installer is asked. */
export interface AdmittedRequest {
  /** The operation's name (what a Job of it would be called): unique per attempt. */
  readonly name: string;
  readonly shimUid: string;
  readonly operation: 'install' | 'uninstall';
  readonly handler: string;
  readonly revision: string;
  readonly attempt: number;
  readonly batch: string;
  readonly sha256?: string;
  readonly createdAt: string;
  /**
   * The least time between two passes of one Shim in the controller that admitted it (one
   * second per thousand nodes, at least one). One change on a node (Shims deleted at once, the
   * gates a drift check dropped) makes every Shim concerned admit its request within that
   * interval of it, so the agent waits that long for more before it starts a change set.
   * Absent from controllers before it was added: the agent then waits its default.
   */
  readonly passIntervalMs?: number;
  /**
   * The longest one of that controller's passes took within the last minute. Its passes of
   * several Shims run at once and each writes its requests as it goes, so the requests one
   * change causes can also arrive this much further apart: the agent waits that much longer
   * (up to a bound). Absent from controllers before it was added: 0.
   */
  readonly slowestPassMs?: number;
  /**
   * The Shim's record on the node once this operation succeeded, as the controller would write
   * it then (a merge patch of the Shim's gate and state labels and its installed and failure
   * annotations; null removes): the agent writes it with the outcome, in the same write, and
   * says so (AgentResult.recorded). The controller then has no write of its own to make, nor
   * its watch event to read. Absent from controllers before it was added: the agent then
   * writes the outcome only, and the controller the record.
   */
  readonly onSuccess?: RecordPatch;
  readonly request: InstallerRequest;
}

/** A Shim's record on a node, as a merge patch of the node's labels and annotations (null removes). */
export interface RecordPatch {
  readonly labels: Readonly<Record<string, string | null>>;
  readonly annotations: Readonly<Record<string, string | null>>;
}

/** What the agent made of a request. */
export interface AgentResult {
  /** The request it is about (AdmittedRequest.name). */
  readonly name: string;
  /**
   * That request's createdAt. A request admitted again under its name (the same attempt: after
   * a drift check dropped the gate, or a withdrawal) is a new request: the result of the first
   * one is not its result. The controller's write of the request does not touch the Node,
   * where the earlier result stays.
   */
  readonly admittedAt: string;
  readonly phase: 'running' | 'succeeded' | 'failed';
  readonly startedAt: string;
  readonly finishedAt?: string;
  /** The installer's outcome, reason and message, as a Job's termination message gives them. */
  readonly result?: { readonly outcome?: string; readonly reason?: string; readonly message?: string; readonly exitCode?: number };
  /** A success written with the request's `onSuccess` record, in the same write. */
  readonly recorded?: boolean;
}

/** A success the agent wrote with the request's record (the controller has nothing to write for it). */
export function isRecordedSuccess(result: AgentResult | undefined): boolean {
  return result?.phase === 'succeeded' && result.recorded === true;
}

/**
 * The part of a request's `onSuccess` record that an agent writes: the labels and annotations
 * of that Shim's record only (its gate, state, installed and failure keys). Anything else in it
 * (a request from a controller with another idea of the record, or a damaged one) is left out:
 * an agent writes no other Shim's record nor any other key of its node. Undefined: nothing.
 */
export function ownRecordOf(shim: string, onSuccess: RecordPatch | undefined): RecordPatch | undefined {
  if (!onSuccess) return undefined;
  let keys: { labels: string[]; annotations: string[] };
  try {
    keys = {
      labels: [ShimNodeLabels.handlerKey(shim), ShimNodeLabels.stateKey(shim)],
      annotations: [ShimNodeLabels.installedKey(shim), ShimNodeLabels.failureKey(shim)],
    };
  } catch {
    return undefined; // not a Shim's name
  }
  const pick = (from: Readonly<Record<string, string | null>> | undefined, allowed: string[]) => {
    const out: Record<string, string | null> = {};
    for (const key of allowed) {
      const value = from?.[key];
      if (value === null || typeof value === 'string') out[key] = value;
    }
    return out;
  };
  const labels = pick(onSuccess.labels, keys.labels);
  const annotations = pick(onSuccess.annotations, keys.annotations);
  return Object.keys(labels).length + Object.keys(annotations).length > 0 ? { labels, annotations } : undefined;
}

/**
 * How long an install that succeeded waits for its node to list the handler in
 * `status.runtimeHandlers`, on nodes that report that field: the kubelet posts a changed
 * status within its nodeStatusUpdateFrequency (10 s by default). The controller waits this
 * long for a Job's install; the node agent, which reads its Node whole, for its own.
 */
export const KUBELET_REPORT_WAIT_MS = 60_000;

/** The reason of an install whose handler the node's kubelet did not list in time. */
export const HANDLER_NOT_REPORTED = 'HandlerNotReportedByKubelet';

/** The failure message of such an install; `listed`: what the kubelet lists ("" the default handler). */
export function handlerNotReportedMessage(handler: string, listed: readonly string[], waitedMs = KUBELET_REPORT_WAIT_MS): string {
  return `the installer reported ${handler} installed, but the node's kubelet did not list it in status.runtimeHandlers within ${waitedMs / 1000}s (it lists ${listed.map(h => h || '(default)').join(', ')})`;
}

/** A node's runtime handlers by name ("" the default), absent where it lists none (the field is unknown to its kubelet, or its runtime tells none). */
export function runtimeHandlersOf(names: string[]): { runtimeHandlers?: readonly string[] } {
  return names.length > 0 ? { runtimeHandlers: names } : {};
}

/** The same from a Node's status as JSON (`status.runtimeHandlers[].name`): what the controller and the agent read. */
export function runtimeHandlersOfStatus(status: any): { runtimeHandlers?: readonly string[] } {
  return runtimeHandlersOf((status?.runtimeHandlers ?? []).map((h: any) => h?.name ?? ''));
}

/**
 * The labels of the node agent's pods, which the DaemonSet's selector holds: the controller
 * finds the agents by them (a node is ready for a request while its agent pod is Ready).
 */
export const AGENT_POD_LABELS: Readonly<Record<string, string>> = {
  'app.kubernetes.io/name': 'runtime-class-manager',
  'app.kubernetes.io/component': 'node-agent',
};

/** AGENT_POD_LABELS as a label selector. */
export const AGENT_POD_SELECTOR = Object.entries(AGENT_POD_LABELS).map(([k, v]) => `${k}=${v}`).join(',');

const SUFFIX = `.${ShimNodeLabels.DOMAIN}/`;

/** The labels of the requests ConfigMaps: the controller lists them by these when it starts. */
export const REQUESTS_LABELS: Readonly<Record<string, string>> = {
  'app.kubernetes.io/managed-by': 'runtime-class-manager',
  'app.kubernetes.io/component': 'node-requests',
};

/** REQUESTS_LABELS as a label selector. */
export const REQUESTS_SELECTOR = Object.entries(REQUESTS_LABELS).map(([k, v]) => `${k}=${v}`).join(',');

/** The annotation of a requests ConfigMap that names its node (a long node name is hashed in the ConfigMap's name). */
export const REQUESTS_NODE_ANNOTATION = 'runtime.spinkube.dev/node';

/**
 * The name of the ConfigMap that holds a node's requests: `rcm-requests.<node>`, or a hash of
 * the node's name where that would be longer than a name may be (253 characters).
 */
export function requestsConfigMapName(node: string): string {
  const name = `rcm-requests.${node}`;
  return name.length <= 253 ? name : `rcm-requests.${createHash('sha256').update(node).digest('hex')}`;
}

/** A requests ConfigMap's data (Shim name -> request) as the annotations both programs read (requestKey(shim) -> request). */
export function requestAnnotationsOf(data: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [shim, text] of Object.entries(data ?? {})) {
    try {
      out[requestKey(shim)] = text;
    } catch {
      // Not a Shim's name (it could not form a label key): not a request of ours.
    }
  }
  return out;
}

/** Annotations without requests (an older controller wrote them on the Node): requests come from the ConfigMap only. The same object when it has none. */
export function withoutRequests(annotations: Readonly<Record<string, string>>): Readonly<Record<string, string>> {
  const keys = Object.keys(annotations);
  if (!keys.some(key => shimOfRequestKey(key) !== undefined)) return annotations;
  const out: Record<string, string> = {};
  for (const key of keys) if (shimOfRequestKey(key) === undefined) out[key] = annotations[key];
  return out;
}

/** Keys by Shim name: every node view asks for them (the name's check is a few regular expressions). */
const requestKeys = new Map<string, string>();

export function requestKey(shimName: string): string {
  let key = requestKeys.get(shimName);
  if (key === undefined) {
    key = ShimNodeLabels.handlerKey(shimName).replace(/\/handler$/, '/request');
    if (requestKeys.size > 10_000) requestKeys.clear(); // Shims come and go: bounded
    requestKeys.set(shimName, key);
  }
  return key;
}

export function resultKey(shimName: string): string {
  return ShimNodeLabels.handlerKey(shimName).replace(/\/handler$/, '/result');
}

/** The Shim whose request an annotation key is, or undefined for any other key. */
export function shimOfRequestKey(key: string): string | undefined {
  return key.endsWith(`${SUFFIX}request`) ? key.slice(0, -`${SUFFIX}request`.length) : undefined;
}

function parse<T>(text: string | undefined, valid: (value: any) => boolean): T | undefined {
  if (text === undefined) return undefined;
  try {
    const value = JSON.parse(text);
    return valid(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Parsed values by their text: every pass of the controller reads every request and result of
 * the fleet's nodes that have one under way (a rollout's batch, not the fleet), and most are
 * the texts it read the pass before. The values are never mutated. Bounded: cleared when full.
 */
function memoized<T>(read: (text: string) => T | undefined, max = 5_000): (text: string | undefined) => T | undefined {
  const known = new Map<string, T | undefined>();
  return text => {
    if (text === undefined) return undefined;
    if (known.has(text)) return known.get(text);
    const value = read(text);
    if (known.size >= max) known.clear();
    known.set(text, value);
    return value;
  };
}

export const parseRequest: (text: string | undefined) => AdmittedRequest | undefined = memoized(text => parse<AdmittedRequest>(text,
  v => v && typeof v.name === 'string' && typeof v.shimUid === 'string'
    && (v.operation === 'install' || v.operation === 'uninstall') && typeof v.handler === 'string' && typeof v.attempt === 'number'
    && v.request && typeof v.request.handler === 'string'));

export const parseResult: (text: string | undefined) => AgentResult | undefined = memoized(text => parse<AgentResult>(text,
  v => v && typeof v.name === 'string' && ['running', 'succeeded', 'failed'].includes(v.phase)));

/** Every request on a node (by its annotations), with the agent's result for it when there is one. */
export function requestsOn(annotations: Readonly<Record<string, string>>): { shim: string; admitted: AdmittedRequest; result?: AgentResult }[] {
  const out: { shim: string; admitted: AdmittedRequest; result?: AgentResult }[] = [];
  for (const [key, text] of Object.entries(annotations)) {
    const shim = shimOfRequestKey(key);
    if (shim === undefined) continue;
    const admitted = parseRequest(text);
    if (!admitted) continue;
    const result = parseResult(annotations[resultKey(shim)]);
    out.push({ shim, admitted, ...(result?.name === admitted.name && result.admittedAt === admitted.createdAt ? { result } : {}) });
  }
  return out;
}
