// The pure planner: observed state in, actions and status out. No I/O, no clocks except
// the `now` it is given, so every decision is a table test away.
import * as crypto from 'crypto';
import { Action, Condition, FailedNode, JobView, NodeView, Operation, Plan, ShimObject, ShimStatus } from './types';
import { ShimNodeLabels } from '../constructs/node-labels';
import { isDnsLabel } from '../constructs/validation';

export const FINALIZER = 'runtime.spinkube.dev/finalizer';
export const MAX_FAILED_NODES = 20;
const OS_LABELS = ['kubernetes.io/os', 'beta.kubernetes.io/os'];
const ARCH_LABELS = ['kubernetes.io/arch', 'beta.kubernetes.io/arch'];

export interface PlanInput {
  readonly shim: ShimObject;
  readonly nodes: NodeView[];
  /** The Jobs this Shim owns. */
  readonly jobs: JobView[];
  /** Every other Shim, for handler and RuntimeClass conflicts. */
  readonly otherShims: ShimObject[];
  readonly now: string;
}

function hash(...parts: unknown[]): string {
  return crypto.createHash('sha256').update(JSON.stringify(parts)).digest('hex');
}

/** The runtime options, merged: `containerdRuntimeOptions` wins over its alias `runtimeOptions`. */
export function runtimeOptionsOf(spec: any): Record<string, string> {
  return { ...(spec.runtimeOptions ?? {}), ...(spec.containerdRuntimeOptions ?? {}) };
}

/**
 * What is installed, condensed: a change to the artifacts, checksums, handler or options
 * is a new revision that rolls out again.
 */
export function revisionOf(spec: any): string {
  const options = Object.entries(runtimeOptionsOf(spec)).sort(([a], [b]) => (a < b ? -1 : 1));
  const anon = spec.fetchStrategy?.anonHttp ?? {};
  const platforms = [...(anon.platforms ?? [])].map((p: any) => [p.os, p.arch, p.location, p.sha256 ?? ''])
    .sort((a, b) => (a.join('/') < b.join('/') ? -1 : 1));
  return hash(anon.location ?? '', anon.sha256 ?? '', platforms, spec.runtimeClass?.handler, options).slice(0, 10);
}

export function selects(selector: Record<string, string> | undefined, labels: Record<string, string>): boolean {
  return Object.entries(selector ?? {}).every(([k, v]) => labels[k] === v);
}

function label(labels: Record<string, string>, keys: string[]): string | undefined {
  for (const k of keys) if (labels[k]) return labels[k];
  return undefined;
}

export function platformOf(node: NodeView): string {
  return `${label(node.labels, OS_LABELS) ?? 'linux'}/${label(node.labels, ARCH_LABELS) ?? 'amd64'}`;
}

/** The artifact for a node: the entry for its platform, else the generic location. */
export function artifactFor(spec: any, node: NodeView): { location: string; sha256?: string } | undefined {
  const anon = spec.fetchStrategy?.anonHttp ?? {};
  const platform = platformOf(node);
  const match = (anon.platforms ?? []).find((p: any) => `${p.os}/${p.arch}` === platform);
  if (match) return { location: match.location, sha256: match.sha256 };
  return anon.location ? { location: anon.location, sha256: anon.sha256 } : undefined;
}

/** How many nodes may install at once. Percentages round up; never less than one. */
export function maxInFlight(spec: any, selectedNodes: number): number {
  const strategy = spec.rolloutStrategy ?? { type: 'recreate' };
  if (strategy.type !== 'rolling') return Number.POSITIVE_INFINITY;
  const max = strategy.rolling?.maxUpdate ?? 1;
  if (typeof max === 'string' && max.endsWith('%')) {
    return Math.max(1, Math.ceil((selectedNodes * Number(max.slice(0, -1))) / 100));
  }
  return Math.max(1, Number(max));
}

/** Deterministic, at most 63 characters, distinct per shim, node, operation and revision. */
export function jobName(shim: string, node: string, operation: Operation, revision: string): string {
  const prefix = shim.replace(/\./g, '-').slice(0, 30).replace(/-+$/, '');
  return `rcm-${prefix}-${operation === 'install' ? 'i' : 'u'}-${hash(shim, node, operation, revision).slice(0, 12)}`;
}

