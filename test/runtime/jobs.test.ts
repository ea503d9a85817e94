import { judgeJob } from '../../src/runtime/job-judgement';
import { ARTIFACT_FILE, installerJob, JobObserver, observeJob } from '../../src/runtime/jobs';

// From a Job and its pods (as the caches hold them) to what the planner sees: the facts
// observeJob takes, judged as the planner does at `now`.
const jobView = (job: any, pods: any[], now: number) => judgeJob(observeJob(job, pods)!, now);

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
  // GIVEN the Job's failure seen before its pod (the two are watched apart)
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

describe('observing every Job of a pass (JobObserver)', () => {
  const ownPod = (status: object) => ({ metadata: { name: 'rcm-spin-i-1-x', labels: { 'controller-uid': 'j1' } }, status });
  const running = job({});
  const startedPod = ownPod({ phase: 'Running', startTime: '2026-11-22T00:00:00Z' });

  test('GIVEN Jobs and pods as the caches keep them WHEN nothing changed THEN the facts of the pass before are given again', () => {
    const observer = new JobObserver<any, any>();
    const other = { ...job({}), metadata: { ...running.metadata, name: 'rcm-wasmtime-i-1', uid: 'j2' } };
    const first = observer.observe([running, other], [startedPod]);
    expect(first).toEqual([observeJob(running, [startedPod]), observeJob(other, [])]);
    const second = observer.observe([running, other], [startedPod]);
    expect(second[0]).toBe(first[0]);
    expect(second[1]).toBe(first[1]);
  });

  test('GIVEN a Job observed once WHEN its pod or the Job itself is a new object THEN its facts are taken again', () => {
    const observer = new JobObserver<any, any>();
    const [before] = observer.observe([running], [startedPod]);
    expect(before).toMatchObject({ started: true, podsEnded: 0 });
    // the pod's update: a new object in the cache
    const ended = ownPod({ phase: 'Succeeded', startTime: '2026-11-22T00:00:00Z', containerStatuses: [{ state: { terminated: { message: '{"outcome":"installed"}' } } }] });
    const [afterPod] = observer.observe([running], [ended]);
    expect(afterPod).toMatchObject({ podsEnded: 1, terminated: { message: '{"outcome":"installed"}' } });
    // the Job's update, the same pod
    const done = job({ succeeded: 1 });
    const [afterJob] = observer.observe([done], [ended]);
    expect(afterJob).toMatchObject({ succeeded: true, podsEnded: 1 });
    // a pod gone from the cache
    expect(observer.observe([done], [])[0]).toMatchObject({ pods: 0, podsEnded: 0 });
  });

  test('a Job that does not say what it is stays out, and a pod without its Job\'s uid belongs to none', () => {
    const observer = new JobObserver<any, any>();
    const stranger = { metadata: { name: 'other', uid: 'j9', labels: {}, annotations: {} }, status: {} };
    const orphan = { metadata: { name: 'p', labels: {} }, status: { phase: 'Running' } };
    expect(observer.observe([stranger, running], [orphan])).toEqual([observeJob(running, [])]);
  });
});

describe('the installer Job', () => {
  const settings = { namespace: 'rcm', image: 'rcm-node-installer:1', pullPolicy: 'IfNotPresent', ttlSeconds: 600, defaultRestartMode: 'systemd', imagePullSecrets: ['installer-cred'] };
  const shimObject = (spec: object): any => ({
    metadata: { name: 'gvisor', uid: 'u1' },
    spec: { runtimeClass: { name: 'gvisor', handler: 'gvisor' }, ...spec },
  });
  const request = (artifact: object): any => ({ name: 'rcm-gvisor-i-1', node: 'n1', operation: 'install', handler: 'gvisor', revision: 'r1', attempt: 1, batch: 'b1', artifact });
  const envOf = (j: any) => Object.fromEntries(j.spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value]));

  test('a payload with handler fields reaches the installer as its flags', () => {
    // GIVEN a Shim with a payload, a runtime type, options naming payload files and handler fields
    const shim = shimObject({
      payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
      containerdRuntimeOptions: { BinaryName: '${PAYLOAD}/bin/runsc' },
      containerdRuntime: { podAnnotations: ['dev.gvisor.*'], containerAnnotations: ['a/*', 'b/*'], privilegedWithoutHostDevices: true, snapshotter: 'native' },
    });
    // WHEN its install Job is rendered
    const env = envOf(installerJob(settings, shim, request({ location: 'https://e.com/gvisor.tgz' })));
    // THEN each becomes the installer's variable
    expect(env).toMatchObject({
      RCM_LOCATION: 'https://e.com/gvisor.tgz',
      RCM_PAYLOAD_SHIM: 'bin/containerd-shim-runc-v2',
      RCM_RUNTIME_TYPE: 'io.containerd.runc.v2',
      RCM_RUNTIME_OPTION: 'BinaryName=${PAYLOAD}/bin/runsc',
      RCM_POD_ANNOTATION: 'dev.gvisor.*',
      RCM_CONTAINER_ANNOTATION: 'a/*\nb/*',
      RCM_PRIVILEGED_WITHOUT_HOST_DEVICES: 'true',
      RCM_SNAPSHOTTER: 'native',
    });
  });

  test('an artifact in an image is copied out by init containers and read from a volume; pull secrets of both kinds apply', () => {
    // GIVEN an artifact in a private image pinned by digest
    const reference = 'registry.example/gvisor-payload@sha256:' + 'c'.repeat(64);
    const rendered = installerJob(settings, shimObject({}), request({ image: { reference, path: '/payload/gvisor.tgz', pullSecrets: ['payload-cred', 'installer-cred'] }, sha256: 'd'.repeat(64) }));
    const pod = rendered.spec.template.spec;
    // THEN the copy tool comes from the installer image and the artifact from its own image, by digest
    expect(pod.initContainers.map((c: any) => [c.name, c.image])).toEqual([['copy-tool', 'rcm-node-installer:1'], ['artifact', reference]]);
    expect(pod.initContainers[1].command).toEqual(['/rcm-tools/busybox', 'cp', '-L', '/payload/gvisor.tgz', ARTIFACT_FILE]);
    // AND the installer reads the copy, checks its sha256, and names the image in its messages
    expect(envOf(rendered)).toMatchObject({ RCM_ARTIFACT_FILE: ARTIFACT_FILE, RCM_SHA256: 'd'.repeat(64), RCM_ARTIFACT_ORIGIN: `${reference}:/payload/gvisor.tgz` });
    expect(envOf(rendered).RCM_LOCATION).toBeUndefined();
    expect(pod.containers[0].volumeMounts).toContainEqual({ name: 'rcm-artifact', mountPath: '/rcm-artifact', readOnly: true });
    // AND the controller's and the Shim's pull secrets are both there, once each
    expect(pod.imagePullSecrets).toEqual([{ name: 'installer-cred' }, { name: 'payload-cred' }]);
  });

  test('an uninstall carries no artifact, options or init containers', () => {
    const rendered = installerJob(settings, shimObject({ containerdRuntimeOptions: { A: 'b' }, payload: { shim: 'x' } }), { ...request(undefined), operation: 'uninstall' });
    expect(rendered.spec.template.spec.initContainers).toBeUndefined();
    expect(Object.keys(envOf(rendered)).filter(k => /LOCATION|ARTIFACT|OPTION|PAYLOAD/.test(k))).toEqual([]);
  });
});

