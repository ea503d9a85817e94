// The pure planner: observed state in, actions and status out. No I/O, no clocks except
// the `now` it is given, so every decision is a table test away. A pass (planPass) first
// judges the installer Jobs from the facts the adapter observed (job-judgement.ts), then
// plans with them (plan).
//
// The state model (docs/operators/state-model.md): each node records per Shim what is
// installed (handler, revision, artifact hash, boot ID) and the last failure; the handler
// label is the only scheduling gate and is set only while that handler is installed,
// registered and meant to serve. Every other decision is derived from that record, the
// running Jobs and the spec, on every pass (level-triggered).
import * as crypto from 'crypto';
import { judgeJobs, NO_WRITES, ObservedJob, OwnWrites, SettledWrites } from './job-judgement';
import { fold, hasTrace, isFailureOf, nodePatch, parseJson, readRecord, RecordKeys, recordKeys, renderRecord, sameOperation, wholeRecordPatch } from './node-record';
import { planRuntimeClass } from './runtime-class';
import {
  Action, Condition, FailedNode, FailureRecord, NO_INSTALLER_REPORT, JobRequest, JobView, NodeArtifact, NodeRecord, NodeView, Operation, Plan,
  RecordPatch, RetryPolicy, RuntimeClassView,
  ShimObject, ShimSpec, ShimStatus,
} from './types';
import { HANDLER_NOT_REPORTED, handlerNotReportedMessage, KUBELET_REPORT_WAIT_MS } from '../shared/agent-protocol';
import { ShimNodeLabels } from '../shared/node-labels';
import { isDnsLabel, labelValueProblem, metadataKeyProblem, nodeArch, runtimeOptionProblem } from '../shared/validation';

export const FINALIZER = 'runtime.spinkube.dev/finalizer';
/** A new value of this Shim annotation retries every failed node at once. */
export const RETRY_ANNOTATION = 'runtime.spinkube.dev/retry';
export const MAX_FAILED_NODES = 20;
const OS_LABELS = ['kubernetes.io/os', 'beta.kubernetes.io/os'];
const NO_JOBS: readonly JobView[] = Object.freeze([]) as readonly JobView[];
const ARCH_LABELS = ['kubernetes.io/arch', 'beta.kubernetes.io/arch'];

export interface PlanInput {
  readonly shim: ShimObject;
  readonly nodes: NodeView[];
  /**
   * The node of a name among `nodes`, from the adapter's cache: a pass then makes no index of
   * every node's name.
   * @default an index of `nodes`, made when a pass needs one
   */
  readonly nodeNamed?: (name: string) => NodeView | undefined;
  /**
   * Every installer Job of the controller (other Shims' too: a handler is shared per node), as
   * judged at `now` (planPass judges them from what the adapter observed).
   */
  readonly jobs: JobView[];
  /** Every other Shim, for handler and RuntimeClass conflicts. */
  readonly otherShims: ShimObject[];
  /** The RuntimeClass the spec names (if it exists) and every RuntimeClass this Shim owns. */
  readonly runtimeClasses: RuntimeClassView[];
  readonly retry: RetryPolicy;
  readonly now: string;
  /**
   * How operations reach the nodes (installer Jobs, or the node agents).
   * @default 'jobs'
   */
  readonly installMode?: 'jobs' | 'agent';
  /**
   * What the last passes' visits gave, kept by the adapter from pass to pass: nodes as they were
   * are then counted without a visit (see VisitMemos).
   * @default none: every node is visited
   */
  readonly visits?: VisitMemos;
}

/** A pass's input: the Jobs as the adapter observed them, not judged yet. */
export interface PassInput extends Omit<PlanInput, 'jobs'> {
  /** What the caches show of every installer Job (install mode NodeAgent: every request in the node records). */
  readonly observed: readonly ObservedJob[];
  /** What the controller created or deleted that the caches may not show yet. */
  readonly writes?: OwnWrites;
}

export interface PassPlan extends Plan {
  /** Every Job as this pass judged it (before this Shim's kubelet check): what the adapter acts on and reports. */
  readonly jobs: readonly JobView[];
  /** Own writes that no longer change what a pass sees: the adapter may forget them. */
  readonly settled: SettledWrites;
}

/** One pass: the Jobs judged from the facts at `now`, then the plan. */
export function planPass(input: PassInput): PassPlan {
  const { observed, writes, ...rest } = input;
  const judged = judgeJobs(observed, writes ?? NO_WRITES, Date.parse(input.now));
  return { ...plan({ ...rest, jobs: judged.views }), jobs: judged.views, settled: judged.settled };
}

function hash(...parts: unknown[]): string {
  return crypto.createHash('sha256').update(JSON.stringify(parts)).digest('hex');
}

/** The runtime options, merged: `containerdRuntimeOptions` wins over its alias `runtimeOptions`. */
export function runtimeOptionsOf(spec: ShimSpec): Record<string, string> {
  return { ...(spec.runtimeOptions ?? {}), ...(spec.containerdRuntimeOptions ?? {}) };
}

/**
 * What is installed, condensed: a change to the artifacts, checksums, handler or options
 * is a new revision that rolls out again.
 */
export function revisionOf(spec: ShimSpec): string {
  const options = Object.entries(runtimeOptionsOf(spec)).sort(([a], [b]) => (a < b ? -1 : 1));
  const anon = spec.fetchStrategy?.anonHttp ?? {};
  const platforms = platformsOf(spec).map(p => [p.os, p.arch, p.location, p.sha256 ?? ''])
    .sort((a, b) => (a.join('/') < b.join('/') ? -1 : 1));
  // Fields added later count only when set: a Shim that does not use them keeps its revision
  // across controller upgrades (a new revision would reinstall every node).
  const image = spec.fetchStrategy?.image;
  const later = [
    ...(image ? [['image', image.reference, image.path, image.sha256 ?? '']] : []),
    ...(spec.payload ? [['payload', spec.payload.shim, spec.payload.runtimeType ?? '']] : []),
    ...(spec.containerdRuntime ? [['containerdRuntime', canonical(spec.containerdRuntime)]] : []),
  ];
  return hash(anon.location ?? '', anon.sha256 ?? '', platforms, spec.runtimeClass?.handler, options, ...later).slice(0, 10);
}

/** JSON with sorted keys: the same settings give the same text. */
function canonical(value: object): string {
  return JSON.stringify(Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : 1))));
}


/**
 * Every per-platform artifact, with architectures as nodes label them: the upstream shape
 * (`fetchStrategy.platforms`) first, then the older nested one (`anonHttp.platforms`), which
 * is treated alike. The first entry for a platform wins.
 */
