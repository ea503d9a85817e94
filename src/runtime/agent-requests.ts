// Install mode NodeAgent, the controller's side: the planner's Jobs become requests in the
// node record, and the agent's results come back as the Jobs' phases. The planner is the
// same in both modes; only what carries an operation to the node differs.
import { installerRequest, JobSettings } from './jobs';
import { INSTALLER_FAILED, JobRequest, JobView, NodeView, ShimObject } from './types';
import { AdmittedRequest, requestKey, requestsOn, resultKey } from '../shared/agent-protocol';

/** Every request on these nodes as the planner sees a Job: running until the agent reports, then its outcome. */
export function agentJobViews(nodes: readonly NodeView[]): JobView[] {
  const views: JobView[] = [];
  for (const node of nodes) {
    for (const { admitted, result } of requestsOn(node.annotations)) {
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
        // The agent has taken it (it wrote a result): dropping it is no longer free.
        started: result !== undefined,
        createdAt: admitted.createdAt,
        ...(result?.finishedAt ? { finishedAt: result.finishedAt } : {}),
        ...(phase === 'failed' ? { result: { reason: outcome?.reason ?? INSTALLER_FAILED, message: outcome?.message ?? 'the node agent reported a failure without a reason', outcome: outcome?.outcome } } : {}),
        ...(phase === 'succeeded' && outcome ? { result: { reason: outcome.reason, message: outcome.message, outcome: outcome.outcome } } : {}),
      });
    }
  }
  return views;
}

/** The node patch that admits an operation: the request, and no result of an earlier one. */
export function admitPatch(settings: JobSettings, shim: ShimObject, job: JobRequest, now: string): Record<string, string | null> {
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
    request: installerRequest(settings, shim, job),
  };
  return { [requestKey(shim.metadata.name)]: JSON.stringify(admitted), [resultKey(shim.metadata.name)]: null };
}

/** The node patch that withdraws a Shim's request (done and recorded, or superseded) and its result. */
export function withdrawPatch(shimName: string): Record<string, null> {
  return { [requestKey(shimName)]: null, [resultKey(shimName)]: null };
}
