// The planner's judgement of installer Jobs: from what the caches show of a Job and its pods
// (or of a request in a node record, install mode NodeAgent), and from what this controller
// wrote that the caches may not show yet, to the Jobs as the planner reasons about them
// (running, succeeded or failed, and why). Pure: the facts and the pass's `now` in, JobViews
// out. The adapters (jobs.ts, agent-requests.ts, controller.ts) only gather the facts.
import { JobRequest, JobView, NO_INSTALLER_REPORT } from './types';
import { isRecordedSuccess } from '../shared/agent-protocol';
import type { AdmittedRequest, AgentResult } from '../shared/agent-protocol';

/** How long a failed Job waits for its pod's result (the installer's reason) to arrive. */
export const POD_RESULT_WAIT_MS = 30_000;

/**
 * How long a Job this controller created counts without the cache showing it (a watch event
 * lags the create); then it is left to the cache.
 */
export const CREATED_UNSEEN_MS = 60_000;

/**
 * How long a request may go without an outcome: a Job's activeDeadlineSeconds, the same bound
 * in both install modes. A node whose agent is gone (not scheduled, crash-looping, its node
 * lost) would otherwise hold its rollout slot for ever.
 */
export const AGENT_DEADLINE_MS = 900_000;

/** The reason of a request that had no outcome within AGENT_DEADLINE_MS. */
export const AGENT_DID_NOT_ANSWER = 'NodeAgentDidNotAnswer';

/** What a Job's labels and annotations say it is. */
export type JobIdentity = Pick<JobView, 'name' | 'shimUid' | 'node' | 'operation' | 'handler' | 'revision' | 'sha256' | 'attempt' | 'batch'>;

/** An installer Job and its own pods as the caches show them: facts only. */
export interface ObservedInstallerJob extends JobIdentity {
  readonly kind: 'job';
  /** The Job's `Failed` condition, where it is True. */
  readonly failed?: { readonly reason?: string; readonly message?: string; readonly at?: string };
  /** `status.succeeded` is above 0. */
  readonly succeeded: boolean;
  /** `status.completionTime`. */
  readonly completedAt?: string;
  /** Its creationTimestamp. */
  readonly createdAt?: string;
  /** The newest terminated installer container (by finishedAt): its termination message and end. */
  readonly terminated?: { readonly message?: string; readonly finishedAt?: string };
  /** Its pods in the cache, and how many of them ended (phase Succeeded or Failed). */
  readonly pods: number;
  readonly podsEnded: number;
  /** Why an installer container waits (the first pod that says): one that never ran. */
  readonly waiting?: { readonly reason: string; readonly message?: string };
  /** A kubelet has taken one of its pods (startTime set, or past Pending). */
  readonly started: boolean;
}

/** A request in a node record and the agent's result of it (install mode NodeAgent): facts only. */
export interface ObservedRequest {
  readonly kind: 'request';
  readonly node: string;
  readonly admitted: AdmittedRequest;
  /** The agent's result of this very request (an earlier request's result is not passed). */
  readonly reported?: AgentResult;
  /** A success the agent recorded whose result was announced already (JobView.announced). */
  readonly announced?: boolean;
}

export type ObservedJob = ObservedInstallerJob | ObservedRequest;

/** A Job (or request) this controller created, and when. */
export interface CreatedJob {
  readonly job: JobRequest;
  readonly shimUid: string;
  readonly at: string;
}

/** What this controller wrote that its caches may not show yet. */
export interface OwnWrites {
  /** Created, not yet seen in the cache (as far as the adapter knows). */
  readonly created: readonly CreatedJob[];
  /** Deleted (requests withdrawn), possibly still in the cache: by name. */
  readonly deleted: readonly string[];
}

export const NO_WRITES: OwnWrites = Object.freeze({ created: [], deleted: [] });

/** Own writes that no longer change what the planner sees: the adapter may forget them. */
export interface SettledWrites {
  /** Created Jobs the cache shows now, or that went unseen for CREATED_UNSEEN_MS. */
  readonly created: readonly string[];
  /** Deleted Jobs the cache no longer shows. */
  readonly deleted: readonly string[];
}