export function platformsOf(spec: ShimSpec): { os: string; arch: string; location: string; sha256?: string }[] {
  const all = [...spec.fetchStrategy?.platforms ?? [], ...spec.fetchStrategy?.anonHttp?.platforms ?? []]
    .map(p => ({ os: p.os, arch: nodeArch(p.arch), location: p.location, ...(p.sha256 ? { sha256: p.sha256 } : {}) }));
  return all.filter((p, i) => all.findIndex(q => q.os === p.os && q.arch === p.arch) === i);
}

export function selects(selector: Record<string, string> | undefined, labels: Record<string, string>): boolean {
  if (!selector) return true;
  for (const k in selector) if (labels[k] !== selector[k]) return false;
  return true;
}

function label(labels: Record<string, string>, keys: string[]): string | undefined {
  for (const k of keys) if (labels[k]) return labels[k];
  return undefined;
}

export function platformOf(node: NodeView): string {
  return `${label(node.labels, OS_LABELS) ?? 'linux'}/${label(node.labels, ARCH_LABELS) ?? 'amd64'}`;
}

/** The artifact for a node: the entry for its platform, else the generic location. */
export function artifactFor(spec: ShimSpec, node: NodeView): NodeArtifact | undefined {
  const image = spec.fetchStrategy?.image;
  if (image) {
    const pullSecrets = (image.imagePullSecrets ?? []).map(secret => secret.name);
    return { image: { reference: image.reference, path: image.path, pullSecrets }, sha256: image.sha256 };
  }
  const anon = spec.fetchStrategy?.anonHttp ?? {};
  const platform = platformOf(node);
  const match = platformsOf(spec).find(p => `${p.os}/${p.arch}` === platform);
  if (match) return { location: match.location, sha256: match.sha256 };
  return anon.location ? { location: anon.location, sha256: anon.sha256 } : undefined;
}

/** How many nodes may run an operation at once. Percentages round up; never less than one. */
export function maxInFlight(spec: ShimSpec, nodes: number): number {
  const strategy = spec.rolloutStrategy ?? { type: 'recreate' };
  if (strategy.type !== 'rolling') return Number.POSITIVE_INFINITY;
  const max = strategy.rolling?.maxUpdate ?? 1;
  if (typeof max === 'string' && max.endsWith('%')) {
    return Math.max(1, Math.ceil((nodes * Number(max.slice(0, -1))) / 100));
  }
  return Math.max(1, Number(max));
}

/** Deterministic (a re-created Job is the same Job), at most 63 characters, distinct per attempt. */
export function jobName(shim: string, node: string, operation: Operation, handler: string, revision: string, attempt: number, salt = ''): string {
  const prefix = shim.replace(/\./g, '-').slice(0, 30).replace(/-+$/, '');
  return `rcm-${prefix}-${operation === 'install' ? 'i' : 'u'}-${hash(shim, node, operation, handler, revision, attempt, salt).slice(0, 12)}`;
}

/**
 * The delay before attempt `failed + 1`: doubled per failure, bounded. A node whose installer
 * reported failures as often as allowed waits the longest delay between attempts: such
 * failures tend to repeat (a containerd that refuses the change), and every attempt restarts
 * its containerd; the retry annotation retries it at once. When the installer did not report
 * (its container could not start while containerd restarted for another Shim, or it
 * crashed), the doubled delay goes on.
 */
export function backoffSeconds(policy: RetryPolicy, failed: number, reportedByInstaller = true): number {
  if (reportedByInstaller && failed >= policy.failureThreshold) return policy.maxSeconds;
  return Math.min(policy.maxSeconds, policy.baseSeconds * 2 ** Math.max(0, failed - 1));
}

function olderThan(a: ShimObject, b: ShimObject): boolean {
  const ta = a.metadata.creationTimestamp ?? '';
  const tb = b.metadata.creationTimestamp ?? '';
  return ta !== tb ? ta < tb : a.metadata.name < b.metadata.name;
}

/** Why the Shim cannot be acted on, or undefined. */
export function invalidReason(shim: ShimObject, others: ShimObject[], selected: NodeView[], installMode: 'jobs' | 'agent' = 'jobs'): string | undefined {
  const handler = shim.spec?.runtimeClass?.handler;
  if (typeof handler !== 'string' || !isDnsLabel(handler)) return `handler "${handler}" is not a DNS label`;
  for (const other of others) {
    if (other.metadata.deletionTimestamp || !olderThan(other, shim)) continue;
    if (other.spec?.runtimeClass?.handler === handler) return `handler "${handler}" is already claimed by Shim "${other.metadata.name}"`;
    if (other.spec?.runtimeClass?.name === shim.spec?.runtimeClass?.name) {
      return `RuntimeClass "${shim.spec.runtimeClass.name}" is already claimed by Shim "${other.metadata.name}"`;
    }
  }
  const problem = specProblem(shim.spec) ?? (installMode === 'agent' ? agentModeProblem(shim.spec) : undefined);
  if (problem) return problem;
  // An artifact in an image, or a location for any platform, serves every node.
  if (shim.spec.fetchStrategy?.image || shim.spec.fetchStrategy?.anonHttp?.location) return undefined;
  // Per platform, not per node: thousands of nodes share a handful of platforms (and a node
  // of the platform just checked costs two label reads).
  const checked = new Set<string>();
  let last: [string | undefined, string | undefined] | undefined;
  for (const node of selected) {
    const os = label(node.labels, OS_LABELS);
    const arch = label(node.labels, ARCH_LABELS);
    if (last && os === last[0] && arch === last[1]) continue;
    last = [os, arch];
    const platform = platformOf(node);
    if (checked.has(platform)) continue;
    if (!artifactFor(shim.spec, node)) return `no artifact for platform ${platform} of node ${node.name}`;
    checked.add(platform);
  }
  return undefined;
}

/** What in the spec itself the API server's schema cannot refuse but the node would. */
function specProblem(spec: ShimSpec): string | undefined {
  const fetch = spec.fetchStrategy;
  if (fetch?.image && (fetch.anonHttp || fetch.platforms?.length)) {
    return 'fetchStrategy: give either image or anonHttp/platforms, not both';
  }
  for (const [key, value] of Object.entries(runtimeOptionsOf(spec))) {
    const option = runtimeOptionProblem(key, value, spec.payload !== undefined);
    if (option) return option.in === 'key' ? `runtime option ${option.problem}` : `runtime option "${key}" ${option.problem}`;
  }
  // The API server would refuse the RuntimeClass on every pass; say why once, on the Shim.
  for (const field of ['labels', 'annotations'] as const) {
    for (const [key, value] of Object.entries(spec.runtimeClass?.[field] ?? {})) {
      const problem = metadataKeyProblem(key) ?? (field === 'labels' ? labelValueProblem(key, value) : undefined);
      if (problem) return `runtimeClass.${field}: ${problem}`;
    }
  }
  return undefined;
}

