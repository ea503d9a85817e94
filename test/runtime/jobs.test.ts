import { jobView } from '../../src/runtime/jobs';

// From a Job and its pods (as the caches hold them) to what the planner sees.

const T0 = Date.parse('2026-11-22T00:00:00Z');
const job = (status: object) => ({
  metadata: {
    name: 'rcm-spin-i-1',
    uid: 'j1',
    labels: { 'runtime.spinkube.dev/shim-uid': 'u1', 'runtime.spinkube.dev/batch': 'b1' },
    annotations: { 'runtime.spinkube.dev/node': 'n1', 'runtime.spinkube.dev/operation': 'install', 'runtime.spinkube.dev/handler': 'spin', 'runtime.spinkube.dev/attempt': '2' },
  },
  status,
});
const failed = job({ conditions: [{ type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit', lastTransitionTime: '2026-11-22T00:00:00Z' }] });
const endedPod = { status: { startTime: '2026-11-22T00:00:00Z', containerStatuses: [{ state: { terminated: { message: '{"reason":"ChecksumMismatch","message":"sha256 differs"}', finishedAt: '2026-11-22T00:00:00Z' } } }] } };

test('a failed Job whose pod has not reached the cache yet waits for the installer\'s reason, for a while', () => {
  // GIVEN the Job's failure seen before its pod (the two are watched apart; Pending pods are not watched)
  expect(jobView(failed, [], T0 + 1000)).toMatchObject({ phase: 'running', started: false });
  // WHEN the pod arrives THEN the installer's reason is the result
  expect(jobView(failed, [endedPod], T0 + 2000)).toMatchObject({ phase: 'failed', attempt: 2, batch: 'b1', result: { reason: 'ChecksumMismatch', message: 'sha256 differs' } });
  // AND a pod that never comes does not hold the Job for ever
  expect(jobView(failed, [], T0 + 31_000)).toMatchObject({ phase: 'failed', result: { reason: 'InstallerFailed', message: expect.stringMatching(/^BackoffLimitExceeded/) } });
});

test('a Job that failed for want of a pod (deadline) is judged at once', () => {
  const deadline = job({ conditions: [{ type: 'Failed', status: 'True', reason: 'DeadlineExceeded', message: 'Job was active longer than specified deadline', lastTransitionTime: '2026-11-22T00:00:00Z' }] });
  expect(jobView(deadline, [], T0 + 1000)).toMatchObject({ phase: 'failed', result: { message: expect.stringMatching(/^DeadlineExceeded/) } });
});