test('a failed Job whose pod ended without ever running its container is judged at once, with the container\'s reason', () => {
  // GIVEN the installer's container was never created (containerd restarting under the kubelet) and the pod failed
  const neverRan = { status: { phase: 'Failed', containerStatuses: [{ state: { waiting: { reason: 'CreateContainerError', message: 'transport is closing' } } }] } };
  // THEN the failure counts (and is retried by the planner) instead of waiting for a result that cannot come
  expect(jobView(failed, [neverRan], T0 + 1000)).toMatchObject({ phase: 'failed', result: { reason: 'InstallerFailed', message: 'CreateContainerError: transport is closing' } });
  // AND a pod the cache still shows running is waited for, but not for ever
  const stillRunning = { status: { phase: 'Running', containerStatuses: [{ state: { running: {} } }] } };
  expect(jobView(failed, [stillRunning], T0 + 1000)).toMatchObject({ phase: 'running' });
  expect(jobView(failed, [stillRunning], T0 + 31_000)).toMatchObject({ phase: 'failed' });
});

test('a Job has started once a kubelet took its pod, even when the kubelet reports the pod Pending again', () => {
  const running = job({});
  // GIVEN a pod created but not yet taken by a kubelet: not started (a down node may drop it)
  expect(jobView(running, [{ status: { phase: 'Pending' } }], T0)).toMatchObject({ phase: 'running', started: false });
  // WHEN the kubelet has taken it (startTime), THEN it has started
  expect(jobView(running, [{ status: { phase: 'Pending', startTime: '2026-11-22T00:00:00Z' } }], T0)).toMatchObject({ started: true });
  expect(jobView(running, [{ status: { phase: 'Running', startTime: '2026-11-22T00:00:00Z' } }], T0)).toMatchObject({ started: true });
  // AND with no pod at all, it has not
  expect(jobView(running, [], T0)).toMatchObject({ started: false });
});

test('an installer that reported success counts as done though its pod failed (containerd lost its exit status while restarting)', () => {
  // GIVEN the installer wrote its success and containerd, restarted by that very installer, lost its exit status (exit 255, Unknown)
  const lostExit = (message: string) => ({ status: { phase: 'Failed', startTime: '2026-11-22T00:00:00Z', containerStatuses: [{ state: { terminated: { exitCode: 255, reason: 'Unknown', message, finishedAt: '2026-11-22T00:00:01Z' } } }] } });
  // THEN the Job is done, not failed
  expect(jobView(failed, [lostExit('{"outcome":"installed","message":"handler spin installed"}')], T0 + 2000)).toMatchObject({ phase: 'succeeded', reportedSuccess: true });
  expect(jobView(failed, [lostExit('{"outcome":"unchanged","message":"already there"}')], T0 + 2000)).toMatchObject({ phase: 'succeeded' });
  const uninstall = { ...failed, metadata: { ...failed.metadata, annotations: { ...failed.metadata.annotations, 'runtime.spinkube.dev/operation': 'uninstall' } } };
  expect(jobView(uninstall, [lostExit('{"outcome":"uninstalled","message":"handler spin uninstalled"}')], T0 + 2000)).toMatchObject({ phase: 'succeeded' });
  // AND a failure it reported, or a success of the other operation, stays a failure
  expect(jobView(failed, [lostExit('{"outcome":"failed","reason":"RestartFailedRolledBack","message":"x"}')], T0 + 2000)).toMatchObject({ phase: 'failed' });
  expect(jobView(uninstall, [lostExit('{"outcome":"installed","message":"x"}')], T0 + 2000)).toMatchObject({ phase: 'failed' });
});