/**
 * The reason, in a Shim's message, of an artifact in an image in install mode NodeAgent (the
 * agent fetches over HTTP(S) only).
 */
export const IMAGE_ARTIFACT_NEEDS_JOBS = 'ImageArtifactNeedsJobs';

/**
 * What install mode NodeAgent cannot do: an artifact in an image is copied out by a Job's init
 * container (the kubelet pulls it); the agent pulls no images. Refused before any node is
 * touched, rather than failing on every node failureThreshold times.
 */
function agentModeProblem(spec: ShimSpec): string | undefined {
  if (!spec.fetchStrategy?.image) return undefined;
  return `fetchStrategy.image: ${IMAGE_ARTIFACT_NEEDS_JOBS}: install mode NodeAgent fetches artifacts over HTTP(S) only `
    + '(anonHttp or platforms); use install mode Jobs for an artifact in an image';
}

const INSTALLED_SUFFIX = `.${ShimNodeLabels.DOMAIN}/installed`;

/**
 * The handlers each Shim's record on a node lists, by the record's annotation key. Read once
 * per node object (the caches keep it until the node changes): a pass asks it of every node
 * due an install, thousands while a rollout is under way.
 */
const recordedHandlers = new WeakMap<NodeView, readonly (readonly [string, readonly string[]])[]>();

function handlersRecorded(node: NodeView): readonly (readonly [string, readonly string[]])[] {
  let known = recordedHandlers.get(node);
  if (known) return known;
  const records: [string, string[]][] = [];
  for (const key in node.annotations) {
    if (!key.endsWith(INSTALLED_SUFFIX)) continue;
    const handlers: string[] = [];
    // Parsed as readRecord parses it (kept by its text). A damaged record lists none: its
    // handler label still guards its node.
    const installed = parseJson(node.annotations[key]);
    if (Array.isArray(installed)) for (const entry of installed) if (typeof entry?.handler === 'string') handlers.push(entry.handler);
    records.push([key, handlers]);
  }
  recordedHandlers.set(node, known = records);
  return known;
}

/** Whether another Shim has the handler installed on the node (its record) or is working on it (its Job). */
function handlerBusy(node: NodeView, handler: string, ownInstalledKey: string, otherJobs: readonly JobView[]): boolean {
  // Indexed loops: asked for every node due an install at every pass (an iterator's results were garbage).
  for (let i = 0; i < otherJobs.length; i++) if (otherJobs[i].phase === 'running' && otherJobs[i].handler === handler) return true;
  const records = handlersRecorded(node);
  for (let i = 0; i < records.length; i++) if (records[i][0] !== ownInstalledKey && records[i][1].includes(handler)) return true;
  return false;
}

function someRunning(jobs: readonly JobView[]): boolean {
  for (let i = 0; i < jobs.length; i++) if (jobs[i].phase === 'running') return true;
  return false;
}

/** The next operation a node needs. */
interface Step {
  readonly operation: Operation;
  readonly handler: string;
  readonly revision: string;
  /** A re-run of the current install after a reboot: not a rollout, so neither budgeted nor stopped. */
  readonly reverify?: boolean;
}

interface Candidate {
  readonly node: NodeView;
  readonly step: Step;
  readonly attempt: number;
  /** A retry of a node that failed: first in line, and it goes on while the rollout is stopped. */
  readonly retry: boolean;
  /**
   * Another Shim's installer runs on the node now: a Job started there now joins its change
   * set on the node (one containerd restart for both), so such nodes come first in line.
   */
  readonly joins: boolean;
  readonly supersedes: readonly JobView[];
  /** The node's record as this pass leaves it, and whether the node is meant to serve (for JobRequest.recordOnSuccess). */
  readonly record: NodeRecord;
  readonly serving: boolean;
}

/** What one pass found, for the status. */
interface Tally {
  revision: string;
  nodes: number;
  ready: number;
  failures: (FailedNode & { exhausted: boolean })[];
  inFlight: number;
  waitingForNodes: string[];
  /** What a node must be to take an operation: Ready (install mode Jobs), or have a Ready agent pod (NodeAgent). */
  agentMode?: boolean;
  blocked: string[];
  queued: number;
  stopped: boolean;
  deleting: boolean;
  remaining: number;
  invalid?: string;
  conflict?: string;
}

function nextStep(record: NodeRecord, serving: boolean, desired: Omit<Step, 'operation'> | undefined, bootID?: string): Step | undefined {
  const top = record.installed[0];
  if (!serving) return top ? { operation: 'uninstall', handler: top.handler, revision: top.revision } : undefined;
  if (!desired) return undefined; // an invalid Shim: the nodes keep what they have
  if (!top || top.handler !== desired.handler || top.revision !== desired.revision) return { operation: 'install', ...desired };
  if (top.bootID && bootID && top.bootID !== bootID) return { operation: 'install', ...desired, reverify: true };
  const stale = record.installed.find(e => e.handler !== desired.handler);
  return stale ? { operation: 'uninstall', handler: stale.handler, revision: stale.revision } : undefined;
}

// The kubelet's confirmation (shared with the node agent, which confirms its own installs).
export { HANDLER_NOT_REPORTED, KUBELET_REPORT_WAIT_MS };

/**
 * Where a node reports its runtime handlers, an install counts only once the kubelet lists
 * the handler (what the container runtime itself serves, seen by the kubelet): until then it
 * is still running (checked again when the wait ends), and after KUBELET_REPORT_WAIT_MS it
 * failed. A node that reports none (Kubernetes before 1.30, containerd before 2.0) goes by
 * the installer's own check alone.
 */
export function confirmByKubelet(job: JobView, node: NodeView | undefined, nowMs: number): { job: JobView; recheckAt?: number } {
  const listed = node?.runtimeHandlers;
  if (listed === undefined || listed.includes(job.handler)) return { job };
  const finished = Date.parse(job.finishedAt ?? '');
  const due = (Number.isNaN(finished) ? nowMs : finished) + KUBELET_REPORT_WAIT_MS;
  if (nowMs < due) return { job: { ...job, phase: 'running' }, recheckAt: due };
  return {
    job: {
      ...job,
      phase: 'failed',
      result: {
        reason: HANDLER_NOT_REPORTED,
        message: handlerNotReportedMessage(job.handler, listed),
      },
    },
  };
}

