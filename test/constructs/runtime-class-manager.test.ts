import * as fs from 'fs';
import { App, Chart, Duration, Testing, Yaml } from 'cdk8s';
import { WasmShims } from '../../examples/wasm-shims/main';
import { ArgoCd, ContainerdRestart, PullPolicy, LogFormat, RuntimeClassManager, RuntimeClassManagerProps, ShimConstruct, ShimDefinition, TolerationEffect, TolerationOperator } from '../../src';

const VERSION = JSON.parse(fs.readFileSync(`${__dirname}/../../package.json`, 'utf8')).version;

function synth(props: RuntimeClassManagerProps = {}) {
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
    // (the images' tag is the package version, which a release bumps: kept out of the snapshot)
    expect(JSON.parse(JSON.stringify(objects).split(`:${VERSION}"`).join(':<package version>"'))).toMatchSnapshot();
    expect(objects.map(o => `${o.kind}/${o.metadata.name}`)).toEqual([
      'Namespace/runtime-class-manager',
      'CustomResourceDefinition/shims.runtime.spinkube.dev',
      'ServiceAccount/rcm-controller',
      'ClusterRole/rcm-controller',
      'ClusterRoleBinding/rcm-controller',
      'Role/rcm-controller',
      'RoleBinding/rcm-controller',
      'ClusterRole/rcm-shim-viewer',
      'ClusterRole/rcm-shim-editor',
      'Deployment/rcm-controller',
      'Service/rcm-controller-metrics',
      'PodDisruptionBudget/rcm-controller',
      'NetworkPolicy/rcm-controller',
    ]);
    expect(deployment.spec.replicas).toBe(2);
    expect(deployment.spec.template.spec.containers[0].args).toEqual([
      '--namespace=runtime-class-manager',
      `--installer-image=ghcr.io/runtime-class-manager-cdk8s/rcm-node-installer:${VERSION}`,
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
      imagePullPolicy: PullPolicy.NEVER,
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
    expect(container.resources).toEqual({ requests: { cpu: '50m', memory: '128Mi' }, limits: { cpu: '1', memory: '1Gi' } });
    expect(deployment.spec.template.spec.affinity).toBeUndefined();
    expect(byKind('RoleBinding')[0].subjects).toEqual([{ apiGroup: '', kind: 'ServiceAccount', name: 'rcm-controller', namespace: 'rcm' }]);
  });

  test('private registries: a registry override, a tag, and pull secrets for the controller and the installer Jobs', () => {
    // GIVEN a mirror, a tag and one pull secret as a prop
    const { manager, objects, deployment } = synth({ imageRegistry: 'registry.example.com/mirror/', imageTag: '1.2.3', imagePullSecrets: ['regcred'] });
    // WHEN another is added later
    manager.addImagePullSecret('backup-regcred');
    manager.addImagePullSecret('regcred'); // once only
    const later = Testing.synth(Chart.of(manager)).find(o => o.kind === 'Deployment');
    // THEN both images come from the mirror with the tag
    const container = deployment.spec.template.spec.containers[0];
    expect(container.image).toBe('registry.example.com/mirror/rcm-controller:1.2.3');
    expect(container.args).toContain('--installer-image=registry.example.com/mirror/rcm-node-installer:1.2.3');
    expect(manager.installerImage).toBe('registry.example.com/mirror/rcm-node-installer:1.2.3');
    expect(objects.length).toBeGreaterThan(0);
    // AND the controller pod and the installer Jobs (through the flag) pull with the secrets
    expect(later.spec.template.spec.imagePullSecrets).toEqual([{ name: 'backup-regcred' }, { name: 'regcred' }]);
    expect(later.spec.template.spec.containers[0].args.filter((a: string) => a.startsWith('--installer-image-pull-secret')))
      .toEqual(['--installer-image-pull-secret=backup-regcred', '--installer-image-pull-secret=regcred']);
    expect(manager.imagePullSecrets).toEqual(['regcred', 'backup-regcred']);
  });

  test('the default images are tagged with the package version', () => {
    const { deployment } = synth();
    expect(deployment.spec.template.spec.containers[0].image).toBe(`ghcr.io/runtime-class-manager-cdk8s/rcm-controller:${VERSION}`);
    expect(deployment.spec.template.spec.imagePullSecrets).toBeUndefined();
  });

  test('placement: Linux nodes by default, spread and a disruption budget with two replicas', () => {
    const { deployment, byKind } = synth();
    const pod = deployment.spec.template.spec;
    expect(pod.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux' });
    expect(pod.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey).toBe('kubernetes.io/hostname');
    expect(pod.topologySpreadConstraints).toEqual([expect.objectContaining({ topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'ScheduleAnyway', maxSkew: 1 })]);
    expect(byKind('PodDisruptionBudget')[0]).toMatchObject({ apiVersion: 'policy/v1', spec: { minAvailable: 1, selector: { matchLabels: deployment.spec.selector.matchLabels } } });
    expect(pod.priorityClassName).toBeUndefined();
  });

  test('placement: nodeSelector, tolerations, affinity and priorityClassName as given; one replica has no budget', () => {
    const affinity = { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'pool', operator: 'In', values: ['system'] }] }] } } };
    const { deployment, byKind } = synth({
      replicas: 1,
      nodeSelector: { 'kubernetes.io/os': 'linux', 'pool': 'system' },
      tolerations: [{ key: 'CriticalAddonsOnly', operator: TolerationOperator.EXISTS }, { key: 'node.kubernetes.io/unreachable', operator: TolerationOperator.EXISTS, effect: TolerationEffect.NO_EXECUTE, tolerationSeconds: 30 }],
      affinity,
      priorityClassName: 'system-cluster-critical',
    });
    const pod = deployment.spec.template.spec;
    expect(pod.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux', 'pool': 'system' });
    expect(pod.tolerations).toEqual([
      { key: 'CriticalAddonsOnly', operator: 'Exists' },
      { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 },
    ]);
    expect(pod.affinity).toEqual(affinity);
    expect(pod.priorityClassName).toBe('system-cluster-critical');
    expect(pod.topologySpreadConstraints).toBeUndefined();
    expect(byKind('PodDisruptionBudget')).toEqual([]);
  });

  test('observability: a metrics Service, and a ServiceMonitor on request', () => {
    const without = synth();
    expect(without.byKind('ServiceMonitor')).toEqual([]);
    const service = without.byKind('Service')[0];
    expect(service.spec).toEqual({
      type: 'ClusterIP',
      selector: without.deployment.spec.selector.matchLabels,
      ports: [{ name: 'metrics', port: 8080, targetPort: 'metrics', protocol: 'TCP' }],
    });
    const { byKind } = synth({ serviceMonitor: true, metricsPort: 9090 });
    const monitor = byKind('ServiceMonitor')[0];
    expect(monitor.spec.selector.matchLabels).toEqual(byKind('Service')[0].metadata.labels);
    expect(monitor.spec.endpoints).toEqual([{ port: 'metrics', path: '/metrics', interval: '30s' }]);
    expect(byKind('Service')[0].spec.ports[0].port).toBe(9090);
  });

  test('security: a NetworkPolicy to the API server only, viewer and editor roles', () => {
    const { byKind, deployment } = synth({ apiServerPorts: [16443] });
    const policy = byKind('NetworkPolicy')[0];
    expect(policy.spec).toEqual({
      podSelector: { matchLabels: deployment.spec.selector.matchLabels },
      policyTypes: ['Ingress', 'Egress'],
      ingress: [{ ports: [{ protocol: 'TCP', port: 8080 }, { protocol: 'TCP', port: 8081 }] }],
      egress: [{ ports: [{ protocol: 'TCP', port: 16443 }] }],
    });
    const roles = Object.fromEntries(byKind('ClusterRole').map((r: any) => [r.metadata.name, r]));
    // reading Shims joins view/edit/admin; writing them (root on nodes) is never aggregated
    expect(roles['rcm-shim-viewer'].metadata.labels['rbac.authorization.k8s.io/aggregate-to-view']).toBe('true');
    expect(roles['rcm-shim-viewer'].rules.flatMap((r: any) => r.verbs)).not.toEqual(expect.arrayContaining(['create']));
    expect(Object.keys(roles['rcm-shim-editor'].metadata.labels).filter(k => k.startsWith('rbac.authorization.k8s.io/aggregate'))).toEqual([]);
    expect(roles['rcm-shim-editor'].rules[0].verbs).toEqual(expect.arrayContaining(['create', 'update', 'patch', 'delete']));
    expect(synth({ networkPolicy: false }).byKind('NetworkPolicy')).toEqual([]);
  });

  test('Argo CD: every object in its wave, below the default wave 0; overridable; Shims inherit the manager\'s', () => {
    // GIVEN defaults
    const { objects } = synth();
    const waveOf = (o: any) => o.metadata.annotations?.[ArgoCd.SYNC_WAVE_ANNOTATION];
    expect(objects.map(o => `${o.kind}:${waveOf(o)}`)).toEqual([
      'Namespace:-40', 'CustomResourceDefinition:-30',
      ...['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRole', 'Deployment',
        'Service', 'PodDisruptionBudget', 'NetworkPolicy'].map(k => `${k}:-20`),
    ]);
    // WHEN waves are overridden and a Shim is added
    const chart = Testing.chart();
    const manager = new RuntimeClassManager(chart, 'Manager', { syncWaves: { namespace: -9, definition: -8, controller: -7, shims: 3 } });
    manager.addShim('spin', { handler: 'spin', location: 'https://example.com/s.tgz', createRuntimeClass: true });
    manager.addShim('own', { handler: 'own', location: 'https://example.com/s.tgz', syncWave: 5 });
    const waves = Testing.synth(chart).map(o => `${o.kind}/${o.metadata.name}:${waveOf(o)}`);
    // THEN
    expect(waves).toEqual(expect.arrayContaining(['Namespace/runtime-class-manager:-9', 'CustomResourceDefinition/shims.runtime.spinkube.dev:-8',
      'Deployment/rcm-controller:-7', 'Shim/spin:3', 'RuntimeClass/spin:3', 'Shim/own:5']));
    expect(manager.syncWaves).toEqual({ namespace: -9, definition: -8, controller: -7, shims: 3 });
  });

  test('metadata: labels and annotations on every object (Shims included); the Chart\'s namespace is the controller\'s', () => {
    // GIVEN a Chart with a namespace and a manager with labels and annotations
    const app = new App();
    const chart = new Chart(app, 'platform', { namespace: 'platform-system' });
    const manager = new RuntimeClassManager(chart, 'Manager', { labels: { team: 'platform' }, annotations: { 'example.com/owner': 'platform' } });
    manager.addShim('spin', { handler: 'spin', location: 'https://example.com/s.tgz', labels: { tier: 'wasm' } });
    const objects = Testing.synth(chart);
    // THEN every object has them
    for (const o of objects) {
      expect(o.metadata.labels).toMatchObject({ team: 'platform' });
      expect(o.metadata.annotations).toMatchObject({ 'example.com/owner': 'platform' });
    }
    expect(objects.find(o => o.kind === 'Shim').metadata.labels).toEqual({
      'team': 'platform',
      'tier': 'wasm',
      // the labels every object of the manager has: prune and selection by label take the Shims too
      'app.kubernetes.io/name': 'runtime-class-manager',
      'app.kubernetes.io/part-of': 'runtime-class-manager',
      'app.kubernetes.io/component': 'shim',
    });
    // AND one selector finds every object of the manager, the Shims included
    expect(objects.filter(o => o.metadata.labels?.['app.kubernetes.io/part-of'] === 'runtime-class-manager').length).toBe(objects.length);
    // AND the namespaced objects go to the Chart's namespace, the cluster-scoped ones carry none
    const namespaced = ['ServiceAccount', 'Role', 'RoleBinding', 'Deployment', 'Service', 'PodDisruptionBudget', 'NetworkPolicy'];
    for (const o of objects) expect([o.kind, o.metadata.namespace]).toEqual([o.kind, namespaced.includes(o.kind) ? 'platform-system' : undefined]);
    expect(objects.find(o => o.kind === 'Namespace').metadata.name).toBe('platform-system');
    expect(objects.find(o => o.kind === 'Deployment').spec.template.spec.containers[0].args[0]).toBe('--namespace=platform-system');
    expect(objects.find(o => o.kind === 'ClusterRoleBinding').subjects[0].namespace).toBe('platform-system');
  });

  test('security: installer Jobs in a namespace of their own; the controller\'s enforces restricted pods', () => {
    // GIVEN a separate installer namespace
    const { byKind, deployment, manager } = synth({ installerNamespace: 'rcm-installers' });
    // THEN two namespaces: privileged pods only where the installers run
    expect(byKind('Namespace').map((n: any) => [n.metadata.name, n.metadata.labels['pod-security.kubernetes.io/enforce']]))
      .toEqual([['runtime-class-manager', 'restricted'], ['rcm-installers', 'privileged']]);
    // AND the controller may handle Jobs and pods only there, and its Lease only at home
    const roles = Object.fromEntries(byKind('Role').map((r: any) => [r.metadata.namespace, r.rules.flatMap((rule: any) => rule.resources)]));
    expect(roles).toEqual({ 'runtime-class-manager': ['leases'], 'rcm-installers': ['jobs', 'pods'] });
    for (const b of byKind('RoleBinding')) expect(b.subjects).toEqual([{ apiGroup: '', kind: 'ServiceAccount', name: 'rcm-controller', namespace: 'runtime-class-manager' }]);
    expect(deployment.spec.template.spec.containers[0].args.slice(0, 2)).toEqual(['--namespace=runtime-class-manager', '--installer-namespace=rcm-installers']);
    expect(manager.installerNamespace).toBe('rcm-installers');
    // AND by default one namespace, no flag
    expect(synth().deployment.spec.template.spec.containers[0].args.join(' ')).not.toMatch(/installer-namespace/);
    expect(() => synth({ installerNamespace: 'Installers' })).toThrow(/^installerNamespace: "Installers" is not a DNS label/);
  });

  test('two managers in one app fail synth, naming both', () => {
    const app = Testing.app();
    new RuntimeClassManager(new Chart(app, 'a'), 'Manager');
    new RuntimeClassManager(new Chart(app, 'b'), 'Manager', { namespace: 'other' });
    expect(() => app.synth()).toThrow(/RuntimeClassManager: one per cluster, and this app has 2 \(a\/Manager, b\/Manager\)/);
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
      [{ resources: { memoryLimit: 'lots' } }, /^resources.memoryLimit: "lots" is not a Kubernetes quantity/],
      [{ resources: { cpuRequest: '2', cpuLimit: '500m' } }, /^resources.cpuRequest: "2" is above resources.cpuLimit "500m"/],
      [{ resources: { memoryRequest: '1Gi' } }, /^resources.memoryRequest: "1Gi" is above resources.memoryLimit "256Mi"/],
      [{ resources: { cpuLimit: '0' } }, /^resources.cpuLimit: must be above zero/],
      [{ jobTtl: Duration.millis(1500) }, /^jobTtl: must be a whole number >= 0 of seconds, got 1.5/],
      [{ imagePullSecrets: ['Regcred'] }, /^imagePullSecrets: "Regcred" is not a DNS subdomain/],
      [{ imageRegistry: 'registry.example.com/mirror:5000' }, /^imageRegistry: "registry.example.com\/mirror:5000" is not a registry and path/],
      [{ imageTag: 'v1 beta' }, /^imageTag: "v1 beta" is not an image tag/],
      [{ priorityClassName: 'High' }, /^priorityClassName: "High" is not a DNS subdomain/],
      [{ tolerations: [{ key: 'k', effect: TolerationEffect.NO_SCHEDULE, tolerationSeconds: 5 }] }, /^tolerations\[0\].tolerationSeconds: only applies to effect NoExecute/],
      [{ nodeSelector: { 'kubernetes.io/os': 'linux windows' } }, /^labels: the value "linux windows"/],
      [{ apiServerPorts: [] }, /^apiServerPorts: the NetworkPolicy needs at least one port/],
      [{ apiServerPorts: [0] }, /^apiServerPorts\[0\]: must be a port number/],
      [{ syncWaves: { shims: -30 } }, /^syncWaves.shims: must be above syncWaves.controller \(-20\), got -30/],
      [{ syncWaves: { controller: 0.5 } }, /^syncWaves.controller: must be a whole number, got 0.5/],
      [{ labels: { 'a/b/c': 'x' } }, /^labels: key "a\/b\/c": the prefix "a\/b" is not a DNS subdomain/],
    ])('%j', (props, message) => {
      expect(() => synth(props)).toThrow(message);
    });
  });
});

test('the example app synthesizes, its workload under the Spin RuntimeClass at wave 0', () => {
  // The example's own module is what `npx projen example` runs.
  const app = Testing.app();
  new WasmShims(app, 'wasm-shims');
  const objects = app.charts.flatMap((c: Chart) => c.toJson());
  const hello = objects.find((o: any) => o.metadata.name === 'hello-spin');
  expect(hello.spec.template.spec.runtimeClassName).toBe('wasmtime-spin-v2');
  expect(hello.metadata.annotations?.[ArgoCd.SYNC_WAVE_ANNOTATION]).toBeUndefined();
});
