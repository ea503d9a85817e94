import { spawnSync } from 'child_process';
import * as fs from 'fs';
import { App, Chart, Testing, Yaml } from 'cdk8s';
import { WasmShims } from '../../examples/wasm-shims/main';
import { ControlPlane, startControlPlane } from '../support/control-plane';
import { Rest } from '../support/rest';
import { kubeBinary } from '../support/tools';

// The synthesized example and hand-written Shims against a real kube-apiserver (tools.ts: KUBE_VERSION):
// the CRD schema, server-side apply and the RBAC are judged by the real thing.

let cp: ControlPlane;
let manifests: any[];

beforeAll(async () => {
  cp = await startControlPlane();
  const app = Testing.app();
  new WasmShims(app, 'wasm-shims');
  manifests = app.charts.flatMap((c: Chart) => c.toJson());
}, 120_000);

afterAll(async () => {
  await cp?.stop();
});

function kubectlResult(args: string[], input?: string) {
  const r = spawnSync(kubeBinary('kubectl'), ['--kubeconfig', cp.kubeconfig, ...args], { input, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function applyServerSide(objects: any[]): void {
  const r = kubectlResult(['apply', '--server-side', '--field-manager=test', '-f', '-'], Yaml.stringify(...objects));
  if (r.status !== 0) throw new Error(`kubectl apply failed: ${r.stderr}\n${cp.logTails(10)}`);
}

function syncWave(obj: any): number {
  return Number(obj.metadata?.annotations?.['argocd.argoproj.io/sync-wave'] ?? 0);
}

const ORIGINAL_SAMPLE = `
apiVersion: runtime.spinkube.dev/v1alpha1
kind: Shim
metadata:
  name: spin-v2
  labels:
    app.kubernetes.io/name: spin-v2
spec:
  nodeSelector:
    spin: "true"
  fetchStrategy:
    type: anonymousHttp
    anonHttp:
      location: "https://github.com/spinframework/containerd-shim-spin/releases/download/v0.19.0/containerd-shim-spin-v2-linux-aarch64.tar.gz"
  runtimeClass:
    name: spin-v2
    handler: spin
  rolloutStrategy:
    type: recreate
    rolling:
      maxUpdate: 5
  containerdRuntimeOptions:
    SystemdCgroup: "true"
  runtimeOptions:
    SystemdCgroup: "true"
`;

function shim(name: string, spec: any): string {
  return JSON.stringify({ apiVersion: 'runtime.spinkube.dev/v1alpha1', kind: 'Shim', metadata: { name }, spec });
}

const VALID_SPEC = {
  fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://example.com/shim.tar.gz' } },
  runtimeClass: { name: 'probe', handler: 'probe' },
};

let applied = false;
/** Applies the example like Argo CD would: wave by wave, waiting for the CRD. Once. */
function applyExampleByWaves(): void {
  if (applied) return;
  const waves = [...new Set(manifests.map(syncWave))].sort((a, b) => a - b);
  for (const wave of waves) {
    applyServerSide(manifests.filter(m => syncWave(m) === wave));
    if (manifests.some(m => syncWave(m) === wave && m.kind === 'CustomResourceDefinition')) {
      cp.kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/shims.runtime.spinkube.dev']);
    }
  }
  applied = true;
}

describe('the synthesized example on a real API server', () => {
  test('applies wave by wave with server-side apply, and the CRD becomes Established', () => {
    // GIVEN the example's objects, annotated with Argo CD sync waves
    // (the workload at Argo CD's default wave 0, after the Shims)
    expect([...new Set(manifests.map(syncWave))].sort((a, b) => a - b)).toEqual([-40, -30, -20, -10, 0]);

    // WHEN each wave is applied in order
    applyExampleByWaves();

    // THEN every object exists as synthesized
    const shims = JSON.parse(cp.kubectl(['get', 'shims', '-o', 'json'])).items;
    expect(shims.map((s: any) => s.metadata.name).sort()).toEqual(['spin-v2', 'wasmtime-v1']);
    const spin = shims.find((s: any) => s.metadata.name === 'spin-v2');
    expect(spin.spec.rolloutStrategy).toEqual({ type: 'rolling', rolling: { maxUpdate: '25%' } });
    expect(spin.spec.fetchStrategy.platforms).toHaveLength(2);
    // AND the RuntimeClass is the controller's to write (createRuntimeClass defaults to false;
    // the controller's integration tests cover what it writes): the Shim names it
    expect(manifests.some(m => m.kind === 'RuntimeClass')).toBe(false);
    expect(spin.spec.runtimeClass).toMatchObject({ name: 'wasmtime-spin-v2', handler: 'spin' });
    const deployment = JSON.parse(cp.kubectl(['-n', 'runtime-class-manager', 'get', 'deployment', 'rcm-controller', '-o', 'json']));
    expect(deployment.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem).toBe(true);
    const hello = JSON.parse(cp.kubectl(['-n', 'default', 'get', 'deployment', 'hello-spin', '-o', 'json']));
    expect(hello.spec.template.spec.runtimeClassName).toBe('wasmtime-spin-v2');
  });

  test('re-applying the same output changes nothing (deterministic, conflict-free)', () => {
    // GIVEN the applied example
    const before = cp.kubectl(['get', 'shims', '-o', 'jsonpath={range .items[*]}{.metadata.name}={.metadata.generation} {end}']);
    // WHEN a second synth of the app is applied
    const app = new App();
    new WasmShims(app, 'wasm-shims');
    applyServerSide(app.charts.flatMap(c => c.toJson()).filter(o => o.kind !== 'PodDisruptionBudget'));
    // THEN no Shim got a new generation
    expect(cp.kubectl(['get', 'shims', '-o', 'jsonpath={range .items[*]}{.metadata.name}={.metadata.generation} {end}'])).toBe(before);
  });

  test('the printer columns show RuntimeClass, Ready, Nodes, Failed, Degraded and Age', async () => {
    const header = cp.kubectl(['get', 'shims']).split('\n')[0];
    expect(header.split(/\s+/)).toEqual(['NAME', 'RUNTIMECLASS', 'READY', 'NODES', 'FAILED', 'DEGRADED', 'AGE']);
    // the Degraded column reads the condition
    await new Rest(cp.server, cp.adminToken, cp.caFile).request('PATCH', '/apis/runtime.spinkube.dev/v1alpha1/shims/wasmtime-v1/status',
      { status: { nodes: 1, nodesReady: 0, nodesFailed: 1, conditions: [{ type: 'Degraded', status: 'True', reason: 'InstallFailed', message: 'x', lastTransitionTime: '2026-11-22T00:00:00Z' }] } },
      'application/merge-patch+json');
    const row = cp.kubectl(['get', 'shim', 'wasmtime-v1', '--no-headers']).split(/\s+/);
    expect(row.slice(0, 6)).toEqual(['wasmtime-v1', 'wasmtime-v1', '0', '1', '1', 'True']);
    expect(cp.kubectl(['get', 'shm', '-o', 'name'])).toContain('shim.runtime.spinkube.dev/spin-v2');
    expect(cp.kubectl(['get', 'rcm', '-o', 'name'])).toContain('shim.runtime.spinkube.dev/wasmtime-v1');
  });
});

describe('the Shim schema', () => {
  beforeAll(applyExampleByWaves);
  test("accepts the original runtime-class-manager's sample unchanged", () => {
    const r = kubectlResult(['apply', '--server-side', '-f', '-'], ORIGINAL_SAMPLE.replace('name: spin-v2\n  labels', 'name: original-sample\n  labels'));
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const stored = JSON.parse(cp.kubectl(['get', 'shim', 'original-sample', '-o', 'json']));
    expect(stored.spec.rolloutStrategy.rolling.maxUpdate).toBe(5);
    expect(stored.spec.containerdRuntimeOptions).toEqual({ SystemdCgroup: 'true' });
  });

  test('defaults rolloutStrategy to recreate and accepts per-platform artifacts with sha256', () => {
    const spec = {
      ...VALID_SPEC,
      fetchStrategy: {
        type: 'anonymousHttp',
        anonHttp: { platforms: [{ os: 'linux', arch: 'amd64', location: 'https://example.com/a.tgz', sha256: 'a'.repeat(64) }] },
      },
      runtimeClass: {
        name: 'with-extras',
        handler: 'extras',
        overhead: { podFixed: { memory: '64Mi', cpu: 1 } },
        tolerations: [{ key: 'wasm', operator: 'Exists', effect: 'NoSchedule' }],
      },
      restart: { mode: 'command', command: '/usr/local/bin/restart-containerd' },
    };
    const r = kubectlResult(['create', '-f', '-'], shim('with-extras', spec));
    expect(r.stderr).toBe('');
    const stored = JSON.parse(cp.kubectl(['get', 'shim', 'with-extras', '-o', 'json']));
    expect(stored.spec.rolloutStrategy).toEqual({ type: 'recreate' });
  });

  test('accepts today\'s upstream shape: no type, platforms beside anonHttp, x86_64 and aarch64, sha256 optional', () => {
    const spec = {
      fetchStrategy: {
        anonHttp: { location: 'https://example.com/any.tar.gz' },
        platforms: [
          { os: 'linux', arch: 'x86_64', location: 'https://example.com/x86_64.tar.gz', sha256: 'b'.repeat(64) },
          { os: 'linux', arch: 'aarch64', location: 'https://example.com/aarch64.tar.gz' },
        ],
      },
      runtimeClass: { name: 'upstream-now', handler: 'upstream-now' },
      rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } },
      containerdRuntimeOptions: { SystemdCgroup: 'true' },
    };
    const r = kubectlResult(['create', '--validate=false', '-f', '-'], shim('upstream-now', spec));
    expect(r.stderr).toBe('');
    const stored = JSON.parse(cp.kubectl(['get', 'shim', 'upstream-now', '-o', 'json']));
    expect(stored.spec).toEqual(spec);
    // the deprecated type is accepted with any value, and ignored
    const withType = kubectlResult(['create', '--validate=false', '-f', '-'], shim('upstream-typed', { ...spec, fetchStrategy: { ...spec.fetchStrategy, type: 'anonymousHttp' } }));
    expect(withType.stderr).toBe('');
  });

  test('has a status subresource: spec writes do not touch status', () => {
    const r = kubectlResult(['create', '-f', '-'], JSON.stringify({ ...JSON.parse(shim('status-probe', VALID_SPEC)), status: { nodes: 3 } }));
    expect(r.status).toBe(0);
    const stored = JSON.parse(cp.kubectl(['get', 'shim', 'status-probe', '-o', 'json']));
    expect(stored.status).toBeUndefined();
  });

  const REJECTED: [string, any, RegExp][] = [
    ['missing handler', { ...VALID_SPEC, runtimeClass: { name: 'x' } }, /spec.runtimeClass.handler: Required value/],
    ['missing runtimeClass', { fetchStrategy: VALID_SPEC.fetchStrategy }, /spec.runtimeClass: Required value/],
    ['missing fetchStrategy', { runtimeClass: VALID_SPEC.runtimeClass }, /spec.fetchStrategy: Required value/],
    ['no artifact at all', { ...VALID_SPEC, fetchStrategy: { type: 'anonymousHttp', anonHttp: {} } }, /spec.fetchStrategy.anonHttp/],
    ['unknown rollout type', { ...VALID_SPEC, rolloutStrategy: { type: 'blue-green' } }, /spec.rolloutStrategy.type: Unsupported value: "blue-green"/],
    ['maxUpdate 0', { ...VALID_SPEC, rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 0 } } }, /spec.rolloutStrategy.rolling.maxUpdate/],
    ['maxUpdate 150%', { ...VALID_SPEC, rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: '150%' } } }, /spec.rolloutStrategy.rolling.maxUpdate/],
    ['maxUpdate of the wrong type', { ...VALID_SPEC, rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: true } } }, /spec.rolloutStrategy.rolling.maxUpdate/],
    ['handler not a DNS label', { ...VALID_SPEC, runtimeClass: { name: 'x', handler: 'Spin_Shim' } }, /spec.runtimeClass.handler: Invalid value/],
    ['sha256 of the wrong shape', { ...VALID_SPEC, fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/a', sha256: 'xyz' } } }, /spec.fetchStrategy.anonHttp.sha256: Invalid value/],
    ['non-http location', { ...VALID_SPEC, fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'file:///etc/passwd' } } }, /spec.fetchStrategy.anonHttp.location: Invalid value/],
    ['nodeSelector of the wrong type', { ...VALID_SPEC, nodeSelector: ['a'] }, /spec.nodeSelector: Invalid value: "array"/],
    ['runtime options that are not strings', { ...VALID_SPEC, containerdRuntimeOptions: { SystemdCgroup: true } }, /spec.containerdRuntimeOptions.SystemdCgroup: Invalid value: "boolean"/],
    ['unknown restart mode', { ...VALID_SPEC, restart: { mode: 'reboot' } }, /spec.restart.mode: Unsupported value: "reboot"/],
    ['bad overhead quantity', { ...VALID_SPEC, runtimeClass: { ...VALID_SPEC.runtimeClass, overhead: { podFixed: { memory: 'lots' } } } }, /spec.runtimeClass.overhead.podFixed.memory/],
    ['duplicate platform', {
      ...VALID_SPEC,
      fetchStrategy: {
        type: 'anonymousHttp',
        anonHttp: { platforms: [{ os: 'linux', arch: 'amd64', location: 'https://e.com/a' }, { os: 'linux', arch: 'amd64', location: 'https://e.com/b' }] },
      },
    }, /Duplicate value/],
    ['duplicate platform in the upstream shape', {
      ...VALID_SPEC,
      fetchStrategy: { platforms: [{ os: 'linux', arch: 'x86_64', location: 'https://e.com/a' }, { os: 'linux', arch: 'x86_64', location: 'https://e.com/b' }] },
    }, /Duplicate value/],
    ['a non-http platform location in the upstream shape', {
      ...VALID_SPEC, fetchStrategy: { platforms: [{ os: 'linux', arch: 'aarch64', location: 'ftp://e.com/a' }] },
    }, /spec.fetchStrategy.platforms(\[0\])?.location: Invalid value/],
  ];
  test.each(REJECTED)('rejects %s', (_what, spec, message) => {
    // --validate=false: the API server, not kubectl's client-side check, must refuse it.
    const r = kubectlResult(['create', '--validate=false', '-f', '-'], shim('rejected', spec));
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(message);
    expect(kubectlResult(['get', 'shim', 'rejected']).status).not.toBe(0);
  });
});