export function plan(input: PlanInput): Plan {
  const { shim, now, retry: policy } = input;
  const name = shim.metadata.name;
  const uid = shim.metadata.uid;
  const actions: Action[] = [];
  const deleting = Boolean(shim.metadata.deletionTimestamp);
  const hasFinalizer = (shim.metadata.finalizers ?? []).includes(FINALIZER);
  const revision = revisionOf(shim.spec ?? {});
  const previous = shim.status;
  const retryToken = shim.metadata.annotations?.[RETRY_ANNOTATION];

  let keys: RecordKeys;
  try {
    keys = recordKeys(name);
  } catch (e) {
    // No label can name this Shim, so no node can hold anything of it.
    const invalid = (e as Error).message;
    if (deleting && hasFinalizer) actions.push({ kind: 'removeFinalizer' });
    else if (!deleting) actions.push(...invalidEvent(previous, invalid));
    return { actions, status: buildStatus(shim, previous, now, emptyTally(revision, { invalid, deleting })) };
  }

  if (!deleting && !hasFinalizer) actions.push({ kind: 'addFinalizer' });
  const selector = Object.entries(shim.spec?.nodeSelector ?? {});
  const matches = (n: NodeView) => selector.length === 0 || selector.every(([k, v]) => n.labels[k] === v);
  const selected = deleting ? [] : selector.length === 0 ? input.nodes : input.nodes.filter(matches);
  let index: Map<string, NodeView> | undefined;
  const nodeNamed = input.nodeNamed ?? ((n: string) => (index ??= new Map(input.nodes.map(v => [v.name, v]))).get(n));
  const invalid = deleting ? undefined : invalidReason(shim, input.otherShims, selected, input.installMode);
  if (invalid) actions.push(...invalidEvent(previous, invalid));
  const desired = invalid || deleting ? undefined : { handler: shim.spec.runtimeClass.handler, revision };

  const nowMs = Date.parse(now);
  let requeueAt: number | undefined;
  const own = new Map<string, JobView[]>();
  const others = new Map<string, JobView[]>();
  for (const seen of input.jobs) {
    let job = seen;
    if (job.shimUid === uid && job.phase === 'succeeded' && job.operation === 'install') {
      const judged = confirmByKubelet(job, nodeNamed(job.node), nowMs);
      job = judged.job;
      if (judged.recheckAt !== undefined) requeueAt = Math.min(requeueAt ?? judged.recheckAt, judged.recheckAt);
    }
    const byNode = job.shimUid === uid ? own : others;
    const list = byNode.get(job.node);
    if (list) list.push(job);
    else byNode.set(job.node, [job]);
  }

  const tally: Tally = { ...emptyTally(revision, { invalid, deleting, nodes: selected.length }), agentMode: input.installMode === 'agent' };
  // The nodes due an operation, by precedence, each in order of name: retries first, then
  // removals, then installs; within each, the nodes where another Shim's installer runs now
  // (the node restarts containerd once for both).
  const order = (retry: boolean, step: Step, joins: boolean) => (retry ? 0 : step.operation === 'uninstall' ? 2 : 4) + (joins ? 0 : 1);
  // A candidate counted again unvisited (VisitMemo) is its node's place: made a Candidate only
  // when the admission loop reaches it, not for every node due an operation.
  const candidates: (Candidate | number)[][] = [[], [], [], [], [], []];
  // No pass admits more of a bucket's nodes than the budget of the whole fleet: past that many
  // (exempt ones aside), a bucket's nodes are only counted, each queued as it would have been.
  // While a rollout is under way most nodes are due an install, thousands at every pass.
  const cap = maxInFlight(shim.spec ?? {}, input.nodes.length);
  const budgeted = [0, 0, 0, 0, 0, 0];
  const beyondCap = [0, 0, 0, 0, 0, 0];
  let traced = 0;
  const results: Result[] = [];
  // Everything of this pass that derive() reads besides the node and whether it serves.
  const settings = sameText(uid, JSON.stringify([name, deleting, desired?.handler, desired?.revision, retryToken, policy.failureThreshold]));
  const pass: PassContext = { keys, desired, retryToken, policy, now };

  const nodes = byName(input.nodes);
  /**
   * The candidate at place `i`, counted again unvisited: its visit had no Job, no failure that
   * counts and the same settings, so it is what that visit made of the same node.
   */
  const unvisited = (i: number): Candidate => {
    const node = nodes[i];
    const serving = !deleting && matches(node);
    const d = derivedOnce(node, uid, settings, serving, pass);
    return { node, step: d.step!, attempt: 1, retry: false, joins: false, supersedes: NO_JOBS, record: d.record, serving };
  };
  const memo = (input.visits ?? NO_MEMO).start(uid, `${settings}\0${JSON.stringify(selector)}\0${input.installMode ?? 'jobs'}`, nodes, input.jobs, nodeNamed);
  // An indexed loop: plan() is large, and an iterator's result objects were thousands a pass.
  for (let i = 0; i < nodes.length; i++) {
    // Most nodes are as they were at the last pass (the same object, no Job there): what their
    // visit gave then is counted again without reading them. A candidate among them is its
    // place, made a Candidate only when the admission loop reaches it (unvisited()).
    const known = memo.recall(i);
    if (known !== UNKNOWN) {
      const outcome = known % READY;
      if (known % TRACED >= READY) tally.ready++;
      if (known >= TRACED) traced++;
      if (outcome === WAITING) {
        tally.waitingForNodes.push(nodes[i].name);
      } else if (outcome === BLOCKED) {
        tally.blocked.push(nodes[i].name);
      } else if (outcome >= BUCKET) {
        const b = outcome - BUCKET;
        if (budgeted[b] >= cap) {
          beyondCap[b]++;
        } else {
          budgeted[b]++;
          candidates[b].push(i);
        }
      }
      memo.remember(i, known);
      continue;
    }
    const node = nodes[i];
    const isSelected = !deleting && matches(node);
    const jobs = own.get(node.name) ?? NO_JOBS;
    // What this visit gives, where a later pass may count it again (UNKNOWN where it may not).
    const calm = jobs.length === 0 && !others.has(node.name);
    if (!isSelected && jobs.length === 0 && !hasTrace(node, keys)) {
      if (calm) memo.remember(i, NOTHING);
      continue;
    }
    const serving = !deleting && isSelected;
    // Most nodes have no Job of this Shim: no arrays are made for them (every pass visits every node).
    const running = jobs.length === 0 ? NO_JOBS : jobs.filter(j => j.phase === 'running');
    const finished = jobs.length === 0 ? NO_JOBS : jobs.filter(j => j.phase !== 'running');
    const d = jobs.length === 0
      ? derivedOnce(node, uid, settings, serving, pass)
      : derive(node, keys, running, finished, serving, desired, retryToken, policy, now);
    const { record, step, failure, relevant } = d;
    if (finished.length > 0) results.push(...newResults(node, finished, d.before));
    if (d.patch) actions.push({ kind: 'writeNode', node: node.name, ...d.patch });

    // Finished Jobs are removed once recorded (I8: the TTL controller is not relied on). The
    // last failed one stays for inspection until it is superseded or no longer relevant.
    const kept = finished.length === 0 ? NO_JOBS : finished.filter(j => keptFailure(record, j));
    for (const job of finished) {
      if (job.phase === 'failed' && !keptFailure(record, job)) actions.push({ kind: 'deleteJob', name: job.name });
      // Succeeded Jobs go in one request per batch (below), after the records that hold their
      // results; one from before batches existed goes by its name, and so does a request whose
      // agent wrote the record with it (recorded already: its result is announced once, now).
      if (job.phase === 'succeeded' && (!job.batch || job.reportedSuccess || job.recordedByAgent)) actions.push({ kind: 'deleteJob', name: job.name });
    }

    let flags = 0;
    if (record.installed.length > 0 || running.length > 0) {
      traced++;
      flags += TRACED;
    }
    const top = record.installed[0];
    if (isSelected && desired && top?.handler === desired.handler && top.revision === desired.revision
      && !(top.bootID && node.bootID && top.bootID !== node.bootID) && running.length === 0) {
      tally.ready++;
      flags += READY;
    }
    // Only a node without Jobs (its own or other Shims'), whose record needs no write and whose
    // visit does not depend on the time (no failure that counts) is counted again unvisited.
    const again = calm && !d.patch && !(relevant && failure);

    if (running.length > 0) {
      // A retry in progress: the failure it follows stays visible (and Degraded stays) until it ends.
      const retrying = failure && running.some(j => sameOperation(j, failure)) ? failedNode(node.name, failure, policy) : undefined;
      if (retrying) tally.failures.push(retrying);
      // A Job that a down node never started holds a slot for nothing: drop it, retry later.
      if (!node.ready && running.every(j => !j.started)) {
        for (const job of running) actions.push({ kind: 'deleteJob', name: job.name });
        tally.waitingForNodes.push(node.name);
        // A retry's node stays between attempts, and keeps its slot (as below).
        if (retrying && !retrying.exhausted) tally.inFlight++;
      } else {
        tally.inFlight++;
      }
      continue;
    }
    if (!step) {
      if (again) memo.remember(i, flags + NOTHING);
      continue;
    }

    let attempt = 1;
    // A node that failed and is due another attempt keeps its slot until that attempt: while it
    // waits out the backoff, and while it is down. The failed attempt may be why it is down (an
    // install whose containerd restart failed leaves the kubelet NotReady for a while), and the
    // rollout must not move on to the next node past a failure.
    let betweenAttempts = false;
    if (relevant && failure) {
      const nextAt = Date.parse(failure.at) + backoffSeconds(policy, failure.attempt, failure.reason !== NO_INSTALLER_REPORT) * 1000;
      const entry = failedNode(node.name, failure, policy, new Date(Number.isNaN(nextAt) ? nowMs : nextAt).toISOString());
      betweenAttempts = !entry.exhausted;
      tally.failures.push(entry);
      attempt = failure.attempt + 1;
      if (nextAt > nowMs) {
        requeueAt = Math.min(requeueAt ?? nextAt, nextAt);
        if (betweenAttempts) tally.inFlight++;
        continue;
      }
    }
    if (!node.ready || !node.schedulable) {
      tally.waitingForNodes.push(node.name);
      if (betweenAttempts) tally.inFlight++;
      if (again) memo.remember(i, flags + WAITING);
      continue;
    }
    const othersHere = others.get(node.name) ?? NO_JOBS;
    if (step.operation === 'install' && handlerBusy(node, step.handler, keys.installed, othersHere)) {
      tally.blocked.push(node.name);
      if (again) memo.remember(i, flags + BLOCKED);
      continue;
    }
    const joins = someRunning(othersHere);
    const bucket = order(relevant, step, joins);
    if (step.reverify !== true) {
      if (again) memo.remember(i, flags + BUCKET + bucket);
      if (budgeted[bucket] >= cap) {
        beyondCap[bucket]++;
        continue;
      }
      budgeted[bucket]++;
    }
    candidates[bucket].push({ node, step, attempt, retry: relevant, joins, supersedes: kept, record, serving });
  }

  const ownJobs = [...own.values()].flat();
  const open = new Set(ownJobs.filter(j => j.phase === 'running').map(j => j.batch));
  const batches = [...new Set(ownJobs.filter(j => j.phase === 'succeeded' && !j.recordedByAgent && j.batch && !open.has(j.batch) && nodeNamed(j.node) !== undefined)
    .map(j => j.batch!))];
  if (batches.length > 0) actions.push({ kind: 'deleteSucceededJobs', batches: batches.sort() });
  actions.push(...aggregateEvents(results));

  // Jobs on nodes that are gone: nothing to record; a running one is left to end by itself.
  for (const [nodeName, jobs] of own) {
    if (nodeNamed(nodeName) !== undefined) continue;
    for (const job of jobs) if (job.phase !== 'running' || !job.started) actions.push({ kind: 'deleteJob', name: job.name });
  }

  // A node that failed as often as allowed stops the rollout of this revision (I6); retries of
  // failing nodes and removals go on.
  tally.stopped = tally.failures.some(f => f.exhausted && f.operation === 'install');
  let budget = maxInFlight(shim.spec ?? {}, deleting ? traced : selected.length) - tally.inFlight;
  // A node at a time in order of precedence, thousands of them while a rollout is under way:
  // each bucket is in order of name already, so nothing is sorted.
  for (let b = 0; b < candidates.length; b++) {
    const bucket = candidates[b];
    for (let i = 0; i < bucket.length; i++) {
      const c = typeof bucket[i] === 'number' ? unvisited(bucket[i] as number) : bucket[i] as Candidate;
      const exempt = c.step.reverify === true;
      if (!exempt && tally.stopped && c.step.operation === 'install' && !c.retry) continue;
      if (!exempt && budget <= 0) {
        tally.queued++;
        continue;
      }
      if (!exempt) budget--;
      tally.inFlight++;
      for (const job of c.supersedes) actions.push({ kind: 'deleteJob', name: job.name });
      const job = jobRequest(shim, c, retryToken, now);
      actions.push({ kind: 'createJob', job: input.installMode === 'agent' ? { ...job, recordOnSuccess: recordOnSuccess(job, c, keys, retryToken, now, policy) } : job });
    }
    // The budget is spent by now (the bucket held at least `cap` nodes that take it): the rest
    // wait, as above. A stopped rollout's installs (buckets 4 and 5 hold the new ones) are not
    // queued but skipped, as above.
    if (!(tally.stopped && b >= 4)) tally.queued += beyondCap[b];
  }

  tally.remaining = traced;
  if (deleting) {
    if (traced === 0 && hasFinalizer) {
      for (const rc of input.runtimeClasses) if (rc.shimOwners.includes(uid)) actions.push({ kind: 'deleteRuntimeClass', name: rc.name });
      actions.push({ kind: 'removeFinalizer' });
    }
  } else if (!invalid) {
    const rc = planRuntimeClass(shim, keys, input.runtimeClasses);
    actions.push(...rc.actions);
    tally.conflict = rc.conflict;
  }

  const status = buildStatus(shim, previous, now, tally);
  if (tally.conflict && !previous?.conditions?.some(c => c.type === 'Degraded' && c.message === tally.conflict)) {
    actions.push({ kind: 'event', type: 'Warning', reason: 'RuntimeClassConflict', message: tally.conflict });
  }
  return {
    actions,
    status,
    ...(requeueAt !== undefined ? { requeueAfterSeconds: Math.max(1, Math.ceil((requeueAt - nowMs) / 1000)) } : {}),
  };
}

