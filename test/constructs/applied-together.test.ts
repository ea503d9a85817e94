import * as path from 'path';
import { ApiObject, Chart, JsonPatch, Testing, Yaml } from 'cdk8s';
import { ArgoCd, RuntimeClassManager, ShimConstruct, ShimConstructProps } from '../../src';
import { APPLIED_TOGETHER_ANNOTATION, appliedTogetherId, parseAppliedTogether } from '../../src/shared/applied-together';

// The Shims a RuntimeClassManager adds say which of them are applied together (one apply unit
// per Argo CD sync wave), so that the controller plans them in one pass.

const SHA = 'a'.repeat(64);
const shimProps = (handler: string, more: Partial<ShimConstructProps> = {}): ShimConstructProps =>
  ({ handler, location: `https://example.com/${handler}.tar.gz`, sha256: SHA, ...more });

/** A chart with a manager and, per entry, a Shim named after its handler. */
function app(shims: [string, Partial<ShimConstructProps>?][], build?: (manager: RuntimeClassManager, chart: Chart) => void) {
  const chart = Testing.chart();
  const manager = new RuntimeClassManager(chart, 'Manager');
  for (const [handler, more] of shims) manager.addShim(handler, shimProps(handler, more));
  build?.(manager, chart);
  return { chart, manager };
}

/** Each Shim's applied-together value, by name. */
function stamps(chart: Chart): { [name: string]: string | undefined } {
  return Object.fromEntries(Testing.synth(chart).filter(o => o.kind === 'Shim')
    .map(o => [o.metadata.name, o.metadata.annotations?.[APPLIED_TOGETHER_ANNOTATION]]));
}

test('every Shim of the manager carries one stamp: the count, and the digest of the Shims as synthesized', () => {
  // GIVEN a manager with three Shims
  const { chart } = app([['spin'], ['wasmtime', { nodeSelector: { wasm: 'true' } }], ['gvisor']]);
  // WHEN synthesized
  const objects = Testing.synth(chart);
  const shims = objects.filter(o => o.kind === 'Shim');
  // THEN all three share one value, <12 hex>/3
  const values = new Set(shims.map(o => o.metadata.annotations[APPLIED_TOGETHER_ANNOTATION]));
  expect(values.size).toBe(1);
  const [value] = [...values];
  expect(value).toMatch(/^[0-9a-f]{12}\/3$/);
  // and its id is the digest of each Shim's name and spec as they are in the manifests
  expect(parseAppliedTogether(value)).toEqual({ id: appliedTogetherId(shims.map(o => ({ name: o.metadata.name, spec: o.spec }))), count: 3 });
  // and nothing else carries it: the controller's objects, the RuntimeClass the Shim names
  for (const o of objects.filter(x => x.kind !== 'Shim')) expect(o.metadata.annotations?.[APPLIED_TOGETHER_ANNOTATION]).toBeUndefined();
  for (const o of shims) expect(o.spec.runtimeClass.annotations?.[APPLIED_TOGETHER_ANNOTATION]).toBeUndefined();
});

test('the same app synthesized twice gives the same stamps, whatever order the Shims were added in', () => {
  const first = stamps(app([['spin'], ['wasmtime']]).chart);
  expect(stamps(app([['spin'], ['wasmtime']]).chart)).toEqual(first);
  expect(stamps(app([['wasmtime'], ['spin']]).chart)).toEqual(first);
  // and synthesizing one app twice as well (an App's synth and a test's, say)
  const { chart } = app([['spin'], ['wasmtime']]);
  expect(stamps(chart)).toEqual(stamps(chart));
});

test('a change to one Shim\'s spec gives every Shim of the unit a new id', () => {
  const before = stamps(app([['spin'], ['wasmtime'], ['gvisor']]).chart);
  const after = stamps(app([['spin'], ['wasmtime', { nodeSelector: { wasm: 'true' } }], ['gvisor']]).chart);
  for (const name of ['spin', 'wasmtime', 'gvisor']) {
    expect(after[name]).not.toBe(before[name]);
    expect(parseAppliedTogether(after[name])!.count).toBe(3);
  }
  expect(new Set(Object.values(after)).size).toBe(1);
});