function nameOf(observed: ObservedJob): string {
  return observed.kind === 'job' ? observed.name : observed.admitted.name;
}

/**
 * Every Job as the planner sees it at `nowMs`: what the cache shows, less what this controller
 * deleted, plus what it created that the cache does not show yet (running, not started: the
 * next pass must count it, or it would start the same attempt again and give its rollout slot
 * to another node).
 */
export function judgeJobs(observed: readonly ObservedJob[], writes: OwnWrites, nowMs: number): { views: JobView[]; settled: SettledWrites } {
  const deleted = new Set(writes.deleted);
  const createdHere = new Set(writes.created.map(c => c.job.name));
  // Of the Jobs deleted here, those the cache still lists.
  const listed = new Set<string>();
  // Of the Jobs created here, those shown: a Job once the cache lists it; a request, once the
  // node record shows it and it was not withdrawn since. (Only these: a pass judges every Job.)
  const shown = new Set<string>();
  const views: JobView[] = [];
  for (const o of observed) {
    const name = nameOf(o);
    if (deleted.has(name)) listed.add(name);
    if (createdHere.has(name) && (o.kind === 'job' || !deleted.has(name))) shown.add(name);
    if (deleted.has(name)) continue;
    views.push(o.kind === 'job' ? judgedOnce(o, nowMs) : judgeRequest(o, nowMs));
  }
  const settledCreated: string[] = [];
  for (const created of writes.created) {
    if (shown.has(created.job.name) || nowMs - Date.parse(created.at) > CREATED_UNSEEN_MS) settledCreated.push(created.job.name);
    else views.push(createdView(created));
  }
  // A deletion is complete once the cache no longer shows the Job.
  return { views, settled: { created: settledCreated, deleted: writes.deleted.filter(name => !listed.has(name)) } };
}

/**
 * What judgeJob gave for the facts of a Job without a failure, kept per facts object: only a
 * failure's judgement reads the clock (the wait for its pod's result), and the facts of a Job
 * that did not change are the same object from pass to pass (jobs.ts, JobObserver).
 */
const judgedWithoutFailure = new WeakMap<ObservedInstallerJob, JobView>();

function judgedOnce(job: ObservedInstallerJob, nowMs: number): JobView {
  if (job.failed) return judgeJob(job, nowMs);
  let view = judgedWithoutFailure.get(job);
  if (!view) judgedWithoutFailure.set(job, view = judgeJob(job, nowMs));
  return view;
}

/** A Job just created, until the cache shows it: running, not started. */
export function createdView({ job, shimUid }: CreatedJob): JobView {
  const { name, node, operation, handler, revision, attempt, batch } = job;
  const sha256 = job.artifact?.sha256;
  return { name, shimUid, node, operation, handler, revision, attempt, batch, phase: 'running', started: false, ...(sha256 ? { sha256 } : {}) };
}

/** The installer's result from its termination message: its JSON, else the message's last lines. */
function parseResult(message: string | undefined): JobView['result'] {
  if (!message) return undefined;
  try {
    const r = JSON.parse(message);
    return { reason: r.reason, message: r.message, outcome: r.outcome };
  } catch {
    return { reason: NO_INSTALLER_REPORT, message: message.trim().split('\n').slice(-3).join(' ').slice(0, 500) };
  }
}

/** A failed Job without the installer's result: why its container did not run, else the Job's own reason. */
function whyNoResult(job: ObservedInstallerJob): string {
  const { waiting, failed } = job;
  return waiting ? `${waiting.reason}: ${waiting.message ?? ''}`.trim() : `${failed?.reason}: ${failed?.message}`;
}