/** What a pass derives from a node, its Jobs of the Shim and the pass's settings (see derive). */
interface Derived {
  /** The node's record as read. */
  readonly before: NodeRecord;
  /** The record as this pass leaves it: finished Jobs folded in, a failure no longer wanted forgotten. */
  readonly record: NodeRecord;
  /** The operation the node needs next (none while a Job runs). */
  readonly step?: Step;
  /** The failure of the record as read (a forgotten one included). */
  readonly failure?: FailureRecord;
  /** Whether that failure is of the step due now (its retry counts attempts and backs off). */
  readonly relevant: boolean;
  /** The write that makes the node show the record, if it does not already. */
  readonly patch?: ReturnType<typeof nodePatch>;
}

function derive(node: NodeView, keys: RecordKeys, running: readonly JobView[], finished: readonly JobView[], serving: boolean,
  desired: Omit<Step, 'operation'> | undefined, retryToken: string | undefined, policy: RetryPolicy, now: string): Derived {
  const before = readRecord(node, keys);
  let record = finished.length === 0 ? before : fold(before, finished, { bootID: node.bootID, retryToken, now });
  const step = running.length > 0 ? undefined : nextStep(record, serving, desired, node.bootID);
  const failure = record.failure;
  const relevant = failure !== undefined && step !== undefined && sameOperation(failure, step) && failure.retry === retryToken;
  // A failure of something no longer wanted (a new revision, a retry requested, done since)
  // is forgotten; while a Job runs, or while an invalid Shim leaves the node alone, it stays.
  if (failure && !relevant && running.length === 0 && (step !== undefined || desired !== undefined || !serving)) {
    record = { installed: record.installed };
  }
  // A handler being removed gives no gate, even if the node is selected again meanwhile.
  const draining = running.some(j => j.operation === 'uninstall' && j.handler === record.installed[0]?.handler);
  const rendered = renderRecord(record, { serving: serving && !draining, bootID: node.bootID, failureThreshold: policy.failureThreshold });
  return { before, record, step, failure, relevant, patch: nodePatch(node, keys, rendered) };
}

