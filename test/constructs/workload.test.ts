import { ApiObject, Cron, Testing } from 'cdk8s';
// cdk8s-plus comes with cdk8s-cli; the test uses it the way a library user would.
// eslint-disable-next-line import/no-extraneous-dependencies
import * as kplus from 'cdk8s-plus-33';
import { CrunWasmEdge } from '../../examples/crun-wasmedge/main';
import { RuntimeClassManager, ShimConstruct } from '../../src';

const SHIM = { handler: 'spin', runtimeClassName: 'wasmtime-spin', location: 'https://example.com/spin.tgz' };

describe('ShimConstruct.runWorkload()', () => {
  test('a cdk8s-plus Deployment, Job and CronJob run under the RuntimeClass', () => {
    // GIVEN a Shim and three cdk8s-plus workloads
    const chart = Testing.chart();
    const shim = new ShimConstruct(chart, 'spin', SHIM);
    const containers = [{ image: 'ghcr.io/example/hello-spin:1', securityContext: { ensureNonRoot: false } }];
    const deployment = new kplus.Deployment(chart, 'web', { containers });
    const job = new kplus.Job(chart, 'batch', { containers });
    const cronJob = new kplus.CronJob(chart, 'nightly', { containers, schedule: Cron.schedule({ minute: '0', hour: '3' }) });
    // WHEN they are run under the Shim
    for (const w of [deployment, job, cronJob]) shim.runWorkload(w);
    // THEN each pod template names the RuntimeClass
    const objects = Testing.synth(chart);
    const of = (kind: string) => objects.find(o => o.kind === kind);
    expect(of('Deployment').spec.template.spec.runtimeClassName).toBe('wasmtime-spin');
    expect(of('Job').spec.template.spec.runtimeClassName).toBe('wasmtime-spin');
    expect(of('CronJob').spec.jobTemplate.spec.template.spec.runtimeClassName).toBe('wasmtime-spin');
    expect(shim.runtimeClassName).toBe('wasmtime-spin');
  });

  test('a Pod, and a plain ApiObject Deployment', () => {
    const chart = Testing.chart();
    const manager = new RuntimeClassManager(chart, 'Manager');
    const shim = manager.addShim('spin', SHIM);
    const pod = new kplus.Pod(chart, 'pod', { containers: [{ image: 'x', securityContext: { ensureNonRoot: false } }] });
    const raw = new ApiObject(chart, 'raw', { apiVersion: 'apps/v1', kind: 'Deployment', spec: { template: { spec: { containers: [] } } } });
    shim.runWorkload(pod);
    shim.runWorkload(raw);
    const objects = Testing.synth(chart);
    expect(objects.find(o => o.kind === 'Pod').spec.runtimeClassName).toBe('wasmtime-spin');
    expect(objects.find(o => o.metadata.name === raw.name).spec.template.spec.runtimeClassName).toBe('wasmtime-spin');
  });

  test('refuses what is not a workload, naming it', () => {
    const chart = Testing.chart();
    const shim = new ShimConstruct(chart, 'spin', SHIM);
    const cm = new kplus.ConfigMap(chart, 'settings');
    expect(() => shim.runWorkload(cm)).toThrow(/^runWorkload: test\/settings is a ConfigMap, not one of Pod, Deployment/);
    expect(() => shim.runWorkload(chart)).toThrow(/^runWorkload: test is not a workload/);
  });
});

