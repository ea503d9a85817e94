// The RuntimeClass a Shim wants, and what to do about the one that exists. Pure.
// The controller owns only what it created or what says it may be adopted (I7): a
// RuntimeClass of the same name made by someone else is reported, never touched.
import { RecordKeys } from './node-record';
import { Action, RuntimeClassObject, RuntimeClassView, ShimObject } from './types';
import { ShimNodeLabels } from '../shared/node-labels';

/** The Shim as the controlling owner: the garbage collector removes what it owns with it. */
export function ownerReference(shim: ShimObject): object {
  return { apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', name: shim.metadata.name, uid: shim.metadata.uid, controller: true, blockOwnerDeletion: true };
}

export function desiredRuntimeClass(shim: ShimObject, keys: RecordKeys): RuntimeClassObject {
  const rc = shim.spec.runtimeClass;
  return {
    apiVersion: 'node.k8s.io/v1',
    kind: 'RuntimeClass',
    metadata: { name: rc.name, ownerReferences: [ownerReference(shim)] },
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

export function planRuntimeClass(shim: ShimObject, keys: RecordKeys, existing: RuntimeClassView[]): { actions: Action[]; conflict?: string } {
  const desired = desiredRuntimeClass(shim, keys);
  const uid = shim.metadata.uid;
  const actions: Action[] = [];
  // A RuntimeClass this Shim made under a name the spec no longer uses.
  for (const rc of existing) {
    if (rc.name !== desired.metadata.name && rc.shimOwners.includes(uid)) actions.push({ kind: 'deleteRuntimeClass', name: rc.name });
  }
  const current = existing.find(rc => rc.name === desired.metadata.name);
  if (!current) return { actions: [...actions, { kind: 'applyRuntimeClass', object: desired, replace: false, dropSelectorKeys: [] }] };

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
  const inShape = ours && !replace && same(current.nodeSelector, desired.scheduling.nodeSelector)
    && same(current.tolerations, desired.scheduling.tolerations) && same(current.overhead, desired.overhead);
  if (inShape) return { actions };
  // Apply cannot take away keys another manager added to the node selector, and a selector
  // that asks for more than the handler label would keep pods off ready nodes.
  const dropSelectorKeys = replace ? [] : Object.keys(current.nodeSelector ?? {}).filter(k => !(k in desired.scheduling.nodeSelector));
  return { actions: [...actions, { kind: 'applyRuntimeClass', object: desired, replace, dropSelectorKeys }] };
}