function olderThan(a: ShimObject, b: ShimObject): boolean {
  const ta = a.metadata.creationTimestamp ?? '';
  const tb = b.metadata.creationTimestamp ?? '';
  return ta !== tb ? ta < tb : a.metadata.name < b.metadata.name;
}

/** Why the Shim cannot be acted on, or undefined. */
export function invalidReason(shim: ShimObject, others: ShimObject[], selected: NodeView[]): string | undefined {
  try {
    ShimNodeLabels.stateKey(shim.metadata.name);
  } catch (e) {
    return (e as Error).message;
  }
  const handler = shim.spec?.runtimeClass?.handler;
  if (typeof handler !== 'string' || !isDnsLabel(handler)) return `handler "${handler}" is not a DNS label`;
  for (const other of others) {
    if (other.metadata.deletionTimestamp || !olderThan(other, shim)) continue;
    if (other.spec?.runtimeClass?.handler === handler) return `handler "${handler}" is already claimed by Shim "${other.metadata.name}"`;
    if (other.spec?.runtimeClass?.name === shim.spec?.runtimeClass?.name) {
      return `RuntimeClass "${shim.spec.runtimeClass.name}" is already claimed by Shim "${other.metadata.name}"`;
    }
  }
  for (const node of selected) {
    if (!artifactFor(shim.spec, node)) return `no artifact for platform ${platformOf(node)} of node ${node.name}`;
  }
  return undefined;
}

/** Jobs by node and operation: looked up once per node, so a Map instead of a scan. */
function indexJobs(jobs: JobView[]): (node: string, operation: Operation, revision?: string) => JobView | undefined {
  const index = new Map<string, JobView[]>();
  for (const job of jobs) {
    const key = `${job.operation}/${job.node}`;
    index.set(key, [...(index.get(key) ?? []), job]);
  }
  return (node, operation, revision) => (index.get(`${operation}/${node}`) ?? []).find(j => revision === undefined || j.revision === revision);
}

function describeFailure(job: JobView | undefined, fallbackReason = 'InstallFailed'): { reason: string; message: string } {
  return {
    reason: job?.result?.reason ?? fallbackReason,
    message: job?.result?.message ?? 'the installer Job failed without a result',
  };
}

