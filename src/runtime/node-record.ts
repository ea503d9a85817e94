// What the controller remembers about a shim on a node: read from and written to the node's
// labels and annotations (ShimNodeLabels), folded forward with finished installer Jobs. Pure.
import { FailureRecord, InstalledEntry, JobView, NodeRecord, NodeView, RecordPatch } from './types';
import { ShimNodeLabels } from '../shared/node-labels';

/** The keys of one Shim's labels and annotations. */
export interface RecordKeys {
  readonly handler: string;
  readonly state: string;
  readonly installed: string;
  readonly failure: string;
}

export function recordKeys(shimName: string): RecordKeys {
  return {
    handler: ShimNodeLabels.handlerKey(shimName),
    state: ShimNodeLabels.stateKey(shimName),
    installed: ShimNodeLabels.installedKey(shimName),
    failure: ShimNodeLabels.failureKey(shimName),
  };
}

/**
 * Every pass reads and states the record of every node (thousands, once a second per Shim),
 * and most records have not changed since the last pass. Parsed values are kept by their
 * text, and texts by the value they were parsed into, so an unchanged record costs two
 * lookups. Values are never mutated (a fold builds new ones).
 */
const parsed = new Map<string, unknown>();
const texts = new WeakMap<object, string>();
const MAX_PARSED = 50_000;

export function parseJson(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  const known = parsed.get(text);
  if (known !== undefined) return known;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (parsed.size >= MAX_PARSED) parsed.clear();
  parsed.set(text, value);
  if (value && typeof value === 'object') texts.set(value, text);
  return value;
}

function stringify(value: object): string {
  return texts.get(value) ?? JSON.stringify(value);
}

const isEntry = (e: any): e is InstalledEntry => e && typeof e.handler === 'string' && typeof e.revision === 'string';

/**
 * The record on a node. An annotation that someone damaged is not trusted blindly: the
 * handler label (if any) still says which handler is there, so uninstall can remove it.
 */
export function readRecord(node: NodeView, keys: RecordKeys): NodeRecord {
  const installed = parseJson(node.annotations[keys.installed]);
  const entries = Array.isArray(installed) && installed.every(isEntry)
    ? installed
    : installed === undefined ? [] : damaged(node.labels[keys.handler]);
  const failure = parseJson(node.annotations[keys.failure]) as FailureRecord | null | undefined;
  const validFailure = failure && typeof failure.attempt === 'number' && typeof failure.handler === 'string' ? failure : undefined;
  return { installed: entries, ...(validFailure ? { failure: validFailure } : {}) };
}

function damaged(handlerLabel: string | undefined): InstalledEntry[] {
  return handlerLabel ? [{ handler: handlerLabel, revision: 'unknown' }] : [];
}

/** Whether anything of this Shim is on the node (recorded, or labelled). */
export function hasTrace(node: NodeView, keys: RecordKeys): boolean {
  return keys.installed in node.annotations || keys.failure in node.annotations || keys.handler in node.labels || keys.state in node.labels;
}

const byFinish = (a: JobView, b: JobView) => (a.finishedAt ?? '').localeCompare(b.finishedAt ?? '') || a.attempt - b.attempt;

/**
 * The record after the given finished Jobs, in the order they finished. Idempotent: folding
 * a Job that is already recorded changes nothing, so a Job whose deletion failed after its
 * result was written is harmless when it is seen again.
 */
export function fold(record: NodeRecord, finished: readonly JobView[], context: { bootID?: string; retryToken?: string; now: string }): NodeRecord {
  const { bootID, retryToken, now } = context;
  let { installed, failure } = record;
  for (const job of [...finished].sort(byFinish)) {
    if (job.phase === 'failed' && failure && isFailureOf(failure, job)) continue; // recorded already, with its retry token
    // The agent wrote this success's record with its outcome, in the same node write: the node
    // holds it, or what changed since (a drift check that took the handler away). Folding it in
    // again would put back a gate the agent took away (I1), as a controller that has just
    // started and still sees the old request would.
    if (job.phase === 'succeeded' && job.recordedByAgent) continue;
    // A success ends the failure of that operation on that handler, whatever revision failed.
    const endsFailure = failure && failure.operation === job.operation && failure.handler === job.handler;
    if (job.phase === 'succeeded') {
      if (endsFailure) failure = undefined;
      installed = installed.filter(e => e.handler !== job.handler);
      if (job.operation === 'install') {
        const entry = { handler: job.handler, revision: job.revision, ...(job.sha256 ? { sha256: job.sha256 } : {}), ...(bootID ? { bootID } : {}) };
        installed = [entry, ...installed];
      }
    } else if (job.phase === 'failed') {
      failure = {
        operation: job.operation,
        handler: job.handler,
        revision: job.revision,
        attempt: job.attempt,
        reason: job.result?.reason ?? (job.operation === 'install' ? 'InstallFailed' : 'UninstallFailed'),
        message: job.result?.message ?? 'the installer Job failed without a result',
        at: job.finishedAt ?? now,
        ...(retryToken !== undefined ? { retry: retryToken } : {}),
      };
    }
  }
  return { installed, ...(failure ? { failure } : {}) };
}

