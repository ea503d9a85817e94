// The RuntimeClass a Shim wants, and what to do about the one that exists. Pure.
// The controller owns only what it created or what says it may be adopted (I7): a
// RuntimeClass of the same name made by someone else is reported, never touched.
//
// The controller is the RuntimeClass's one writer by default (the constructs no longer
// synthesize it): a RuntimeClass's handler is immutable, and only the controller can replace
// it at the moment that keeps pods off nodes without the new handler. Everything the
// constructs used to put on it (overhead, tolerations, labels, annotations) comes from the
// Shim's spec.runtimeClass.
import * as crypto from 'crypto';
import { RecordKeys } from './node-record';
import { Action, RuntimeClassObject, RuntimeClassView, ShimObject } from './types';
import { ShimNodeLabels } from '../shared/node-labels';

/** The label every RuntimeClass of a Shim carries (the constructs set the same on the ones they synthesize). */
export const RUNTIME_CLASS_MANAGED_BY = { 'app.kubernetes.io/managed-by': 'runtime-class-manager' } as const;

/**
 * A digest of the labels and annotations the controller last applied. Server-side apply
 * removes a key that the controller applied before and no longer does, but only when it
 * applies again: a spec that drops a label changes this digest, and so gets applied.
 */
export const METADATA_DIGEST_ANNOTATION = 'runtime.spinkube.dev/metadata-digest';

/** The Shim as the controlling owner: the garbage collector removes what it owns with it. */
export function ownerReference(shim: ShimObject): object {
  return { apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', name: shim.metadata.name, uid: shim.metadata.uid, controller: true, blockOwnerDeletion: true };
}

export function desiredRuntimeClass(shim: ShimObject, keys: RecordKeys): RuntimeClassObject {
  const rc = shim.spec.runtimeClass;
  // The controller's own keys last: the spec cannot take them over.
  const labels: Record<string, string> = { ...rc.labels, ...RUNTIME_CLASS_MANAGED_BY };
  const annotations: Record<string, string> = { ...rc.annotations, [ShimNodeLabels.ADOPT_ANNOTATION]: shim.metadata.name };
  annotations[METADATA_DIGEST_ANNOTATION] = crypto.createHash('sha256').update(canonical({ labels, annotations })).digest('hex').slice(0, 16);
  return {
    apiVersion: 'node.k8s.io/v1',
    kind: 'RuntimeClass',
    // The owner reference also keeps Argo CD from pruning a RuntimeClass that an app used to
    // synthesize: Argo CD counts only objects without owner references as its own.
    metadata: { name: rc.name, labels, annotations, ownerReferences: [ownerReference(shim)] },
    handler: rc.handler,
    // Only nodes whose record says this very handler is installed (I1).
    scheduling: {
      nodeSelector: { [keys.handler]: rc.handler },
      ...(rc.tolerations ? { tolerations: rc.tolerations as unknown[] } : {}),
    },
    ...(rc.overhead ? { overhead: rc.overhead } : {}),
  };
}

/** JSON with sorted keys: the API server returns objects with its own key order. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v) => (v && typeof v === 'object' && !Array.isArray(v)
    ? Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined).sort(([a], [b]) => (a < b ? -1 : 1)))
    : v));
}

const same = (a: unknown, b: unknown) => canonical(a ?? null) === canonical(b ?? null);

const DECIMAL_SUFFIX: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const BINARY_SUFFIX: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };

/**
 * A resource quantity's value in units of 10^-9, rounded up as the API server rounds, or
 * undefined for text that is no quantity. The API server stores a quantity in its canonical
 * form (cpu `0.5` comes back as `500m`, memory `1024Ki` as `1Mi`), so quantities compare by
 * value: text would never match, and the RuntimeClass would be applied again on every pass.
 */
export function quantityNanos(quantity: unknown): bigint | undefined {
  if (typeof quantity === 'number') quantity = String(quantity);
  if (typeof quantity !== 'string') return undefined;
  const m = /^([+-]?)(\d*)(?:\.(\d*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE])|[eE]([+-]?\d+))?$/.exec(quantity);
  if (!m || (m[2] === '' && !m[3])) return undefined;
  const [, sign, whole, fraction = '', binary, decimal, exponent] = m;
  let numerator = BigInt(`${whole}${fraction}` || '0') * 10n ** 9n;
  let denominator = 10n ** BigInt(fraction.length);
  if (binary) numerator *= 2n ** BigInt(BINARY_SUFFIX[binary]);
  const power = decimal ? DECIMAL_SUFFIX[decimal] : exponent ? Number(exponent) : 0;
  if (Math.abs(power) > 100) return undefined;
  if (power >= 0) numerator *= 10n ** BigInt(power);
  else denominator *= 10n ** BigInt(-power);
  const value = (numerator + denominator - 1n) / denominator;
  return sign === '-' ? -value : value;
}

