// What the controller's caches keep of each kind: the fields the planner and the adapter
// read, nothing else (no managedFields, images, heartbeats or pod specs). Pure.
import { selects } from './planner';
import { ShimObject, NodeView } from './types';
import { runtimeHandlersOfStatus } from '../shared/agent-protocol';
import { ShimNodeLabels } from '../shared/node-labels';

export const OUR_ANNOTATIONS = `.${ShimNodeLabels.DOMAIN}/`;
const INSTALLED = `${OUR_ANNOTATIONS}installed`;

export function slimShim(raw: any): ShimObject {
  const m = raw.metadata;
  return {
    metadata: {
      name: m.name,
      uid: m.uid,
      generation: m.generation,
      creationTimestamp: m.creationTimestamp,
      deletionTimestamp: m.deletionTimestamp,
      finalizers: m.finalizers,
      resourceVersion: m.resourceVersion,
      annotations: m.annotations,
    },
    spec: raw.spec,
    status: raw.status,
  };
}

/** A Node as the planner sees it: labels, this controller's annotations, readiness, boot ID. */
export function slimNode(raw: any): NodeView {
  const annotations: Record<string, string> = {};
  for (const [k, v] of Object.entries<string>(raw.metadata.annotations ?? {})) if (k.includes(OUR_ANNOTATIONS)) annotations[k] = v;
  return {
    name: raw.metadata.name,
    labels: raw.metadata.labels ?? {},
    annotations,
    ready: readyIn(raw.status?.conditions),
    schedulable: !raw.spec?.unschedulable,
    bootID: raw.status?.nodeInfo?.bootID || undefined,
    ...runtimeHandlersOfStatus(raw.status),
  };
}

/**
 * What a Node's metadata alone tells: its name, labels and this controller's annotations; its
 * uid (the owner of its requests ConfigMap) and the resourceVersion it was read at.
 */
export interface NodeMetadata extends Pick<NodeView, 'name' | 'labels' | 'annotations'> {
  readonly uid?: string;
  readonly resourceVersion?: string;
}

export function slimNodeMetadata(raw: any): NodeMetadata {
  const { name, labels, annotations } = slimNode({ metadata: raw.metadata });
  return { name, uid: raw.metadata.uid || undefined, resourceVersion: raw.metadata.resourceVersion || undefined, labels, annotations };
}

/**
 * A node agent's pod (install mode NodeAgent): its node, and whether it is Ready and not
 * being deleted (an agent that stops takes no new request).
 */
export interface AgentPod {
  readonly name: string;
  /** `spec.nodeName` ("" before the pod is bound). */
  readonly node: string;
  readonly ready: boolean;
}

export function slimAgentPod(raw: any): AgentPod {
  return { name: raw.metadata.name, node: raw.spec?.nodeName ?? '', ready: readyIn(raw.status?.conditions) && !raw.metadata.deletionTimestamp };
}

/** A Node's or a Pod's conditions (as JSON) hold Ready=True. */
function readyIn(conditions: any[] | undefined): boolean {
  return (conditions ?? []).some(c => c.type === 'Ready' && c.status === 'True');
}


/**
 * Whether two views the caches keep are equal: plain data (records, arrays, strings, numbers,
 * booleans), as the decoders here make them. A key whose value is undefined counts as a key
 * (the decoders give a kind's views one shape). What node's util.isDeepStrictEqual would say of
 * such data, at a fraction of its cost: the informers ask it of every event.
 */
export function samePlain(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!samePlain(a[i], b[i])) return false;
    return true;
  }
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  let keys = 0;
  for (const key in x) {
    if (!(key in y) || !samePlain(x[key], y[key])) return false;
    keys++;
  }
  for (const _ in y) keys--;
  return keys === 0;
}

const sameList = (a: readonly string[] | undefined, b: readonly string[] | undefined) =>
  a === b || (a !== undefined && b !== undefined && a.length === b.length && a.every((x, i) => x === b[i]));

