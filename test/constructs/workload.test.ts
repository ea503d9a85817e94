import { ApiObject, Cron, Testing } from 'cdk8s';
// cdk8s-plus comes with cdk8s-cli; the test uses it the way a library user would.
// eslint-disable-next-line import/no-extraneous-dependencies
import * as kplus from 'cdk8s-plus-33';
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