/** Two `overhead` values alike: the same resources, each of the same quantity. */
function sameOverhead(a: unknown, b: unknown): boolean {
  const podFixed = (o: unknown) => (o as { podFixed?: Record<string, unknown> } | undefined)?.podFixed;
  const [x, y] = [podFixed(a), podFixed(b)];
  if (!x || !y || Object.keys(a as object).length !== 1 || Object.keys(b as object).length !== 1) return same(a, b);
  const keys = Object.keys(x);
  return keys.length === Object.keys(y).length && keys.every(k => {
    const [qx, qy] = [quantityNanos(x[k]), quantityNanos(y[k])];
    return qx !== undefined && qy !== undefined ? qx === qy : same(x[k], y[k]);
  });
}

const carries = (live: Record<string, string> | undefined, wanted: Record<string, string> | undefined) =>
  Object.entries(wanted ?? {}).every(([k, v]) => live?.[k] === v);

/**
 * A merge patch that removes what the controller's apply cannot: fields that another field
 * manager set and the spec no longer wants. Apply leaves another manager's fields alone, and
 * a RuntimeClass applied from an app's manifests (the constructs' output before the controller
 * wrote it alone) keeps that app's manager on its overhead, tolerations and selector. Without
 * this the RuntimeClass would never be in shape, and be applied again on every pass.
 */
function cleanupOf(current: RuntimeClassView, desired: RuntimeClassObject): Record<string, unknown> | undefined {
  const patch: { scheduling?: Record<string, unknown>; overhead?: unknown } = {};
  // A selector asking for more than the handler label would keep pods off ready nodes.
  const extraKeys = Object.keys(current.nodeSelector ?? {}).filter(k => !(k in desired.scheduling.nodeSelector));
  if (extraKeys.length > 0) patch.scheduling = { nodeSelector: Object.fromEntries(extraKeys.map(k => [k, null])) };
  if (current.tolerations !== undefined && desired.scheduling.tolerations === undefined) {
    patch.scheduling = { ...patch.scheduling, tolerations: null };
  }
  const livePodFixed = (current.overhead as { podFixed?: Record<string, unknown> } | undefined)?.podFixed;
  const wantedPodFixed = (desired.overhead as { podFixed?: Record<string, unknown> } | undefined)?.podFixed;
  if (current.overhead !== undefined && desired.overhead === undefined) {
    patch.overhead = null;
  } else if (livePodFixed && wantedPodFixed) {
    const extra = Object.keys(livePodFixed).filter(k => !(k in wantedPodFixed));
    if (extra.length > 0) patch.overhead = { podFixed: Object.fromEntries(extra.map(k => [k, null])) };
  }
  return Object.keys(patch).length > 0 ? patch : undefined;
}

export function planRuntimeClass(shim: ShimObject, keys: RecordKeys, existing: RuntimeClassView[]): { actions: Action[]; conflict?: string } {
  const desired = desiredRuntimeClass(shim, keys);
  const uid = shim.metadata.uid;
  const actions: Action[] = [];
  // A RuntimeClass this Shim made under a name the spec no longer uses.
  for (const rc of existing) {
    if (rc.name !== desired.metadata.name && rc.shimOwners.includes(uid)) actions.push({ kind: 'deleteRuntimeClass', name: rc.name });
  }
  const current = existing.find(rc => rc.name === desired.metadata.name);
  // None yet (a new Shim, or one whose RuntimeClass was deleted or pruned): created at once.
  if (!current) return { actions: [...actions, { kind: 'applyRuntimeClass', object: desired, replace: false }] };

  const ours = current.shimOwners.includes(uid);
  const adoptable = !ours && current.shimOwners.length === 0 && !current.foreignOwner
    && current.annotations[ShimNodeLabels.ADOPT_ANNOTATION] === shim.metadata.name;
  if (!ours && !adoptable) {
    const owner = current.shimOwners.length > 0 ? 'another Shim' : current.foreignOwner ? 'another owner' : 'no Shim';
    return {
      actions,
      conflict: `RuntimeClass "${current.name}" exists and belongs to ${owner}; it is left alone (delete it, or annotate it ${ShimNodeLabels.ADOPT_ANNOTATION}=${shim.metadata.name} to let this Shim adopt it)`,
    };
  }
  // The handler of a RuntimeClass is immutable: a new handler replaces the object.
  const replace = current.handler !== desired.handler;
  const cleanup = replace ? undefined : cleanupOf(current, desired);
  const inShape = ours && !replace && !cleanup && same(current.nodeSelector, desired.scheduling.nodeSelector)
    && same(current.tolerations, desired.scheduling.tolerations) && sameOverhead(current.overhead, desired.overhead)
    && carries(current.labels, desired.metadata.labels) && carries(current.annotations, desired.metadata.annotations);
  if (inShape) return { actions };
  return { actions: [...actions, { kind: 'applyRuntimeClass', object: desired, replace, ...(cleanup ? { cleanup } : {}) }] };
}
