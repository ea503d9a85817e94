import { App, Chart, Testing } from 'cdk8s';
import { ContainerdRestart, MaxUpdate, Rollout, RuntimeOverhead, ShimConstruct, ShimConstructProps, ShimNodeLabels, TolerationEffect, TolerationOperator } from '../../src';

const SHA = 'a'.repeat(64);
const BASE: ShimConstructProps = { handler: 'spin', location: 'https://example.com/spin.tar.gz', sha256: SHA };

function synthShim(props: ShimConstructProps, id = 'spin') {
  const chart = Testing.chart();
  const shim = new ShimConstruct(chart, id, props);
  const objects = Testing.synth(chart);
  return { shim, objects, spec: objects.find(o => o.kind === 'Shim').spec, runtimeClass: objects.find(o => o.kind === 'RuntimeClass') };
}

describe('ShimConstruct', () => {
  test('defaults: one Shim; its RuntimeClass is left to the controller, which writes it from spec.runtimeClass', () => {
    // GIVEN a shim with only a handler and an artifact
    // WHEN it is synthesized
    const { objects, spec, shim } = synthShim(BASE);

    // THEN
    expect(objects).toMatchSnapshot();
    expect(objects.map(o => o.kind)).toEqual(['Shim']);
    expect(shim.runtimeClass).toBeUndefined();
    expect(shim.runtimeClassName).toBe('spin');
    expect(spec.runtimeClass).toEqual({ name: 'spin', handler: 'spin' });
    expect(spec.rolloutStrategy).toEqual({ type: 'recreate' });
    expect(spec.fetchStrategy).toEqual({ type: 'anonymousHttp', anonHttp: { location: BASE.location, sha256: SHA } });
  });

  test('createRuntimeClass: the RuntimeClass is synthesized too, scheduled on the handler label and marked for adoption', () => {
    // GIVEN a shim that asks for its RuntimeClass in the manifests
    // WHEN it is synthesized
    const { objects, shim, runtimeClass } = synthShim({ ...BASE, createRuntimeClass: true, overhead: { memory: '64Mi' }, tolerations: [{ key: 'wasm', operator: TolerationOperator.EXISTS }] });

    // THEN the RuntimeClass is as the controller writes it, so that the two agree field by field
    expect(objects).toMatchSnapshot();
    expect(objects.map(o => o.kind)).toEqual(['Shim', 'RuntimeClass']);
    expect(shim.runtimeClass).toBeDefined();
    expect(runtimeClass.handler).toBe('spin');
    expect(runtimeClass.scheduling).toEqual({ nodeSelector: { [ShimNodeLabels.handlerKey('spin')]: 'spin' }, tolerations: [{ key: 'wasm', operator: 'Exists' }] });
    expect(runtimeClass.overhead).toEqual({ podFixed: { memory: '64Mi' } });
    expect(runtimeClass.metadata.annotations[ShimNodeLabels.ADOPT_ANNOTATION]).toBe('spin');
    expect(runtimeClass.metadata.labels).toEqual({ 'app.kubernetes.io/managed-by': 'runtime-class-manager' });
  });

  test('everything set: what the RuntimeClass needs goes to spec.runtimeClass', () => {
    // GIVEN every prop
    const { objects, spec } = synthShim({
      name: 'spin-v2',
      handler: 'spin',
      runtimeClassName: 'wasmtime-spin-v2',
      platforms: [
        { os: 'linux', arch: 'arm64', location: 'https://example.com/arm64.tgz', sha256: 'b'.repeat(64) },
        { os: 'linux', arch: 'amd64', location: 'https://example.com/amd64.tgz', sha256: 'c'.repeat(64) },
      ],
      nodeSelector: { wasm: 'true' },
      rollout: Rollout.rolling({ maxUpdate: MaxUpdate.percent(10) }),
      runtimeOptions: { SystemdCgroup: 'true' },
      restart: ContainerdRestart.command('/usr/local/bin/restart-containerd'),
      overhead: { memory: '64Mi' },
      tolerations: [{ key: 'wasm', operator: TolerationOperator.EXISTS, effect: TolerationEffect.NO_SCHEDULE }],
      labels: { team: 'wasm' },
      annotations: { 'example.com/owner': 'platform' },
    }, 'Spin');

    // THEN
    expect(objects).toMatchSnapshot();
    expect(spec.fetchStrategy.platforms.map((p: any) => p.arch)).toEqual(['amd64', 'arm64']); // stable order
    expect(spec.rolloutStrategy).toEqual({ type: 'rolling', rolling: { maxUpdate: '10%' } });
    expect(spec.restart).toEqual({ mode: 'command', command: '/usr/local/bin/restart-containerd' });
    expect(spec.containerdRuntimeOptions).toEqual({ SystemdCgroup: 'true' });
    expect(spec.runtimeClass).toEqual({
      name: 'wasmtime-spin-v2',
      handler: 'spin',
      labels: { team: 'wasm' },
      annotations: { 'example.com/owner': 'platform' },
      overhead: { podFixed: { memory: '64Mi' } },
      tolerations: [{ key: 'wasm', operator: 'Exists', effect: 'NoSchedule' }],
    });
    expect(objects.map(o => o.kind)).toEqual(['Shim']);
  });

  test('Argo CD: Shims come after the CRD and skip dry-run while the CRD is missing', () => {
    const { objects } = synthShim(BASE);
    const shim = objects.find(o => o.kind === 'Shim');
    expect(shim.metadata.annotations).toEqual({
      'argocd.argoproj.io/sync-wave': '-10',
      'argocd.argoproj.io/sync-options': 'SkipDryRunOnMissingResource=true',
    });
  });

  test('rolling with a count, and the default of one node at a time', () => {
    expect(synthShim({ ...BASE, rollout: Rollout.rolling({ maxUpdate: MaxUpdate.count(3) }) }).spec.rolloutStrategy)
      .toEqual({ type: 'rolling', rolling: { maxUpdate: 3 } });
    expect(synthShim({ ...BASE, rollout: Rollout.rolling() }).spec.rolloutStrategy)
      .toEqual({ type: 'rolling', rolling: { maxUpdate: 1 } });
  });

  test('createRuntimeClass: false is the default', () => {
    const { objects, shim } = synthShim({ ...BASE, createRuntimeClass: false });
    expect(objects.map(o => o.kind)).toEqual(['Shim']);
    expect(shim.runtimeClass).toBeUndefined();
  });

  test('addPlatform() after construction is rendered', () => {
    // GIVEN a shim with no artifact yet
    const chart = Testing.chart();
    const shim = new ShimConstruct(chart, 'spin', { handler: 'spin' });
    // WHEN a platform is added later
    shim.addPlatform({ os: 'linux', arch: 'amd64', location: 'https://example.com/a.tgz' });
    // THEN it is in the synthesized spec
    const spec = Testing.synth(chart)[0].spec;
    expect(spec.fetchStrategy.platforms).toEqual([{ os: 'linux', arch: 'amd64', location: 'https://example.com/a.tgz' }]);
  });

  test('labels and annotations go on the Shim and its RuntimeClass; Argo CD keys stay off the controller\'s RuntimeClass', () => {
    // GIVEN labels, annotations (Argo CD's and the controller's keys among them) and a sync wave
    const props = {
      ...BASE,
      labels: { team: 'platform' },
      annotations: { 'example.com/owner': 'wasm', 'argocd.argoproj.io/sync-wave': '7', 'argocd.argoproj.io/compare-options': 'IgnoreExtraneous', 'runtime.spinkube.dev/retry': '1' },
      syncWave: -5,
    };
    // WHEN the controller writes the RuntimeClass
    const { objects, spec } = synthShim(props);
    // THEN the Shim carries them all, with the prop's sync wave
    expect(objects[0].metadata.labels).toEqual({
      'team': 'platform',
      'app.kubernetes.io/name': 'runtime-class-manager',
      'app.kubernetes.io/part-of': 'runtime-class-manager',
      'app.kubernetes.io/component': 'shim',
    });
    expect(objects[0].metadata.annotations).toMatchObject({ 'example.com/owner': 'wasm', 'argocd.argoproj.io/sync-wave': '-5', 'runtime.spinkube.dev/retry': '1' });
    // AND its RuntimeClass gets the labels and the annotations that mean something there
    expect(spec.runtimeClass.labels).toEqual({ team: 'platform' });
    expect(spec.runtimeClass.annotations).toEqual({ 'example.com/owner': 'wasm' });

    // WHEN the RuntimeClass is synthesized too THEN it carries them as the Shim does
    const synthesized = synthShim({ ...props, createRuntimeClass: true }).runtimeClass;
    expect(synthesized.metadata.labels).toMatchObject({ team: 'platform' });
    expect(synthesized.metadata.annotations).toMatchObject({ 'example.com/owner': 'wasm', 'argocd.argoproj.io/sync-wave': '-5' });
  });

  test('in a Chart with a namespace, the cluster-scoped Shim and RuntimeClass carry none', () => {
    const app = Testing.app();
    const chart = new Chart(app, 'c', { namespace: 'apps' });
    new ShimConstruct(chart, 'spin', { ...BASE, createRuntimeClass: true });
    const objects = Testing.synth(chart);
    expect(objects.map(o => o.metadata.namespace)).toEqual([undefined, undefined]);
  });

  test('plain http only when explicitly allowed', () => {
    expect(() => synthShim({ handler: 'spin', location: 'http://127.0.0.1:8080/shim.tgz' })).toThrow(/location: "http:\/\/127.0.0.1:8080\/shim.tgz" uses plain http \(set allowInsecureHttp/);
    expect(synthShim({ handler: 'spin', location: 'http://127.0.0.1:8080/shim.tgz', allowInsecureHttp: true }).spec.fetchStrategy.anonHttp.location)
      .toBe('http://127.0.0.1:8080/shim.tgz');
  });

  test('a gVisor-like payload from an image pinned by digest, with handler fields and an overhead preset', () => {
    // GIVEN a runtime of several files, shipped in an image, driven by the runc shim
    const reference = 'registry.example/gvisor-payload@sha256:' + 'c'.repeat(64);
    const { spec } = synthShim({
      handler: 'gvisor',
      image: { reference, path: '/payload/gvisor.tgz', sha256: SHA, imagePullSecrets: ['regcred'] },
      payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
      runtimeOptions: { BinaryName: '${PAYLOAD}/bin/runsc-wrapper' },
      containerdRuntime: { podAnnotations: ['dev.gvisor.*'], privilegedWithoutHostDevices: true },
      overhead: RuntimeOverhead.KATA_QEMU,
    }, 'gvisor');
    // THEN the Shim carries each, in the CRD's shape
    expect(spec.fetchStrategy).toEqual({ type: 'anonymousHttp', image: { reference, path: '/payload/gvisor.tgz', sha256: SHA, imagePullSecrets: [{ name: 'regcred' }] } });
    expect(spec.payload).toEqual({ shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' });
    expect(spec.containerdRuntime).toEqual({ podAnnotations: ['dev.gvisor.*'], privilegedWithoutHostDevices: true });
    expect(spec.containerdRuntimeOptions).toEqual({ BinaryName: '${PAYLOAD}/bin/runsc-wrapper' });
    expect(spec.runtimeClass.overhead).toEqual({ podFixed: { memory: '160Mi', cpu: '250m' } });
  });

  describe('rejects bad props with a message naming the field', () => {
    const CASES: [string, Partial<ShimConstructProps> & { id?: string }, RegExp][] = [
      ['a name that is not a DNS label', { name: 'Spin_V2' }, /^name: "Spin_V2" is not a DNS label/],
      ['an id that is not a DNS label and no name', { id: 'SpinShim' }, /^name: "SpinShim" is not a DNS label .*set props.name/],
      ['a handler with uppercase', { handler: 'Spin' }, /^handler: "Spin" is not a DNS label/],
      ['a handler with a dot (would split TOML keys)', { handler: 'spin.v2' }, /^handler: "spin.v2" is not a DNS label/],
      ['a handler longer than 63 characters', { handler: 'a'.repeat(64) }, /^handler: "a{64}" is not a DNS label/],
      ['a bad runtimeClassName', { runtimeClassName: 'Spin!' }, /^runtimeClassName: "Spin!" is not a DNS subdomain/],
      ['a sha256 of the wrong shape', { sha256: 'ABC' }, /^sha256: "ABC" is not 64 lowercase hex digits/],
      ['an uppercase sha256', { sha256: 'A'.repeat(64) }, /^sha256: "A{64}" is not 64 lowercase hex digits/],
      ['a location that is not a URL', { location: 'not a url' }, /^location: "not a url" is not a valid URL/],
      ['a file:// location', { location: 'file:///etc/shim' }, /^location: "file:\/\/\/etc\/shim" uses unsupported scheme "file"/],
      ['a sha256 without location', { location: undefined, platforms: [{ os: 'linux', arch: 'amd64', location: 'https://e.com/a' }] }, /^sha256: given without location/],
      ['a bad platform os', { platforms: [{ os: 'Linux', arch: 'amd64', location: 'https://e.com/a' }] }, /^platforms\[0\].os: "Linux"/],
      ['a bad platform arch', { platforms: [{ os: 'linux', arch: 'x86-64', location: 'https://e.com/a' }] }, /^platforms\[0\].arch: "x86-64"/],
      ['an http platform location', { platforms: [{ os: 'linux', arch: 'amd64', location: 'http://e.com/a' }] }, /^platforms\[0\].location: "http:\/\/e.com\/a" uses plain http/],
      ['a bad platform sha256', { platforms: [{ os: 'linux', arch: 'amd64', location: 'https://e.com/a', sha256: 'x' }] }, /^platforms\[0\].sha256: "x"/],
      ['a platform given twice', {
        platforms: [{ os: 'linux', arch: 'amd64', location: 'https://e.com/a' }, { os: 'linux', arch: 'amd64', location: 'https://e.com/b' }],
      }, /^platforms: linux\/amd64 is given twice/],
      ['a bad overhead quantity', { overhead: { memory: 'lots' } }, /^overhead.memory: "lots" is not a Kubernetes quantity/],
      ['a bad toleration operator (from JavaScript)', { tolerations: [{ key: 'k', operator: 'In' as any }] }, /^tolerations\[0\].operator: "In" is not one of Exists, Equal/],
      ['a bad toleration effect (from JavaScript)', { tolerations: [{ key: 'k', effect: 'Evict' as any }] }, /^tolerations\[0\].effect: "Evict"/],
      ['a toleration with Exists and a value', { tolerations: [{ key: 'k', operator: TolerationOperator.EXISTS, value: 'v' }] }, /^tolerations\[0\].value: must be empty with operator Exists/],
      ['a toleration without key and not Exists', { tolerations: [{ value: 'v' }] }, /^tolerations\[0\].key: an empty key needs operator Exists/],
      ['tolerationSeconds with NoSchedule', { tolerations: [{ key: 'k', effect: TolerationEffect.NO_SCHEDULE, tolerationSeconds: 60 }] },
        /^tolerations\[0\].tolerationSeconds: only applies to effect NoExecute, got effect NoSchedule/],
      ['tolerationSeconds without an effect', { tolerations: [{ key: 'k', tolerationSeconds: 60 }] }, /^tolerations\[0\].tolerationSeconds: only applies to effect NoExecute, got effect \(every effect\)/],
      ['fractional tolerationSeconds', { tolerations: [{ key: 'k', effect: TolerationEffect.NO_EXECUTE, tolerationSeconds: 1.5 }] }, /^tolerations\[0\].tolerationSeconds: must be a whole number, got 1.5/],
      ['a runtime option key the installer refuses', { runtimeOptions: { 'Binary.Name': 'x' } }, /^runtimeOptions: key "Binary.Name" may only hold letters, digits and '_'/],
      ['a runtime option value with a newline', { runtimeOptions: { ConfigPath: '/a\nInjected=true' } }, /^runtimeOptions.ConfigPath: holds a control character such as a newline: the value must be one line/],
      // The controller's rule (shared/validation.ts), so that what synthesizes is never an invalid Shim.
      ['a runtime option value with another control character', { runtimeOptions: { ConfigPath: '/a\u0007' } }, /^runtimeOptions.ConfigPath: holds a control character/],
      ['a label key that Kubernetes refuses', { labels: { 'team name': 'x' } }, /^labels: key "team name": the name "team name" must be 1 to 63/],
      ['a label value that Kubernetes refuses', { labels: { team: 'a b' } }, /^labels: the value "a b" of "team"/],
      ['an annotation key with a bad prefix', { annotations: { 'Example.com/x': 'y' } }, /^annotations: key "Example.com\/x": the prefix "Example.com" is not a DNS subdomain/],
      ['a fractional sync wave', { syncWave: 1.5 }, /^syncWave: must be a whole number, got 1.5/],
    ];
    test.each(CASES)('%s', (_what, override, message) => {
      const { id, ...props } = override;
      expect(() => synthShim({ ...BASE, ...props } as ShimConstructProps, id ?? 'spin')).toThrow(message);
    });

    test('maxUpdate out of range', () => {
      expect(() => MaxUpdate.count(0)).toThrow(/^rollout.maxUpdate: count must be a whole number >= 1, got 0/);
      expect(() => MaxUpdate.count(1.5)).toThrow(/^rollout.maxUpdate: count must be a whole number >= 1, got 1.5/);
      expect(() => MaxUpdate.percent(0)).toThrow(/^rollout.maxUpdate: percentage must be a whole number from 1 to 100, got 0/);
      expect(() => MaxUpdate.percent(101)).toThrow(/^rollout.maxUpdate: percentage must be a whole number from 1 to 100, got 101/);
    });

    test('an empty restart command', () => {
      expect(() => ContainerdRestart.command(' ')).toThrow(/^restart: the restart command must not be empty/);
    });
  });

  describe('rejects bad payloads, images and handler fields, naming the field', () => {
    const image = { reference: 'registry.example/x:1', path: '/x.tgz' };
    test.each<[string, Partial<ShimConstructProps>, RegExp]>([
      ['a payload shim outside the payload', { payload: { shim: '../bin/x' } }, /payload.shim: "..\/bin\/x" is not a relative path inside the payload/],
      ['an absolute payload shim', { payload: { shim: '/bin/x' } }, /payload.shim: "\/bin\/x"/],
      ['a runtime type that is a path', { payload: { shim: 'x', runtimeType: '/usr/bin/x' } }, /payload.runtimeType: "\/usr\/bin\/x" is not a runtime type name/],
      ['${PAYLOAD} without a payload', { runtimeOptions: { BinaryName: '${PAYLOAD}/runsc' } }, /runtimeOptions.BinaryName: refers to \$\{PAYLOAD\}, but the Shim has no payload/],
      ['an annotation glob with TOML in it', { containerdRuntime: { podAnnotations: ['ok/*', 'a"]'] } }, /containerdRuntime.podAnnotations\[1\]: "a"\]" is not an annotation key/],
      ['a bad snapshotter', { containerdRuntime: { snapshotter: 'Over Lay' } }, /containerdRuntime.snapshotter: "Over Lay" is not a snapshotter name/],
      ['an image reference with upper case', { location: undefined, sha256: undefined, image: { ...image, reference: 'Registry/X' } }, /image.reference: "Registry\/X" is not an image reference/],
      ['a relative image path', { location: undefined, sha256: undefined, image: { ...image, path: 'x.tgz' } }, /image.path: "x.tgz" is not an absolute path inside the image/],
      ['a bad image sha256', { location: undefined, sha256: undefined, image: { ...image, sha256: 'nope' } }, /image.sha256: "nope" is not 64 lowercase hex digits/],
      ['a bad pull secret name', { location: undefined, sha256: undefined, image: { ...image, imagePullSecrets: ['Bad_Name'] } }, /image.imagePullSecrets\[0\]: "Bad_Name" is not a Secret name/],
      ['a workload annotation key Kubernetes refuses', { workloadAnnotations: { 'Module.Wasm/variant': 'compat' } },
        /^workloadAnnotations: key "Module.Wasm\/variant": the prefix "Module.Wasm" is not a DNS subdomain/],
      ['a workload annotation no handler glob lets through', { workloadAnnotations: { 'module.wasm.image/variant': 'compat' } },
        /^workloadAnnotations: "module.wasm.image\/variant" would not reach the runtime: .*containerdRuntime.podAnnotations .*\(none given\); add "module.wasm.image\/variant" there/],
      ['a workload annotation only a container annotation glob matches', {
        workloadAnnotations: { 'module.wasm.image/variant': 'compat' }, containerdRuntime: { containerAnnotations: ['module.wasm.image/variant'] },
      }, /^workloadAnnotations: "module.wasm.image\/variant" would not reach the runtime/],
      ['a workload annotation past a glob whose * stops at /', {
        workloadAnnotations: { 'module.wasm.image/variant': 'compat' }, containerdRuntime: { podAnnotations: ['module.*', 'run.oci.handler'] },
      }, /^workloadAnnotations: "module.wasm.image\/variant" would not reach the runtime: .*\("module.\*", "run.oci.handler"\)/],
    ])('%s', (_what, props, message) => {
      expect(() => new ShimConstruct(Testing.chart(), 'spin', { ...BASE, ...props })).toThrow(message);
    });

    test('an image together with a location fails synth', () => {
      const chart = Testing.chart();
      new ShimConstruct(chart, 'spin', { ...BASE, image: { reference: 'registry.example/x:1', path: '/x.tgz' } });
      expect(() => Testing.synth(chart)).toThrow(/Shim "spin": image: give either image or location\/platforms, not both/);
    });
  });

  describe('app-wide rules fail synth', () => {
    function twoShims(first: ShimConstructProps, second: ShimConstructProps): App {
      const app = Testing.app();
      const a = new Chart(app, 'first');
      const b = new Chart(app, 'second');
      new ShimConstruct(a, 'one', first);
      new ShimConstruct(b, 'two', second);
      return app;
    }

    test('no artifact at all', () => {
      const chart = Testing.chart();
      new ShimConstruct(chart, 'spin', { handler: 'spin' });
      expect(() => Testing.synth(chart)).toThrow(/Shim "spin": location: no artifact: set location or image, or add at least one platform/);
    });

    test('duplicate handlers across charts of one app', () => {
      const app = twoShims({ ...BASE }, { ...BASE });
      expect(() => app.synth()).toThrow(/Shim "two": handler "spin" is also claimed by Shim "one"/);
    });

    test('duplicate RuntimeClass names', () => {
      const app = twoShims({ ...BASE, runtimeClassName: 'wasm' }, { ...BASE, handler: 'other', runtimeClassName: 'wasm' });
      expect(() => app.synth()).toThrow(/runtimeClassName "wasm" is also used by Shim "(one|two)"/);
    });

    test('a RuntimeClass name shared with a Shim that leaves its RuntimeClass to the controller', () => {
      // GIVEN one Shim whose RuntimeClass the controller makes, and another that synthesizes one of the same name
      const app = twoShims({ ...BASE, runtimeClassName: 'wasm' }, { ...BASE, handler: 'other', runtimeClassName: 'wasm', createRuntimeClass: true });
      // THEN synth fails (the controller would report a RuntimeClassConflict on the cluster)
      expect(() => app.synth()).toThrow(/runtimeClassName "wasm" is also used by Shim "(one|two)"/);
    });

    test('duplicate Shim names', () => {
      const app = twoShims({ ...BASE, name: 'same' }, { ...BASE, handler: 'other', name: 'same' });
      expect(() => app.synth()).toThrow(/Shim "same": name is used by another Shim in this app/);
    });

    test('distinct shims synthesize', () => {
      const app = twoShims({ ...BASE }, { ...BASE, handler: 'wasmtime' });
      expect(() => app.synth()).not.toThrow();
    });
  });
});

describe('ShimNodeLabels', () => {
  test('derives a prefixed key per Shim name', () => {
    expect(ShimNodeLabels.stateKey('spin-v2')).toBe('spin-v2.shim.runtime.spinkube.dev/state');
    expect(ShimNodeLabels.handlerKey('spin-v2')).toBe('spin-v2.shim.runtime.spinkube.dev/handler');
    expect(ShimNodeLabels.installedKey('spin-v2')).toBe('spin-v2.shim.runtime.spinkube.dev/installed');
    expect(ShimNodeLabels.failureKey('spin-v2')).toBe('spin-v2.shim.runtime.spinkube.dev/failure');
    expect(ShimNodeLabels.stateKey('a.b')).toBe('a.b.shim.runtime.spinkube.dev/state');
  });

  test('refuses names that cannot form a label prefix', () => {
    expect(() => ShimNodeLabels.stateKey('Spin')).toThrow(/Shim name "Spin" cannot form a node label prefix/);
    expect(() => ShimNodeLabels.stateKey('')).toThrow(/cannot form a node label prefix/);
    expect(() => ShimNodeLabels.stateKey('x'.repeat(ShimNodeLabels.MAX_SHIM_NAME_LENGTH + 1))).toThrow(/cannot form/);
    expect(() => ShimNodeLabels.stateKey('a'.repeat(64))).toThrow(/cannot form/); // one DNS label > 63
  });
});
