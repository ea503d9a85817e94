// Shims applied together are planned together. The constructs stamp every Shim of one apply
// unit with how many there are and a digest of them all (applied-together.ts): a changed Shim
// of a unit is not planned before the pass sees every Shim of its unit, so that the nodes get
// one change set for all of them (one containerd restart), whatever the order and pace at
// which the API server took them. Likewise a Shim of a unit being deleted waits while the
// others of its unit still exist and are not being deleted. Pure; the adapter keeps when each
// hold began (a Shim applied or deleted alone by hand is planned once its bound is past).
import { APPLIED_TOGETHER_ANNOTATION, parseAppliedTogether } from '../shared/applied-together';
import { ShimObject } from './types';

/** How long a changed Shim waits for the rest of its unit: an apply that stopped half-way. */
export const APPLY_HOLD_MS = 60_000;
/** How long a Shim being deleted waits for the rest of its unit: one deleted by hand, alone. */
export const DELETE_HOLD_MS = 30_000;

/** Why a Shim is not planned yet, and when it will be at the latest. */
export interface Hold {
  readonly shim: string;
  /** What the hold is about (holdKey): its bound counts from when the adapter first saw it. */
  readonly key: string;
  readonly reason: string;
  readonly untilMs: number;
}

/** What a hold is about: the Shim, its unit as stamped, and whether it is being deleted. */
export function holdKey(shim: ShimObject): string {
  return `${shim.metadata.name}\0${shim.metadata.annotations?.[APPLIED_TOGETHER_ANNOTATION] ?? ''}\0${Boolean(shim.metadata.deletionTimestamp)}`;
}

/**
 * Every Shim waiting for the rest of its unit, its bound past or not (`untilMs <= nowMs`: it is
 * planned now). `since`: when each hold (holdKey) began, as the adapter first saw it; one it
 * has not seen yet begins at `nowMs`.
 */
export function holdsOf(shims: readonly ShimObject[], since: ReadonlyMap<string, number>, nowMs: number): Hold[] {
  const holds: Hold[] = [];
  for (const shim of shims) {
    const unit = parseAppliedTogether(shim.metadata.annotations?.[APPLIED_TOGETHER_ANNOTATION]);
    if (!unit) continue;
    const stamp = shim.metadata.annotations![APPLIED_TOGETHER_ANNOTATION];
    const mates = shims.filter(s => s !== shim && s.metadata.annotations?.[APPLIED_TOGETHER_ANNOTATION] === stamp);
    const key = holdKey(shim);
    const began = since.get(key) ?? nowMs;
    const hold = (reason: string, boundMs: number) => holds.push({ shim: shim.metadata.name, key, reason, untilMs: began + boundMs });
    if (shim.metadata.deletionTimestamp) {
      const staying = mates.filter(s => !s.metadata.deletionTimestamp).length;
      if (staying > 0) hold(`${staying} Shim(s) applied together with it are not being deleted yet`, DELETE_HOLD_MS);
    } else if (changed(shim) && mates.length + 1 < unit.count) {
      hold(`${unit.count - mates.length - 1} of the ${unit.count} Shims applied together with it are not there yet`, APPLY_HOLD_MS);
    }
  }
  return holds;
}

/** A spec the controller has not acted on yet (a new Shim, or a new generation). */
function changed(shim: ShimObject): boolean {
  return shim.status?.observedGeneration !== shim.metadata.generation;
}