export function plan(input: PlanInput): Plan {
  const { shim, nodes, now } = input;
  const findJob = indexJobs(input.jobs);
  const name = shim.metadata.name;
  const actions: Action[] = [];
  const previous: ShimStatus | undefined = shim.status;
  const revision = revisionOf(shim.spec ?? {});
  let stateKey: string | undefined;
  let revisionKey: string | undefined;
  try {
    stateKey = ShimNodeLabels.stateKey(name);
    revisionKey = ShimNodeLabels.revisionKey(name);
  } catch {
    // reported by invalidReason below
  }
  const stateOf = (n: NodeView) => (stateKey ? n.labels[stateKey] : undefined);
  const revisionOn = (n: NodeView) => (revisionKey ? n.annotations[revisionKey] : undefined);
  const labelled = nodes.filter(n => stateOf(n) !== undefined);

  // Failed uninstalls are retried when their Job expires; meanwhile the status says why.
  const uninstallFailures: FailedNode[] = [];
  /** One node's uninstall, step by step; true once it is done and the node cleared. */
  const uninstall = (node: NodeView, why: string): boolean => {
    const job = findJob(node.name, 'uninstall');
    if (job?.phase === 'succeeded') {
      actions.push({ kind: 'clearNode', node: node.name });
      actions.push({ kind: 'event', type: 'Normal', reason: 'Uninstalled', message: `removed from node ${node.name}${why}` });
      return true;
    }
    if (job?.phase === 'failed') {
      const failure = describeFailure(job, 'UninstallFailed');
      uninstallFailures.push({ name: node.name, ...failure });
      if (stateOf(node) !== ShimNodeLabels.FAILED) {
        actions.push({ kind: 'setNodeState', node: node.name, state: ShimNodeLabels.FAILED });
        actions.push({ kind: 'event', type: 'Warning', reason: 'UninstallFailed', message: `node ${node.name}: ${failure.reason}: ${failure.message}` });
      }
    } else if (!job) {
      if (stateOf(node) !== ShimNodeLabels.UNINSTALLING) actions.push({ kind: 'setNodeState', node: node.name, state: ShimNodeLabels.UNINSTALLING });
      actions.push({ kind: 'createJob', node: node.name, operation: 'uninstall', revision });
    }
    return false;
  };

  // Deletion: uninstall wherever the shim left a label, then let go.
  if (shim.metadata.deletionTimestamp) {
    const remaining = labelled.filter(node => !uninstall(node, '')).length;
    if (remaining === 0 && (shim.metadata.finalizers ?? []).includes(FINALIZER)) {
      actions.push({ kind: 'deleteRuntimeClass' }, { kind: 'removeFinalizer' });
    }
    const status = buildStatus(shim, previous, now, {
      revision,
      nodes: 0,
      ready: 0,
      failed: [],
      uninstallFailed: uninstallFailures,
      inFlight: remaining,
      stopped: false,
      deleting: true,
      progressing: { reason: 'Deleting', message: `uninstalling from ${remaining} node(s)` },
    });
    return { actions, status };
  }

  if (!(shim.metadata.finalizers ?? []).includes(FINALIZER)) actions.push({ kind: 'addFinalizer' });
  const selected = nodes.filter(n => selects(shim.spec?.nodeSelector, n.labels)).sort((a, b) => (a.name < b.name ? -1 : 1));
  const invalid = invalidReason(shim, input.otherShims, selected);
  if (invalid) {
    const status = buildStatus(shim, previous, now, { revision, nodes: selected.length, ready: 0, failed: [], inFlight: 0, stopped: true, invalid });
    const known = previous?.conditions?.find(c => c.type === 'Degraded' && c.reason === 'InvalidShim' && c.message === invalid);
    if (!known) actions.push({ kind: 'event', type: 'Warning', reason: 'InvalidShim', message: invalid });
    return { actions, status };
  }
  actions.push({ kind: 'applyRuntimeClass' });

  const previousFailures = new Map((previous?.failedNodes ?? []).map(f => [f.name, f]));
  const failed: FailedNode[] = [];
  const needed: NodeView[] = [];
  let ready = 0;
  let inFlight = 0;
  for (const node of selected) {
    const state = stateOf(node);
    const current = revisionOn(node) === revision;
    const job = findJob(node.name, 'install', revision);
    if (job?.phase === 'succeeded') {
      ready++;
      if (!(state === ShimNodeLabels.PROVISIONED && current)) {
        actions.push({ kind: 'setNodeState', node: node.name, state: ShimNodeLabels.PROVISIONED, revision });
        actions.push({ kind: 'event', type: 'Normal', reason: 'Installed', message: `installed on node ${node.name} (revision ${revision})` });
      }
    } else if (job?.phase === 'failed') {
      const why = describeFailure(job);
      failed.push({ name: node.name, ...why });
      if (!(state === ShimNodeLabels.FAILED && current)) {
        actions.push({ kind: 'setNodeState', node: node.name, state: ShimNodeLabels.FAILED, revision });
        actions.push({ kind: 'event', type: 'Warning', reason: 'InstallFailed', message: `node ${node.name}: ${why.reason}: ${why.message}` });
      }
    } else if (state === ShimNodeLabels.PROVISIONED && current) {
      ready++;
    } else if (state === ShimNodeLabels.FAILED && current) {
      failed.push(previousFailures.get(node.name) ?? { name: node.name, reason: 'InstallFailed', message: 'the install failed (details expired with its Job)' });
    } else if (job?.phase === 'running' || (state === ShimNodeLabels.PENDING && current && job)) {
      inFlight++;
    } else {
      needed.push(node);
    }
  }

  // A failure stops the rollout: no new installs until the spec changes or the node is fixed.
  const stopped = failed.length > 0;
  let budget = maxInFlight(shim.spec ?? {}, selected.length) - inFlight;
  if (!stopped) {
    for (const node of needed) {
      if (budget <= 0) break;
      budget--;
      inFlight++;
      // A node running an older revision stays provisioned (its pods keep working) while
      // the new one installs; a fresh node is marked pending.
      if (stateOf(node) !== ShimNodeLabels.PROVISIONED) {
        actions.push({ kind: 'setNodeState', node: node.name, state: ShimNodeLabels.PENDING, revision });
      }
      actions.push({ kind: 'createJob', node: node.name, operation: 'install', revision, artifact: artifactFor(shim.spec, node) });
    }
  }

  // Nodes that no longer match: uninstall, then forget.
  const selectedNames = new Set(selected.map(n => n.name));
  for (const node of labelled.filter(n => !selectedNames.has(n.name))) uninstall(node, ' (no longer selected)');

  const status = buildStatus(shim, previous, now, {
    revision, nodes: selected.length, ready, failed, uninstallFailed: uninstallFailures, inFlight, stopped,
  });
  return { actions, status };
}