test('a change that reaches the spec late counts too: a platform added after addShim(), a JSON patch', () => {
  const before = stamps(app([['spin'], ['wasmtime']]).chart);
  const platform = stamps(app([['spin'], ['wasmtime']], manager => {
    (manager.node.findChild('spin') as ShimConstruct).addPlatform({ os: 'linux', arch: 'arm64', location: 'https://example.com/spin-arm64.tar.gz' });
  }).chart);
  const patched = stamps(app([['spin'], ['wasmtime']], manager => {
    (manager.node.findChild('wasmtime') as ShimConstruct).resource.addJsonPatch(JsonPatch.add('/spec/containerdRuntimeOptions', { SystemdCgroup: 'true' }));
  }).chart);
  expect(platform.spin).not.toBe(before.spin);
  expect(platform.wasmtime).toBe(platform.spin);
  expect(patched.spin).not.toBe(before.spin);
  expect(patched.spin).not.toBe(platform.spin);
  expect(patched.wasmtime).toBe(patched.spin);
});

test('only name and spec count: metadata alone keeps the id, labels and annotations copied into spec.runtimeClass change it', () => {
  const before = stamps(app([['spin'], ['wasmtime']]).chart);
  // a label on the Shim object alone (an escape hatch) is not part of the spec
  const metadataOnly = stamps(app([['spin'], ['wasmtime']], manager => {
    (manager.node.findChild('spin') as ShimConstruct).resource.metadata.addLabel('extra', 'x');
  }).chart);
  expect(metadataOnly).toEqual(before);
  // the annotations given to addShim() also go to spec.runtimeClass.annotations
  const annotated = stamps(app([['spin', { annotations: { team: 'wasm' } }], ['wasmtime']]).chart);
  expect(annotated.spin).not.toBe(before.spin);
  expect(annotated.wasmtime).toBe(annotated.spin);
});

test('adding a Shim changes the count and every id', () => {
  const two = stamps(app([['spin'], ['wasmtime']]).chart);
  const three = stamps(app([['spin'], ['wasmtime'], ['gvisor']]).chart);
  expect(parseAppliedTogether(two.spin)!.count).toBe(2);
  expect(parseAppliedTogether(three.spin)!.count).toBe(3);
  expect(parseAppliedTogether(three.spin)!.id).not.toBe(parseAppliedTogether(two.spin)!.id);
  expect(three.wasmtime).toBe(three.spin);
  expect(three.gvisor).toBe(three.spin);
});

test('Shims added after the manager and its other objects, and after a first synth, are counted', () => {
  // GIVEN a manager, objects after it, one Shim
  const { chart, manager } = app([], (m, c) => {
    new ApiObject(c, 'later', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'later' } });
    m.addShim('spin', shimProps('spin'));
  });
  expect(parseAppliedTogether(stamps(chart).spin)!.count).toBe(1);
  // WHEN one more Shim is added after that synth
  manager.addShim('wasmtime', shimProps('wasmtime'));
  // THEN the next synth counts both, with the id an app made with both at once gets
  const now = stamps(chart);
  expect(parseAppliedTogether(now.spin)!.count).toBe(2);
  expect(now.wasmtime).toBe(now.spin);
  expect(now).toEqual(stamps(app([['spin'], ['wasmtime']]).chart));
});

