// Install mode NodeAgent, the controller's side: the planner's Jobs become requests in the
// node record, and the agent's results come back as the Jobs' phases. The planner is the
// same in both modes; only what carries an operation to the node differs.
import { installerRequest, JobSettings } from './jobs';
import { NO_INSTALLER_REPORT, JobRequest, JobView, NodeView, ShimObject } from './types';
import { AdmittedRequest, AgentResult, requestKey, requestsOn, resultKey } from '../shared/agent-protocol';

/**
 * How long a request may go without an outcome: a Job's activeDeadlineSeconds, the same bound
 * in both install modes. A node whose agent is gone (not scheduled, crash-looping, its node
 * lost) would otherwise hold its rollout slot for ever.
 */
export const AGENT_DEADLINE_MS = 900_000;

/** The reason of a request that had no outcome within AGENT_DEADLINE_MS. */
export const AGENT_DID_NOT_ANSWER = 'NodeAgentDidNotAnswer';

/**
 * Every request on these nodes as the planner sees a Job: running until the agent reports,
 * then its outcome; failed once it has gone AGENT_DEADLINE_MS without one (judged at `nowMs`).
 */
export function agentJobViews(nodes: readonly NodeView[], nowMs: number): JobView[] {
  const views: JobView[] = [];
  for (const node of nodes) {
    for (const { admitted, result: reported } of requestsOn(node.annotations)) {
      const since = Date.parse(reported?.startedAt ?? admitted.createdAt);
      const overdue = (reported === undefined || reported.phase === 'running') && nowMs - since >= AGENT_DEADLINE_MS;
      const result: AgentResult | undefined = overdue ? {
        name: admitted.name,
        phase: 'failed',
        startedAt: reported?.startedAt ?? admitted.createdAt,
        finishedAt: new Date(since + AGENT_DEADLINE_MS).toISOString(),
        result: {
          reason: AGENT_DID_NOT_ANSWER,
          message: `the node agent on ${node.name} reported no outcome of ${admitted.name} within ${AGENT_DEADLINE_MS / 1000}s`
            + `${reported ? ' after taking it' : ' (is rcm-node-agent running there?)'}`,
        },
      } : reported;
      const phase = result?.phase ?? 'running';
      const outcome = result?.result;
      views.push({
        name: admitted.name,
        shimUid: admitted.shimUid,
        node: node.name,
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
      });
    }
  }
  return views;
}

/**
 * The node patch that admits an operation: the request, and no result of an earlier one.
 * `passIntervalMs`: the least time between two passes of one Shim (see AdmittedRequest).
 */
export function admitPatch(settings: JobSettings, shim: ShimObject, job: JobRequest, now: string,
  passIntervalMs?: number): Record<string, string | null> {
  const admitted: AdmittedRequest = {
    name: job.name,
    shimUid: shim.metadata.uid,
    operation: job.operation,
    handler: job.handler,
    revision: job.revision,
    attempt: job.attempt,
    batch: job.batch,
    ...(job.artifact?.sha256 ? { sha256: job.artifact.sha256 } : {}),
    createdAt: now,
    ...(passIntervalMs !== undefined ? { passIntervalMs } : {}),
    request: installerRequest(settings, shim, job),
  };
  return { [requestKey(shim.metadata.name)]: JSON.stringify(admitted), [resultKey(shim.metadata.name)]: null };
}

/** The node patch that withdraws a Shim's request (done and recorded, or superseded) and its result. */
export function withdrawPatch(shimName: string): Record<string, null> {
  return { [requestKey(shimName)]: null, [resultKey(shimName)]: null };
}