/** What the controller keeps of an installer Job: its identity, annotations and outcome. */
export interface SlimJob {
  metadata: { name: string; uid: string; creationTimestamp?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  status: {
    succeeded?: number;
    completionTime?: string;
    /** Only the Failed conditions. */
    conditions: { type: string; status: string; reason?: string; message?: string; lastTransitionTime?: string }[];
  };
}

export function slimJob(raw: any): SlimJob {
  const m = raw.metadata;
  const failed = (raw.status?.conditions ?? []).filter((c: any) => c.type === 'Failed')
    .map((c: any) => ({
      type: c.type, status: c.status, reason: c.reason, message: c.message, lastTransitionTime: c.lastTransitionTime ?? undefined,
    }));
  return {
    metadata: { name: m.name, uid: m.uid, creationTimestamp: m.creationTimestamp, labels: m.labels, annotations: m.annotations },
    status: { succeeded: raw.status?.succeeded, completionTime: raw.status?.completionTime, conditions: failed },
  };
}

export interface ContainerState {
  waiting?: { reason?: string; message?: string };
  terminated?: { message?: string; finishedAt?: string };
}

/**
 * What the controller keeps of an installer pod: its Job (labels), phase, start, and the
 * first container's waiting reason or result (the shape of a Pod, so that observeJob reads either).
 */
export interface SlimPod {
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  status: { phase?: string; startTime?: string; containerStatuses?: { state: ContainerState }[] };
}

export function slimPod(raw: any): SlimPod {
  const m = raw.metadata;
  const first = raw.status?.containerStatuses?.[0];
  const state: ContainerState = {};
  if (first?.state?.waiting) state.waiting = { reason: first.state.waiting.reason, message: first.state.waiting.message };
  const terminated = first?.state?.terminated;
  if (terminated) state.terminated = { message: terminated.message, finishedAt: terminated.finishedAt ?? undefined };
  return {
    metadata: { name: m.name, labels: m.labels, annotations: m.annotations },
    status: {
      phase: raw.status?.phase,
      startTime: raw.status?.startTime,
      ...(first ? { containerStatuses: [{ state }] } : {}),
    },
  };
}

export function slimRuntimeClass(raw: any): any {
  const { managedFields: _, ...metadata } = raw.metadata;
  return { ...raw, metadata };
}

/** Whether a key whose value differs between the two records passes `matters` (no arrays made: every node event asks it per Shim). */
function someChanged(a: Record<string, string>, b: Record<string, string>, matters: (key: string) => boolean): boolean {
  for (const k in a) if (a[k] !== b[k] && matters(k)) return true;
  for (const k in b) if (!Object.prototype.hasOwnProperty.call(a, k) && a[k] !== b[k] && matters(k)) return true;
  return false;
}

function someKeyStartsWith(record: Record<string, string>, prefix: string): boolean {
  for (const k in record) if (k.startsWith(prefix)) return true;
  return false;
}

/**
 * Whether a change of a Node matters to a Shim: its selection, readiness, cordon or boot ID
 * (where the Shim selects the node or has something on it), or the Shim's own keys. A
 * heartbeat changes none of these, so thousands of nodes reporting do not re-run every Shim.
 */
export function nodeChangeAffects(shim: ShimObject, before: NodeView | undefined, after: NodeView | undefined): boolean {
  const prefix = `${shim.metadata.name}.${ShimNodeLabels.DOMAIN}/`;
  const ours = (n: NodeView | undefined) => n !== undefined && (someKeyStartsWith(n.labels, prefix) || someKeyStartsWith(n.annotations, prefix));
  const selected = (n: NodeView | undefined) => n !== undefined && selects(shim.spec?.nodeSelector, n.labels);
  const involved = selected(before) || selected(after) || ours(before) || ours(after);
  if (!before || !after) return involved;
  if (selected(before) !== selected(after)) return true;
  if (!involved) return false;
  if (before.ready !== after.ready || before.schedulable !== after.schedulable || before.bootID !== after.bootID) return true;
  if (!sameList(before.runtimeHandlers, after.runtimeHandlers)) return true;
  // Its own keys; another Shim's record (a handler it may be waiting for); any other label.
  const matters = (k: string) => k.startsWith(prefix) || k.endsWith(INSTALLED) || !k.includes(OUR_ANNOTATIONS);
  return someChanged(before.labels, after.labels, matters) || someChanged(before.annotations, after.annotations, matters);
}