describe('workloadAnnotations: runWorkload() puts the annotations the runtime needs on the pod template', () => {
  const WASM = {
    handler: 'crun-wasm',
    location: 'https://example.com/crun-wasmedge.tar.gz',
    payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
    runtimeOptions: { BinaryName: '${PAYLOAD}/bin/crun' },
    containerdRuntime: { podAnnotations: ['module.wasm.image/variant', 'run.oci.handler'], containerAnnotations: ['module.wasm.image/variant', 'run.oci.handler'] },
    workloadAnnotations: { 'module.wasm.image/variant': 'compat' },
  };
  const VARIANT = { 'module.wasm.image/variant': 'compat' };
  const containers = [{ image: 'ghcr.io/example/hello-wasm:1', securityContext: { ensureNonRoot: false } }];

  test('cdk8s-plus workloads and pods: beside the user\'s own pod annotations, added before or after; the workload object itself gets none', () => {
    // GIVEN a Wasm Shim and cdk8s-plus workloads, one with pod annotations of its own
    const chart = Testing.chart();
    const shim = new ShimConstruct(chart, 'wasm', WASM);
    const deployment = new kplus.Deployment(chart, 'web', { containers, podMetadata: { annotations: { 'example.com/team': 'wasm' } } });
    const job = new kplus.Job(chart, 'batch', { containers });
    const cronJob = new kplus.CronJob(chart, 'nightly', { containers, schedule: Cron.schedule({ minute: '0', hour: '3' }) });
    const statefulSet = new kplus.StatefulSet(chart, 'db', { containers, service: new kplus.Service(chart, 'db-svc', { ports: [{ port: 80 }] }) });
    const daemonSet = new kplus.DaemonSet(chart, 'agent', { containers });
    const pod = new kplus.Pod(chart, 'pod', { containers });
    // WHEN they are run under the Shim, and the Deployment gets another pod annotation afterwards
    for (const w of [deployment, job, cronJob, statefulSet, daemonSet, pod]) shim.runWorkload(w);
    deployment.podMetadata.addAnnotation('example.com/later', 'yes');
    // THEN every pod template carries the Shim's annotation beside its own
    const objects = Testing.synth(chart);
    const of = (kind: string) => objects.find(o => o.kind === kind);
    expect(of('Deployment').spec.template.metadata.annotations).toEqual({ ...VARIANT, 'example.com/team': 'wasm', 'example.com/later': 'yes' });
    expect(of('Job').spec.template.metadata.annotations).toEqual(VARIANT);
    expect(of('CronJob').spec.jobTemplate.spec.template.metadata.annotations).toEqual(VARIANT);
    expect(of('StatefulSet').spec.template.metadata.annotations).toEqual(VARIANT);
    expect(of('DaemonSet').spec.template.metadata.annotations).toEqual(VARIANT);
    expect(of('Pod').metadata.annotations).toEqual(VARIANT);
    // AND the workload objects themselves carry none (the runtime reads the pod's)
    for (const kind of ['Deployment', 'Job', 'CronJob', 'StatefulSet', 'DaemonSet']) expect(of(kind).metadata.annotations).toBeUndefined();
    expect(of('Deployment').spec.template.spec.runtimeClassName).toBe('wasm');
  });

  test('the Shim\'s value wins over a workload\'s own for the same key', () => {
    const chart = Testing.chart();
    const shim = new ShimConstruct(chart, 'wasm', WASM);
    const deployment = new kplus.Deployment(chart, 'web', { containers, podMetadata: { annotations: { 'module.wasm.image/variant': 'oci' } } });
    shim.runWorkload(deployment);
    expect(Testing.synth(chart).find(o => o.kind === 'Deployment').spec.template.metadata.annotations).toEqual(VARIANT);
  });

  test('plain ApiObjects: a template without metadata, with metadata and no annotations, with annotations of its own; a plain Pod', () => {
    // GIVEN plain objects whose pod templates have each shape
    const chart = Testing.chart();
    const shim = new ShimConstruct(chart, 'wasm', WASM);
    const spec = { containers: [{ name: 'main', image: 'x' }] };
    const bare = new ApiObject(chart, 'bare', { apiVersion: 'apps/v1', kind: 'Deployment', spec: { template: { spec } } });
    const labelled = new ApiObject(chart, 'labelled', { apiVersion: 'batch/v1', kind: 'Job', spec: { template: { metadata: { labels: { app: 'x' } }, spec } } });
    const annotated = new ApiObject(chart, 'annotated', {
      apiVersion: 'batch/v1',
      kind: 'CronJob',
      spec: { schedule: '0 3 * * *', jobTemplate: { spec: { template: { metadata: { annotations: { 'example.com/team': 'wasm' } }, spec } } } },
    });
    const plainPod = new ApiObject(chart, 'plain-pod', { apiVersion: 'v1', kind: 'Pod', metadata: { annotations: { 'example.com/team': 'wasm' } }, spec });
    // WHEN they are run under the Shim
    for (const w of [bare, labelled, annotated, plainPod]) shim.runWorkload(w);
    // THEN each template has the annotation and keeps what it had
    const objects = Testing.synth(chart);
    const named = (o: ApiObject) => objects.find(x => x.metadata.name === o.name);
    expect(named(bare).spec.template).toEqual({ metadata: { annotations: VARIANT }, spec: { ...spec, runtimeClassName: 'wasm' } });
    expect(named(labelled).spec.template.metadata).toEqual({ labels: { app: 'x' }, annotations: VARIANT });
    expect(named(annotated).spec.jobTemplate.spec.template.metadata).toEqual({ annotations: { 'example.com/team': 'wasm', ...VARIANT } });
    expect(named(plainPod).metadata.annotations).toEqual({ 'example.com/team': 'wasm', ...VARIANT });
  });

  test('a Shim without workloadAnnotations changes nothing but runtimeClassName', () => {
    // GIVEN the same Deployment synthesized alone and run under a Shim without workload annotations
    const synthDeployment = (run: boolean) => {
      const chart = Testing.chart();
      const shim = new ShimConstruct(chart, 'spin', SHIM);
      const deployment = new kplus.Deployment(chart, 'web', { containers, podMetadata: { annotations: { 'example.com/team': 'wasm' } } });
      if (run) shim.runWorkload(deployment);
      return Testing.synth(chart).find(o => o.kind === 'Deployment');
    };
    const alone = synthDeployment(false);
    const run = synthDeployment(true);
    // THEN they differ in runtimeClassName only
    expect(run.spec.template.spec.runtimeClassName).toBe('wasmtime-spin');
    delete run.spec.template.spec.runtimeClassName;
    expect(run).toEqual(alone);
    expect(new ShimConstruct(Testing.chart(), 'spin', SHIM).workloadAnnotations).toEqual({});
  });

  test('the annotations are readable, as a copy', () => {
    const shim = new ShimConstruct(Testing.chart(), 'wasm', WASM);
    const read = shim.workloadAnnotations;
    read.extra = 'x';
    expect(shim.workloadAnnotations).toEqual(VARIANT);
  });

  test('snapshot: a crun + WasmEdge Shim and a Deployment under it', () => {
    const chart = Testing.chart();
    const manager = new RuntimeClassManager(chart, 'Manager');
    const shim = manager.addShim('wasm', { ...WASM, sha256: 'b'.repeat(64) });
    shim.runWorkload(new kplus.Deployment(chart, 'hello', { containers }));
    expect(Testing.synth(chart).filter(o => o.kind === 'Shim' || o.kind === 'Deployment' && o.metadata.name !== manager.deployment.name)).toMatchSnapshot();
  });
});

test('the crun + WasmEdge example synthesizes: its Shim lets crun\'s annotations through, and its Deployment\'s pods carry the RuntimeClass and the annotation', () => {
  // The example's own module is what `npx projen example` runs.
  const app = Testing.app();
  new CrunWasmEdge(app, 'crun-wasmedge');
  const objects = app.charts.flatMap(c => c.toJson());
  const shim = objects.find(o => o.kind === 'Shim');
  expect(shim.spec).toMatchObject({
    payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
    containerdRuntimeOptions: { BinaryName: '${PAYLOAD}/bin/crun' },
    containerdRuntime: { podAnnotations: ['module.wasm.image/variant', 'run.oci.handler'] },
    runtimeClass: { name: 'wasmedge', handler: 'crun-wasmedge' },
  });
  const hello = objects.find(o => o.metadata.name === 'hello-wasm');
  expect(hello.spec.template.spec.runtimeClassName).toBe('wasmedge');
  expect(hello.spec.template.metadata.annotations).toEqual({ 'module.wasm.image/variant': 'compat' });
});