/**
 * What derive() gave for a node without Jobs of the Shim, kept per node object and Shim: with
 * no Jobs it reads only the node (its record, boot ID), whether the node serves, and the
 * pass's `settings`, and the caches keep a node's object until something in it changes. Each
 * pass visits every node, and in a large fleet most of them are as they were at the last one.
 */
const derivedByNode = new WeakMap<NodeView, { uid: string; settings: string; serving: boolean; derived: Derived }[]>();

/**
 * The settings' text of a Shim's last pass, while it does not change: derivedOnce() compares it
 * for every node, and the same string object compares at once where an equal new one is read
 * through.
 */
const lastSettings = new Map<string, string>();

function sameText(uid: string, text: string): string {
  const last = lastSettings.get(uid);
  if (last === text) return last;
  if (lastSettings.size > 1000) lastSettings.clear(); // Shims come and go: bounded
  lastSettings.set(uid, text);
  return text;
}

/**
 * What derive() reads of a pass besides the node and whether it serves. One object per pass:
 * a closure per node instead made thousands of objects a pass (every pass visits every node).
 */
interface PassContext {
  readonly keys: RecordKeys;
  readonly desired: Omit<Step, 'operation'> | undefined;
  readonly retryToken: string | undefined;
  readonly policy: RetryPolicy;
  readonly now: string;
}

function derivedOnce(node: NodeView, uid: string, settings: string, serving: boolean, pass: PassContext): Derived {
  let entries = derivedByNode.get(node);
  let known: NonNullable<typeof entries>[number] | undefined;
  if (entries) for (let i = 0; i < entries.length; i++) if (entries[i].uid === uid) known = entries[i];
  if (known && known.settings === settings && known.serving === serving) return known.derived;
  const derived = derive(node, pass.keys, NO_JOBS, NO_JOBS, serving, pass.desired, pass.retryToken, pass.policy, pass.now);
  if (!entries) derivedByNode.set(node, entries = []);
  if (known) Object.assign(known, { settings, serving, derived });
  else entries.push({ uid, settings, serving, derived });
  return derived;
}

// What a node's visit gave (VisitMemo): an outcome (below READY), plus READY and TRACED where they hold.
const UNKNOWN = 0;
const NOTHING = 1;
const WAITING = 2;
const BLOCKED = 3;
/** Due an operation, in bucket `outcome - BUCKET` (0-5). */
const BUCKET = 4;
const READY = 16;
const TRACED = 32;

/**
 * What each node's visit gave at a Shim's last pass, by the node's place in the pass's list of
 * nodes, and what this pass's visits give. A pass visits every node, thousands of them, and
 * reading each node's objects (its view, its derived record) cost several times the loop
 * itself: most are where no cache line holds them. A node is counted again unvisited where it
 * is the same object at the same place, no Job (its own or another Shim's) is on it, and the
 * pass reads the same settings: everything its visit read is then the same.
 */
