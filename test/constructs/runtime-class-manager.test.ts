import * as fs from 'fs';
import { Duration, Testing, Yaml } from 'cdk8s';
import { ContainerdRestart, ImagePullPolicy, LogFormat, RuntimeClassManager, ShimConstruct, ShimDefinition } from '../../src';

function synth(props = {}) {
  const chart = Testing.chart();
  const manager = new RuntimeClassManager(chart, 'Manager', props);
  const objects = Testing.synth(chart);
  const byKind = (kind: string) => objects.filter(o => o.kind === kind);
  return { manager, objects, byKind, deployment: byKind('Deployment')[0] };
}

describe('RuntimeClassManager', () => {
  test('defaults', () => {
    // GIVEN / WHEN a manager with no props
    const { objects, deployment } = synth();
    // THEN
    expect(objects).toMatchSnapshot();
    expect(objects.map(o => `${o.kind}/${o.metadata.name}`)).toEqual([
      'Namespace/runtime-class-manager',
      'CustomResourceDefinition/shims.runtime.spinkube.dev',
      'ServiceAccount/rcm-controller',
      'ClusterRole/rcm-controller',
      'ClusterRoleBinding/rcm-controller',
      'Role/rcm-controller',
      'RoleBinding/rcm-controller',
      'Deployment/rcm-controller',
    ]);
    expect(deployment.spec.replicas).toBe(2);
    expect(deployment.spec.template.spec.containers[0].args).toEqual([
      '--namespace=runtime-class-manager',
      '--installer-image=ghcr.io/runtime-class-manager-cdk8s/rcm-node-installer:0.1.0',
      '--installer-image-pull-policy=IfNotPresent',
      '--leader-elect=true',
      '--metrics-bind-address=:8080',
      '--health-probe-bind-address=:8081',
      '--log-format=json',
      '--default-restart-mode=systemd',
      '--job-ttl-seconds=3600',
      '--lease-duration-seconds=15',
      '--workers=4',
      '--resync-seconds=30',
      '--retry-base-seconds=30',
      '--retry-max-seconds=900',
      '--failure-threshold=3',
      '--kube-api-qps=50',
      '--kube-api-burst=100',
    ]);
  });

  test('emits the repository CRD file unchanged', () => {
    const { byKind } = synth();
    expect(byKind('CustomResourceDefinition')).toEqual(Yaml.load(ShimDefinition.file));
  });

  test('the controller runs hardened', () => {
    const { deployment } = synth();
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0];
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
    expect(container.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      privileged: false,
      runAsNonRoot: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'probes' });
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'probes' });
    expect(container.resources.limits).toEqual({ cpu: '500m', memory: '256Mi' });
    expect(pod.hostNetwork).toBeUndefined();
  });

  test('RBAC grants no secrets and keeps Jobs, pods and leases to its namespace', () => {
    const { byKind } = synth();
    const clusterRules = byKind('ClusterRole')[0].rules;
    const allResources = [...clusterRules, ...byKind('Role')[0].rules].flatMap((r: any) => r.resources);
    expect(allResources).not.toContain('secrets');
    expect(allResources).not.toContain('*');
    expect(clusterRules.flatMap((r: any) => r.resources)).not.toEqual(expect.arrayContaining(['jobs']));
    expect(clusterRules.flatMap((r: any) => r.resources)).not.toEqual(expect.arrayContaining(['pods']));
    expect(byKind('Role')[0].metadata.namespace).toBe('runtime-class-manager');
  });

  test('every setting is rendered', () => {
    const { deployment, byKind } = synth({
      namespace: 'rcm',
      controllerImage: 'registry.local/rcm-controller:dev',
      installerImage: 'registry.local/rcm-node-installer:dev',
      imagePullPolicy: ImagePullPolicy.NEVER,
      replicas: 1,
      leaderElection: false,
      metricsPort: 9090,
      probePort: 9091,
      logFormat: LogFormat.TEXT,
      defaultRestart: ContainerdRestart.command('/bin/restart-containerd'),
      jobTtl: Duration.minutes(5),
      resources: { cpuLimit: '1', memoryLimit: '1Gi' },
      createNamespace: false,
      leaseDuration: Duration.seconds(20),
      workers: 8,
      resyncPeriod: Duration.minutes(2),
      retryBackoff: Duration.seconds(5),
      maxRetryBackoff: Duration.minutes(10),
      failureThreshold: 5,
      kubeApiQps: 200,
      kubeApiBurst: 400,
      installerEnv: { HTTPS_PROXY: 'http://proxy.internal:3128', RCM_CONFIG: '/etc/containerd/custom.toml' },
    });
    const container = deployment.spec.template.spec.containers[0];
    expect(byKind('Namespace')).toEqual([]);
    expect(container.image).toBe('registry.local/rcm-controller:dev');
    expect(container.imagePullPolicy).toBe('Never');
    expect(container.args).toEqual([
      '--namespace=rcm',
      '--installer-image=registry.local/rcm-node-installer:dev',
      '--installer-image-pull-policy=Never',
      '--leader-elect=false',
      '--metrics-bind-address=:9090',
      '--health-probe-bind-address=:9091',
      '--log-format=text',
      '--default-restart-mode=command',
      '--default-restart-command=/bin/restart-containerd',
      '--job-ttl-seconds=300',
      '--lease-duration-seconds=20',
      '--workers=8',
      '--resync-seconds=120',
      '--retry-base-seconds=5',
      '--retry-max-seconds=600',
      '--failure-threshold=5',
      '--kube-api-qps=200',
      '--kube-api-burst=400',
      '--installer-env=HTTPS_PROXY=http://proxy.internal:3128',
      '--installer-env=RCM_CONFIG=/etc/containerd/custom.toml',
    ]);
    expect(container.ports).toEqual([
      { name: 'metrics', containerPort: 9090, protocol: 'TCP' },
      { name: 'probes', containerPort: 9091, protocol: 'TCP' },
    ]);
    expect(container.resources).toEqual({ requests: { cpu: '50m', memory: '64Mi' }, limits: { cpu: '1', memory: '1Gi' } });
    expect(deployment.spec.template.spec.affinity).toBeUndefined();
    expect(byKind('RoleBinding')[0].subjects).toEqual([{ kind: 'ServiceAccount', name: 'rcm-controller', namespace: 'rcm' }]);
  });

  test('addShim() creates a ShimConstruct inside the manager', () => {
    const chart = Testing.chart();
    const manager = new RuntimeClassManager(chart, 'Manager');
    const shim = manager.addShim('spin', { handler: 'spin', location: 'https://example.com/s.tgz' });
    expect(shim).toBeInstanceOf(ShimConstruct);
    expect(Testing.synth(chart).filter(o => o.kind === 'Shim').map(o => o.metadata.name)).toEqual(['spin']);
  });

  test('synthesis is deterministic', () => {
    expect(Yaml.stringify(...synth().objects)).toEqual(Yaml.stringify(...synth().objects));
  });

  describe('rejects bad props with a message naming the field', () => {
    test.each([
      [{ namespace: 'RCM' }, /^namespace: "RCM" is not a DNS label/],
      [{ replicas: 0 }, /^replicas: must be a whole number >= 1, got 0/],
      [{ replicas: 3, leaderElection: false }, /^replicas: 3 replicas need leaderElection/],
      [{ metricsPort: 70000 }, /^metricsPort: must be a port number from 1 to 65535, got 70000/],
      [{ probePort: 0 }, /^probePort: must be a port number from 1 to 65535, got 0/],
      [{ metricsPort: 9000, probePort: 9000 }, /^probePort: must differ from metricsPort/],
      [{ workers: 0 }, /^workers: must be a whole number >= 1, got 0/],
      [{ leaseDuration: Duration.millis(500) }, /^leaseDuration: must be a whole number >= 1 of seconds, got 0.5/],
      [{ kubeApiQps: 0.5 }, /^kubeApiQps: must be a whole number >= 1, got 0.5/],
      [{ failureThreshold: 0 }, /^failureThreshold: must be a whole number >= 1, got 0/],
      [{ retryBackoff: Duration.millis(1500) }, /^retryBackoff: must be a whole number >= 1 of seconds, got 1.5/],
      [{ retryBackoff: Duration.minutes(5), maxRetryBackoff: Duration.minutes(1) }, /^maxRetryBackoff: must not be shorter than retryBackoff \(300 seconds\), got 60 seconds/],
      [{ installerEnv: { 'HTTPS-PROXY': 'x' } }, /^installerEnv: "HTTPS-PROXY" is not an environment variable name/],
      [{ installerEnv: { RCM_SHA256: 'x' } }, /^installerEnv: "RCM_SHA256" is set per Shim by the controller/],
      [{ installerEnv: { NO_PROXY: 'a\nb' } }, /^installerEnv: the value of NO_PROXY must be one line/],
    ])('%j', (props, message) => {
      expect(() => synth(props)).toThrow(message);
    });
  });
});

test('the example app synthesizes', () => {
  // The example's own module is what `npx projen example` runs.
  expect(fs.existsSync(require.resolve('../../examples/wasm-shims/main'))).toBe(true);
});