describe('the roles for people', () => {
  beforeAll(() => {
    applyExampleByWaves();
    for (const [user, role] of [['alice', 'rcm-shim-editor'], ['bob', 'rcm-shim-viewer']]) {
      cp.kubectl(['create', 'clusterrolebinding', `${user}-${role}`, `--clusterrole=${role}`, `--user=${user}`]);
    }
  });
  const canI = (user: string, verb: string, resource: string, subresource?: string) =>
    kubectlResult(['auth', 'can-i', verb, resource, `--as=${user}`, ...(subresource ? [`--subresource=${subresource}`] : [])]).stdout.trim();

  test('rcm-shim-editor writes Shims, rcm-shim-viewer only reads them', () => {
    expect(['create', 'patch', 'delete', 'list'].map(v => canI('alice', v, 'shims.runtime.spinkube.dev'))).toEqual(['yes', 'yes', 'yes', 'yes']);
    expect(['list', 'watch', 'get'].map(v => canI('bob', v, 'shims.runtime.spinkube.dev'))).toEqual(['yes', 'yes', 'yes']);
    expect(['create', 'patch', 'delete'].map(v => canI('bob', v, 'shims.runtime.spinkube.dev'))).toEqual(['no', 'no', 'no']);
    // neither may touch the status the controller writes
    expect(canI('alice', 'patch', 'shims.runtime.spinkube.dev', 'status')).toBe('no');
    expect(canI('bob', 'get', 'shims.runtime.spinkube.dev', 'status')).toBe('yes');
  });
});