test('Shims in different Argo CD sync waves are different apply units, each counted and digested apart', () => {
  // GIVEN two Shims in the manager's wave and one in its own
  const waves = app([['spin'], ['wasmtime'], ['gvisor', { syncWave: -5 }]]).chart;
  const s = stamps(waves);
  // THEN the manager's wave is a unit of two, the other a unit of one
  expect(parseAppliedTogether(s.spin)!.count).toBe(2);
  expect(s.wasmtime).toBe(s.spin);
  expect(parseAppliedTogether(s.gvisor)!.count).toBe(1);
  expect(parseAppliedTogether(s.gvisor)!.id).not.toBe(parseAppliedTogether(s.spin)!.id);
  // and each unit's id is its own Shims' digest: a change in one wave leaves the other's id
  const changed = stamps(app([['spin'], ['wasmtime'], ['gvisor', { syncWave: -5, nodeSelector: { x: 'y' } }]]).chart);
  expect(changed.spin).toBe(s.spin);
  expect(changed.gvisor).not.toBe(s.gvisor);
  // and the manager's own shims wave, moved, is the wave of the Shims without one
  const chart = Testing.chart();
  const manager = new RuntimeClassManager(chart, 'Manager', { syncWaves: { shims: -5 } });
  manager.addShim('spin', shimProps('spin'));
  manager.addShim('gvisor', shimProps('gvisor', { syncWave: -5 }));
  const objects = Testing.synth(chart).filter(o => o.kind === 'Shim');
  expect(objects.map(o => o.metadata.annotations[ArgoCd.SYNC_WAVE_ANNOTATION])).toEqual(['-5', '-5']);
  expect(parseAppliedTogether(objects[0].metadata.annotations[APPLIED_TOGETHER_ANNOTATION])!.count).toBe(2);
});

test('a ShimConstruct made on its own carries no stamp and is not counted, even beside the manager', () => {
  // GIVEN a Shim on its own in the manager's chart, one on its own in the manager's scope, and one the manager adds
  const { chart } = app([['spin']], (manager, c) => {
    new ShimConstruct(c, 'wasmtime', shimProps('wasmtime'));
    new ShimConstruct(manager, 'gvisor', shimProps('gvisor'));
  });
  const s = stamps(chart);
  // THEN only the manager's Shim is stamped, as a unit of one
  expect(s.wasmtime).toBeUndefined();
  expect(s.gvisor).toBeUndefined();
  expect(parseAppliedTogether(s.spin)!.count).toBe(1);
  // and a Shim on its own in an app without a manager neither
  const alone = Testing.chart();
  new ShimConstruct(alone, 'spin', shimProps('spin'));
  expect(stamps(alone)).toEqual({ spin: undefined });
});

test('the stamp is the manager\'s: addShim() refuses it among the annotations', () => {
  expect(() => app([['spin', { annotations: { [APPLIED_TOGETHER_ANNOTATION]: 'abc/1' } }]]))
    .toThrow(/^addShim\("spin"\): annotations: runtime.spinkube.dev\/applied-together is set by the manager/);
  const chart = Testing.chart();
  const manager = new RuntimeClassManager(chart, 'Manager', { annotations: { [APPLIED_TOGETHER_ANNOTATION]: 'abc/1' } });
  expect(() => manager.addShim('spin', shimProps('spin'))).toThrow(/is set by the manager/);
});

test('a chart with a namespace, written by App.synth(): the stamps are in the YAML', () => {
  const out = Testing.app();
  const chart = new Chart(out, 'wasm', { namespace: 'wasm' });
  const manager = new RuntimeClassManager(chart, 'Manager');
  manager.addShim('spin', shimProps('spin'));
  manager.addShim('wasmtime', shimProps('wasmtime'));
  out.synth();
  const objects = Yaml.load(path.join(out.outdir, 'wasm.k8s.yaml')).filter((o: any) => o.kind === 'Shim');
  expect(objects.map((o: any) => parseAppliedTogether(o.metadata.annotations[APPLIED_TOGETHER_ANNOTATION])?.count)).toEqual([2, 2]);
  expect(objects.every((o: any) => o.metadata.namespace === undefined)).toBe(true);
  expect(objects[0].metadata.annotations[APPLIED_TOGETHER_ANNOTATION]).toBe(stamps(chart).spin);
});