interface Tally {
  revision: string;
  nodes: number;
  ready: number;
  failed: FailedNode[];
  /** Nodes whose uninstall failed (deselected ones, or all of them while deleting). */
  uninstallFailed?: FailedNode[];
  inFlight: number;
  stopped: boolean;
  deleting?: boolean;
  invalid?: string;
  progressing?: { reason: string; message: string };
}

function buildStatus(shim: ShimObject, previous: ShimStatus | undefined, now: string, t: Tally): ShimStatus {
  const byName = (a: FailedNode, b: FailedNode) => (a.name < b.name ? -1 : 1);
  const failed = [...t.failed].sort(byName);
  const uninstallFailed = [...t.uninstallFailed ?? []].sort(byName);
  const allFailed = [...failed, ...uninstallFailed];
  const generation = shim.metadata.generation;
  const cond = (type: string, status: boolean, reason: string, message: string): Condition => {
    const before = previous?.conditions?.find(c => c.type === type);
    const value = status ? 'True' : 'False';
    return {
      type,
      status: value,
      reason,
      message,
      // The time of the last change of status, not of every reconcile.
      lastTransitionTime: before && before.status === value && before.lastTransitionTime ? before.lastTransitionTime : now,
      observedGeneration: generation,
    };
  };
  const first = failed[0];
  // Install failures come first: they stop the rollout. Uninstall failures are reported too.
  const worst = first ?? uninstallFailed[0];
  const degraded = worst
    ? cond('Degraded', true, first ? 'InstallFailed' : 'UninstallFailed',
      `node ${worst.name}: ${worst.reason}: ${worst.message}${allFailed.length > 1 ? ` (and ${allFailed.length - 1} more)` : ''}`)
    : cond('Degraded', false, 'AsExpected', 'no failures');
  const conditions: Condition[] = t.invalid
    ? [
      cond('Ready', false, 'InvalidShim', t.invalid),
      cond('Progressing', false, 'InvalidShim', t.invalid),
      cond('Degraded', true, 'InvalidShim', t.invalid),
    ]
    : [
      t.deleting
        ? cond('Ready', false, 'Deleting', 'the Shim is being deleted')
        : cond('Ready', t.nodes === t.ready && failed.length === 0, t.nodes === t.ready ? 'AllNodesReady' : 'Installing',
          `${t.ready}/${t.nodes} selected nodes run revision ${t.revision}`),
      t.progressing
        ? cond('Progressing', true, t.progressing.reason, t.progressing.message)
        : cond('Progressing', !t.stopped && t.ready < t.nodes, t.stopped ? 'RolloutStopped' : t.ready < t.nodes ? 'RollingOut' : 'Complete',
          t.stopped ? `stopped after a failure on node ${first.name}` : `${t.inFlight} node(s) installing, ${t.ready}/${t.nodes} done`),
      degraded,
    ];
  return {
    observedGeneration: generation,
    revision: t.revision,
    nodes: t.nodes,
    nodesReady: t.ready,
    nodesFailed: allFailed.length,
    failedNodes: allFailed.slice(0, MAX_FAILED_NODES),
    conditions,
  };
}