describe("the controller's RBAC", () => {
  beforeAll(applyExampleByWaves);
  const sa = 'system:serviceaccount:runtime-class-manager:rcm-controller';
  // `TYPE/SUB` is judged as the subresource (kubectl auth can-i would read SUB as an object's name).
  const canI = (verb: string, resource: string, namespace: string) => {
    const [type, subresource] = resource.split('/');
    return kubectlResult(['auth', 'can-i', verb, type, `--as=${sa}`, ...(subresource ? [`--subresource=${subresource}`] : []),
      ...(namespace ? ['-n', namespace] : [])]).stdout.trim();
  };

  const ALLOWED: [verb: string, resource: string, namespace: string][] = [
    ['get', 'nodes', ''], ['list', 'nodes', ''], ['watch', 'nodes', ''], ['patch', 'nodes', ''],
    ['list', 'shims.runtime.spinkube.dev', ''], ['watch', 'shims.runtime.spinkube.dev', ''], ['update', 'shims.runtime.spinkube.dev', ''],
    ['patch', 'shims.runtime.spinkube.dev/status', ''], ['update', 'shims.runtime.spinkube.dev/finalizers', ''],
    ['create', 'runtimeclasses.node.k8s.io', ''], ['patch', 'runtimeclasses.node.k8s.io', ''], ['delete', 'runtimeclasses.node.k8s.io', ''],
    ['create', 'events', 'default'], ['create', 'events.events.k8s.io', 'default'],
    ['create', 'jobs.batch', 'runtime-class-manager'], ['delete', 'jobs.batch', 'runtime-class-manager'], ['watch', 'jobs.batch', 'runtime-class-manager'],
    ['list', 'pods', 'runtime-class-manager'],
    ['create', 'leases.coordination.k8s.io', 'runtime-class-manager'], ['update', 'leases.coordination.k8s.io', 'runtime-class-manager'],
  ];
  const DENIED: [verb: string, resource: string, namespace: string][] = [
    ['get', 'secrets', 'runtime-class-manager'], ['list', 'secrets', 'kube-system'],
    ['create', 'jobs.batch', 'default'], ['list', 'pods', 'kube-system'], ['create', 'pods', 'runtime-class-manager'],
    ['delete', 'nodes', ''], ['update', 'nodes', ''], ['create', 'nodes', ''],
    ['delete', 'shims.runtime.spinkube.dev', ''], ['create', 'shims.runtime.spinkube.dev', ''],
    ['create', 'leases.coordination.k8s.io', 'kube-system'], ['list', 'configmaps', 'runtime-class-manager'],
    ['create', 'clusterrolebindings', ''], ['escalate', 'clusterroles', ''], ['impersonate', 'serviceaccounts', ''],
    ['create', 'pods/exec', 'runtime-class-manager'],
  ];
  // Every row has three entries: a shorter row would make jest pass its `done` callback.
  test.each(ALLOWED)('allows %s %s in "%s"', (verb, resource, ns) => {
    expect(canI(verb, resource, ns)).toBe('yes');
  });
  test.each(DENIED)('denies %s %s in "%s"', (verb, resource, ns) => {
    expect(canI(verb, resource, ns)).toBe('no');
  });
});