interface VisitMemo {
  /** The last pass's outcome for place `i`, or UNKNOWN where the node must be visited. */
  recall(i: number): number;
  /** This pass's outcome for place `i` (left UNKNOWN where the visit may not be counted again). */
  remember(i: number, outcome: number): void;
}

interface Visits {
  readonly key: string;
  readonly nodes: readonly NodeView[];
  readonly outcomes: Uint8Array;
  /** Each node's place in `nodes`, by name. */
  readonly places: Map<string, number>;
}

/**
 * What each Shim's last pass made of each node (VisitMemo), kept by the adapter from pass to
 * pass. Node views must not be changed in place (a changed node is a new object, as the
 * informers make it).
 */
export class VisitMemos {
  /** Visits that were not made: nodes counted again as their last pass found them. */
  unvisited = 0;
  private readonly last = new Map<string, Visits>();

  /** Drops what was kept of Shims other than these (those that are gone). */
  keepOnly(uids: ReadonlySet<string>): void {
    for (const uid of this.last.keys()) if (!uids.has(uid)) this.last.delete(uid);
  }

  /** A pass of Shim `uid` over `nodes` that reads settings `key`, with `jobs` (every Shim's). */
  start(uid: string, key: string, nodes: readonly NodeView[], jobs: readonly JobView[],
    nodeNamed: (name: string) => NodeView | undefined): VisitMemo {
    const last = this.last.get(uid);
    let places = last?.places;
    // The places of the nodes with Jobs; the last pass's index of places while it still holds.
    const busy = new Uint8Array(nodes.length);
    // `strict`: false where a Job's node is in the caches but not where the index says (the
    // index is then made again); else such a Job is passed over (its node is not in `nodes`).
    const mark = (strict: boolean): boolean => {
      for (let j = 0; j < jobs.length; j++) {
        const at = places!.get(jobs[j].node);
        if (at !== undefined && nodes[at]?.name === jobs[j].node) busy[at] = 1;
        else if (strict && nodeNamed(jobs[j].node) !== undefined) return false;
      }
      return true;
    };
    if (!places || !mark(true)) {
      places = new Map();
      for (let i = 0; i < nodes.length; i++) places.set(nodes[i].name, i);
      busy.fill(0);
      mark(false);
    }
    const outcomes = new Uint8Array(nodes.length);
    if (!last && this.last.size >= 1000) this.last.clear(); // Shims come and go: bounded
    this.last.set(uid, { key, nodes, outcomes, places });
    const remember = (i: number, outcome: number) => {
      outcomes[i] = outcome;
    };
    // The same list as last time may have been changed in place: nothing is recalled from it.
    if (last?.key !== key || last.nodes === nodes) return { recall: () => UNKNOWN, remember };
    const before = last.outcomes;
    const beforeNodes = last.nodes;
    return {
      recall: i => {
        const outcome = i < beforeNodes.length && beforeNodes[i] === nodes[i] && busy[i] === 0 ? before[i] : UNKNOWN;
        if (outcome !== UNKNOWN) this.unvisited++;
        return outcome;
      },
      remember,
    };
  }
}

/** No memo: every node is visited. */
const NO_MEMO = { start: (): VisitMemo => ({ recall: () => UNKNOWN, remember: () => undefined }) };

/** The last failed Job of the record's failure stays for inspection (see plan()). */
function keptFailure(record: NodeRecord, job: JobView): boolean {
  return job.phase === 'failed' && record.failure !== undefined && isFailureOf(record.failure, job);
}

/**
 * The nodes in order of name. The caches keep them in the order of their LIST, which is by
 * name, so each pass mostly checks the order instead of sorting thousands of names again.
 */
function byName(nodes: readonly NodeView[]): readonly NodeView[] {
  for (let i = 1; i < nodes.length; i++) {
    if (nodes[i - 1].name > nodes[i].name) return [...nodes].sort((a, b) => (a.name < b.name ? -1 : 1));
  }
  return nodes;
}

function failedNode(name: string, failure: FailureRecord, policy: RetryPolicy, nextAttempt?: string): Tally['failures'][number] {
  return {
    name,
    operation: failure.operation,
    reason: failure.reason,
    message: failure.message,
    attempts: failure.attempt,
    ...(nextAttempt ? { nextAttempt } : {}),
    exhausted: failure.attempt >= policy.failureThreshold,
  };
}

function jobRequest(shim: ShimObject, c: Candidate, retryToken: string | undefined, now: string): JobRequest {
  const { node, step, attempt } = c;
  return {
    name: jobName(shim.metadata.name, node.name, step.operation, step.handler, step.revision, attempt, `${retryToken ?? ''}/${node.bootID ?? ''}`),
    node: node.name,
    operation: step.operation,
    handler: step.handler,
    revision: step.revision,
    attempt,
    batch: String(Date.parse(now)),
    ...(step.operation === 'install' ? { artifact: artifactFor(shim.spec, node) } : {}),
  };
}

/**
 * Install mode NodeAgent: the record this planner would write on seeing the request succeed
 * (fold, then render, as a pass does), for the agent to write with its outcome. A pass that
 * then sees the success finds the record in place and writes nothing; one that would render
 * it otherwise by then (the Shim or the node changed meanwhile) writes the difference, as
 * always. A gate the agent sets this way names a handler it has just installed: I1 holds.
 */
function recordOnSuccess(job: JobRequest, c: Candidate, keys: RecordKeys, retryToken: string | undefined, now: string,
  policy: RetryPolicy): RecordPatch {
  const success: JobView = {
    name: job.name,
    shimUid: '',
    node: job.node,
    operation: job.operation,
    handler: job.handler,
    revision: job.revision,
    ...(job.artifact?.sha256 ? { sha256: job.artifact.sha256 } : {}),
    attempt: job.attempt,
    phase: 'succeeded',
    started: true,
    finishedAt: now,
  };
  const after = fold(c.record, [success], { bootID: c.node.bootID, retryToken, now });
  return wholeRecordPatch(keys, renderRecord(after, { serving: c.serving, bootID: c.node.bootID, failureThreshold: policy.failureThreshold }));
}

function invalidEvent(previous: ShimStatus | undefined, invalid: string): Action[] {
  const known = previous?.conditions?.some(c => c.type === 'Degraded' && c.reason === 'InvalidShim' && c.message === invalid);
  return known ? [] : [{ kind: 'event', type: 'Warning', reason: 'InvalidShim', message: invalid }];
}

/** A finished Job whose result this pass records for the first time. */
interface Result {
  readonly node: string;
  readonly job: JobView;
}