type OperationOn = Pick<FailureRecord, 'operation' | 'handler' | 'revision'>;

/** The same operation on the same handler and revision (any attempt). */
export function sameOperation(a: OperationOn, b: OperationOn): boolean {
  return a.operation === b.operation && a.handler === b.handler && a.revision === b.revision;
}

/** The failure record describes this failed Job. */
export function isFailureOf(failure: FailureRecord, job: JobView): boolean {
  return sameOperation(failure, job) && failure.attempt === job.attempt;
}

/** The values of a record's labels (handler, state) and annotations (installed, failure); undefined: absent. */
export interface RenderedRecord {
  readonly handler?: string;
  readonly state?: string;
  readonly installed?: string;
  readonly failure?: string;
}

/**
 * The labels and annotations that state a record: the handler label (the scheduling gate)
 * only while the node is meant to serve and has not rebooted since its last install.
 */
export function renderRecord(record: NodeRecord, opts: { serving: boolean; bootID?: string; failureThreshold: number }): RenderedRecord {
  const top = record.installed[0];
  const verified = top !== undefined && (!top.bootID || !opts.bootID || top.bootID === opts.bootID);
  const state = record.failure
    ? (record.failure.attempt >= opts.failureThreshold ? ShimNodeLabels.FAILED : ShimNodeLabels.RETRYING)
    : record.installed.length === 0 ? undefined : opts.serving ? ShimNodeLabels.PROVISIONED : ShimNodeLabels.UNINSTALLING;
  return {
    handler: opts.serving && verified ? top.handler : undefined,
    state,
    installed: record.installed.length > 0 ? stringify(record.installed) : undefined,
    failure: record.failure ? stringify(record.failure) : undefined,
  };
}

/**
 * The merge patch that brings the node to the rendered record, or undefined when it is there
 * (the common case: nothing is allocated for it, as every pass checks every node).
 */
export function nodePatch(node: NodeView, keys: RecordKeys, rendered: RenderedRecord):
{ labels: Record<string, string | null>; annotations: Record<string, string | null> } | undefined {
  const { labels, annotations } = node;
  if (labels[keys.handler] === rendered.handler && labels[keys.state] === rendered.state
    && annotations[keys.installed] === rendered.installed && annotations[keys.failure] === rendered.failure) return undefined;
  const patch = { labels: {} as Record<string, string | null>, annotations: {} as Record<string, string | null> };
  const set = (into: Record<string, string | null>, current: Record<string, string>, key: string, value: string | undefined) => {
    if (current[key] !== value) into[key] = value ?? null;
  };
  set(patch.labels, labels, keys.handler, rendered.handler);
  set(patch.labels, labels, keys.state, rendered.state);
  set(patch.annotations, annotations, keys.installed, rendered.installed);
  set(patch.annotations, annotations, keys.failure, rendered.failure);
  return patch;
}

/**
 * The whole rendered record as a merge patch of the node (every key of the Shim's record,
 * null where absent): what a writer that does not know the node's current labels writes (the
 * node agent, with the outcome of a request).
 */
export function wholeRecordPatch(keys: RecordKeys, rendered: RenderedRecord): RecordPatch {
  return {
    labels: { [keys.handler]: rendered.handler ?? null, [keys.state]: rendered.state ?? null },
    annotations: { [keys.installed]: rendered.installed ?? null, [keys.failure]: rendered.failure ?? null },
  };
}