/** An installer Job at `nowMs`. */
export function judgeJob(job: ObservedInstallerJob, nowMs: number): JobView {
  const { failed, succeeded, terminated: last } = job;
  // The Job and its pod are watched apart: a failure is judged once the pod's result (the
  // installer's reason) has arrived too, unless there is no pod to wait for.
  // A pod's status may reach the (separately watched) pod cache after the Job's failure:
  // give it a moment before judging without one.
  // A pod the cache still shows running will bring its result; one that ended without a
  // terminated container (its container was never created: CreateContainerError while
  // containerd restarted) has none to bring. Either way the wait is bounded.
  const inWait = !!failed && nowMs - Date.parse(failed.at ?? '') < POD_RESULT_WAIT_MS;
  const podMayCome = job.pods === 0 ? failed?.reason === 'BackoffLimitExceeded' : job.podsEnded < job.pods;
  const resultPending = failed && !last && inWait && podMayCome;
  // An installer that reported success, yet its pod failed: the installer restarts containerd
  // itself, and a container that ends during such a restart can lose its exit status (exit 255,
  // "Unknown"). Its work was done and checked; counting it a failure would retry it for nothing.
  const outcome = parseResult(last?.message)?.outcome;
  const reportedSuccess = !!failed && (job.operation === 'uninstall'
    ? outcome === 'uninstalled' || outcome === 'not-installed'
    : outcome === 'installed' || outcome === 'unchanged');
  const phase = succeeded || reportedSuccess ? 'succeeded' : failed && !resultPending ? 'failed' : 'running';
  return {
    name: job.name,
    shimUid: job.shimUid,
    node: job.node,
    operation: job.operation,
    handler: job.handler,
    revision: job.revision,
    ...(job.sha256 ? { sha256: job.sha256 } : {}),
    attempt: job.attempt,
    ...(job.batch ? { batch: job.batch } : {}),
    phase,
    ...(reportedSuccess && !succeeded ? { reportedSuccess: true } : {}),
    started: job.started,
    ...(job.createdAt ? { createdAt: job.createdAt } : {}),
    ...(phase !== 'running' ? { finishedAt: job.completedAt ?? last?.finishedAt ?? failed?.at } : {}),
    result: parseResult(last?.message ?? (failed && !last ? whyNoResult(job) : undefined)),
  };
}

/**
 * A request at `nowMs`, as a Job in that state would be: running until the agent reports,
 * then its outcome; failed once it has gone AGENT_DEADLINE_MS without one.
 */
export function judgeRequest({ node, admitted, reported, announced }: ObservedRequest, nowMs: number): JobView {
  const since = Date.parse(reported?.startedAt ?? admitted.createdAt);
  const overdue = (reported === undefined || reported.phase === 'running') && nowMs - since >= AGENT_DEADLINE_MS;
  const result: AgentResult | undefined = overdue ? {
    name: admitted.name,
    admittedAt: admitted.createdAt,
    phase: 'failed',
    startedAt: reported?.startedAt ?? admitted.createdAt,
    finishedAt: new Date(since + AGENT_DEADLINE_MS).toISOString(),
    result: {
      reason: AGENT_DID_NOT_ANSWER,
      message: `the node agent on ${node} reported no outcome of ${admitted.name} within ${AGENT_DEADLINE_MS / 1000}s`
        + `${reported ? ' after taking it' : ' (is rcm-node-agent running there?)'}`,
    },
  } : reported;
  const phase = result?.phase ?? 'running';
  const outcome = result?.result;
  return {
    name: admitted.name,
    shimUid: admitted.shimUid,
    node,
    operation: admitted.operation,
    handler: admitted.handler,
    revision: admitted.revision,
    attempt: admitted.attempt,
    batch: admitted.batch,
    ...(admitted.sha256 ? { sha256: admitted.sha256 } : {}),
    phase,
    // The agent said it has taken it (it writes `running` for a request still under way
    // after a few seconds): dropping it is no longer free. One dropped unannounced is run
    // again later, after the run under way (the agent runs a Shim's requests in order).
    started: reported !== undefined,
    createdAt: admitted.createdAt,
    ...(result?.finishedAt ? { finishedAt: result.finishedAt } : {}),
    ...(phase === 'failed' ? { result: { reason: outcome?.reason ?? NO_INSTALLER_REPORT, message: outcome?.message ?? 'the node agent reported a failure without a reason', outcome: outcome?.outcome } } : {}),
    ...(phase === 'succeeded' && outcome ? { result: { reason: outcome.reason, message: outcome.message, outcome: outcome.outcome } } : {}),
    ...(isRecordedSuccess(result) ? { recordedByAgent: true, ...(announced ? { announced: true } : {}) } : {}),
  };
}