function newResults(node: NodeView, finished: readonly JobView[], before: NodeRecord): Result[] {
  return finished.filter(job => {
    // The agent recorded it with its outcome: the record holds it already, whether seen or not.
    if (job.phase === 'succeeded' && job.recordedByAgent) return !job.announced;
    if (job.phase === 'failed') return !(before.failure && isFailureOf(before.failure, job));
    const had = before.installed.find(e => e.handler === job.handler);
    if (job.operation === 'uninstall') return had !== undefined;
    return !(had && had.revision === job.revision && (!node.bootID || had.bootID === node.bootID));
  }).map(job => ({ node: node.name, job }));
}

/**
 * One Event per kind of result and pass, not one per node: a rollout over thousands of
 * nodes would otherwise write as many Events as it installs. Each names its nodes (a few of
 * them) and carries their number as its count.
 */
function aggregateEvents(results: Result[]): Action[] {
  const groups = new Map<string, { type: 'Normal' | 'Warning'; reason: string; what: string; nodes: string[] }>();
  for (const { node, job } of results) {
    const failed = job.phase === 'failed';
    const reason = job.operation === 'install' ? (failed ? 'InstallFailed' : 'Installed') : (failed ? 'UninstallFailed' : 'Uninstalled');
    const what = failed
      ? `${job.result?.reason ?? reason}: ${job.result?.message ?? 'the installer Job failed without a result'}`
      : job.operation === 'install' ? `installed ${job.handler} (revision ${job.revision})` : `removed ${job.handler}`;
    const key = `${reason}\n${what}`;
    const group = groups.get(key) ?? { type: failed ? 'Warning' : 'Normal', reason, what, nodes: [] };
    group.nodes.push(failed ? `${node} (attempt ${job.attempt})` : node);
    groups.set(key, group);
  }
  return [...groups.values()].map(g => {
    const shown = g.nodes.slice(0, 5).join(', ') + (g.nodes.length > 5 ? ` and ${g.nodes.length - 5} more` : '');
    const where = g.nodes.length === 1 ? `node ${shown}` : `${g.nodes.length} nodes: ${shown}`;
    return { kind: 'event' as const, type: g.type, reason: g.reason, message: g.type === 'Warning' ? `${where}: ${g.what}` : `${g.what} on ${where}`, count: g.nodes.length };
  });
}

function emptyTally(revision: string, t: { invalid?: string; deleting: boolean; nodes?: number }): Tally {
  return {
    revision,
    nodes: t.nodes ?? 0,
    ready: 0,
    failures: [],
    inFlight: 0,
    waitingForNodes: [],
    blocked: [],
    queued: 0,
    stopped: false,
    deleting: t.deleting,
    remaining: 0,
    invalid: t.invalid,
  };
}

function buildStatus(shim: ShimObject, previous: ShimStatus | undefined, now: string, t: Tally): ShimStatus {
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
  // Nodes that stop the rollout or hold the deletion first, then those still retrying.
  const failures = [...t.failures].sort((a, b) => Number(b.exhausted) - Number(a.exhausted) || (a.name < b.name ? -1 : 1));
  const exhausted = failures.filter(f => f.exhausted);
  const worstInstall = exhausted.find(f => f.operation === 'install');
  const worst = worstInstall ?? exhausted[0];
  const describe = (f: FailedNode, n: number) => `node ${f.name}: ${f.reason}: ${f.message}${n > 1 ? ` (and ${n - 1} more)` : ''}`;
  const retrying = failures.filter(f => !f.exhausted);
  const notes = [
    t.waitingForNodes.length
      ? `${t.waitingForNodes.length} node(s) ${t.agentMode ? 'without a Ready node agent pod' : 'not Ready'} or cordoned (${t.waitingForNodes.slice(0, 3).join(', ')})` : '',
    t.blocked.length ? `${t.blocked.length} node(s) wait for another Shim to release the handler (${t.blocked.slice(0, 3).join(', ')})` : '',
    retrying.length ? `${retrying.length} node(s) retrying (${retrying[0].name}: attempt ${retrying[0].attempts} failed: ${retrying[0].reason}; ${retrying[0].nextAttempt ? `next at ${retrying[0].nextAttempt}` : 'the next attempt is under way'})` : '',
    t.queued ? `${t.queued} node(s) queued` : '',
  ].filter(Boolean).join('; ');

  let conditions: Condition[];
  if (t.invalid) {
    conditions = [
      cond('Ready', false, 'InvalidShim', t.invalid),
      cond('Progressing', false, 'InvalidShim', t.invalid),
      cond('Degraded', true, 'InvalidShim', t.invalid),
    ];
  } else {
    const pending = t.inFlight > 0 || t.queued > 0 || t.waitingForNodes.length > 0 || t.blocked.length > 0 || retrying.length > 0;
    const progressing = t.deleting
      ? cond('Progressing', true, 'Deleting', `uninstalling from ${t.remaining} node(s)${notes ? `; ${notes}` : ''}`)
      : t.stopped
        ? cond('Progressing', false, 'RolloutStopped', `stopped after repeated failures on node ${worstInstall!.name}${notes ? `; ${notes}` : ''}`)
        : pending || t.ready < t.nodes
          ? cond('Progressing', true, 'RollingOut', `${t.inFlight} node(s) in progress, ${t.ready}/${t.nodes} done${notes ? `; ${notes}` : ''}`)
          : cond('Progressing', false, 'Complete', `${t.ready}/${t.nodes} done`);
    const degraded = worst
      ? cond('Degraded', true, worst.operation === 'uninstall' ? 'UninstallFailed' : 'InstallFailed', describe(worst, exhausted.length))
      : t.conflict
        ? cond('Degraded', true, 'RuntimeClassConflict', t.conflict)
        : cond('Degraded', false, 'AsExpected', 'no failures');
    conditions = [
      t.deleting
        ? cond('Ready', false, 'Deleting', 'the Shim is being deleted')
        : cond('Ready', t.nodes === t.ready && !worstInstall, t.nodes === t.ready ? 'AllNodesReady' : 'Installing',
          `${t.ready}/${t.nodes} selected nodes run revision ${t.revision}`),
      progressing,
      degraded,
    ];
  }
  return {
    observedGeneration: generation,
    revision: t.revision,
    nodes: t.nodes,
    nodesReady: t.ready,
    nodesFailed: exhausted.length,
    nodesRetrying: retrying.length,
    failedNodes: failures.slice(0, MAX_FAILED_NODES).map(({ exhausted: _, ...f }) => f),
    conditions,
  };
}
