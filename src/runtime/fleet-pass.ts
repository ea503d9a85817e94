// The fleet pass: every Shim planned in one pass, from one view of the fleet, and each node's
// admissions of all Shims handed over as one change set (change-sets.ts). Pure, as the
// planner is: the adapter (controller.ts) reads the caches once and carries out what comes back.
import { withChangeSets } from './change-sets';
import { judgeJobs, NO_WRITES, ObservedJob, OwnWrites, SettledWrites } from './job-judgement';
import { plan, PlanInput } from './planner';
import { Hold } from './held-shims';
import { JobView, Plan, RuntimeClassView, ShimObject } from './types';

export interface FleetInput extends Omit<PlanInput, 'shim' | 'jobs' | 'otherShims' | 'runtimeClasses'> {
  /** Every Shim, deleted ones included (they hold the others' handlers until they are gone). */
  readonly shims: readonly ShimObject[];
  /** The RuntimeClasses a Shim names or owns. */
  readonly runtimeClassesOf: (shim: ShimObject) => RuntimeClassView[];
  /** What the caches show of every installer Job (install mode NodeAgent: every request in the node records). */
  readonly observed: readonly ObservedJob[];
  /** What the controller created or deleted that the caches may not show yet. */
  readonly writes?: OwnWrites;
  /** Shims not planned in this pass (held-shims.ts, bounds not past): the others still see them. */
  readonly held?: readonly Hold[];
}

export interface ShimPlan extends Plan {
  readonly shim: ShimObject;
}

export interface FleetPlan {
  /** The plan of every Shim not held, in the order of `shims`; admissions name their change set. */
  readonly plans: readonly ShimPlan[];
  /** Every Job as this pass judged it: what the adapter acts on and reports. */
  readonly jobs: readonly JobView[];
  /** Own writes that no longer change what a pass sees: the adapter may forget them. */
  readonly settled: SettledWrites;
}

/** One pass over the fleet: the Jobs judged once at `now`, every Shim planned by them, admissions grouped per node. */
export function planFleet(input: FleetInput): FleetPlan {
  const { shims, runtimeClassesOf, observed, writes, held, ...common } = input;
  const judged = judgeJobs(observed, writes ?? NO_WRITES, Date.parse(input.now));
  const waiting = new Set((held ?? []).filter(h => h.untilMs > Date.parse(input.now)).map(h => h.shim));
  const plans = shims.filter(s => !waiting.has(s.metadata.name)).map(shim => ({
    shim,
    ...plan({
      ...common,
      shim,
      jobs: judged.views,
      otherShims: shims.filter(s => s !== shim),
      runtimeClasses: runtimeClassesOf(shim),
    }),
  }));
  return { plans: withChangeSets(plans), jobs: judged.views, settled: judged.settled };
}
