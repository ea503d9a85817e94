import { Duration, Testing } from 'cdk8s';
import { InstallMode, RuntimeClassManager, RuntimeClassManagerProps, TolerationOperator } from '../../src';

function synth(props: RuntimeClassManagerProps = {}) {
  const chart = Testing.chart();
  const manager = new RuntimeClassManager(chart, 'Manager', { imageTag: '1.2.3', ...props });
  const objects = Testing.synth(chart);
  const find = (kind: string, name: string) => objects.find(o => o.kind === kind && o.metadata.name === name);
  return { manager, objects, find, args: find('Deployment', 'rcm-controller').spec.template.spec.containers[0].args as string[] };
}

describe('installMode', () => {
  test('Jobs by default: no agent, no --install-mode (the output of earlier versions)', () => {
    // GIVEN / WHEN a manager without installMode, and one with InstallMode.jobs()
    const defaults = synth();
    const jobs = synth({ installMode: InstallMode.jobs() });
    // THEN neither has an agent, and both are the same objects
    expect(defaults.objects.some(o => o.kind === 'DaemonSet')).toBe(false);
    expect(defaults.args.some(a => a.startsWith('--install-mode'))).toBe(false);
    expect(jobs.objects).toEqual(defaults.objects);
    expect(defaults.manager.nodeAgent).toBeUndefined();
  });

  test('NodeAgent: a DaemonSet of the installer image in the installers\' namespace, its RBAC, and the controller told so', () => {
    // GIVEN / WHEN
    const { objects, find, args, manager } = synth({ installerNamespace: 'rcm-installers', installMode: InstallMode.nodeAgent() });
    // THEN the agent's objects, in a snapshot
    const agentObjects = objects.filter(o => o.metadata.name === 'rcm-node-agent');
    expect(agentObjects.map(o => `${o.kind}/${o.metadata.namespace ?? ''}`)).toEqual([
      'ServiceAccount/rcm-installers', 'ClusterRole/', 'ClusterRoleBinding/', 'Role/rcm-installers', 'RoleBinding/rcm-installers', 'DaemonSet/rcm-installers',
    ]);
    expect(agentObjects).toMatchSnapshot();
    expect(args).toContain('--install-mode=agent');
    // AND the pod is what an installer Job's pod is, kept running: privileged, host PID and network, the host's / at /host
    const pod = find('DaemonSet', 'rcm-node-agent').spec.template.spec;
    expect(pod).toMatchObject({
      hostPID: true,
      hostNetwork: true,
      priorityClassName: 'system-node-critical',
      serviceAccountName: 'rcm-node-agent',
      nodeSelector: { 'kubernetes.io/os': 'linux' },
      volumes: [{ name: 'host', hostPath: { path: '/', type: 'Directory' } }],
    });
    expect(pod.containers[0]).toMatchObject({
      image: 'ghcr.io/runtime-class-manager-cdk8s/rcm-node-installer:1.2.3',
      command: ['/usr/local/bin/node', '/usr/local/lib/rcm/rcm-node-agent.js'],
      args: ['--drift-check-seconds=60', '--log-format=json'],
      securityContext: { privileged: true },
      env: [
        { name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
      ],
      resources: { requests: { cpu: '10m', memory: '96Mi' }, limits: { cpu: '500m', memory: '512Mi' } },
    });
    // AND the agent may read and patch nodes, and read the nodes' requests ConfigMaps in its namespace, nothing else
    // (resourceNames: [] is cdk8s-plus's ClusterRole: no names, every node)
    expect(find('ClusterRole', 'rcm-node-agent').rules).toEqual([{ apiGroups: [''], resources: ['nodes'], resourceNames: [], verbs: ['get', 'list', 'watch', 'patch'] }]);
    expect(find('Role', 'rcm-node-agent').rules).toEqual([{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'watch'] }]);
    // AND the controller may list and write those ConfigMaps there (it never watches them), in Job mode not
    expect(find('Role', 'rcm-controller-installers').rules).toContainEqual(expect.objectContaining({ resources: ['configmaps'], verbs: ['get', 'list', 'create', 'patch'] }));
    expect(JSON.stringify(synth({ installerNamespace: 'rcm-installers' }).objects)).not.toMatch(/configmaps/);
    expect(manager.nodeAgent).toBeDefined();
  });

  test('NodeAgent options: drift check period, tolerations, resources; installerEnv reaches the agent (it runs the installer)', () => {
    const { find } = synth({
      installerEnv: { HTTPS_PROXY: 'http://proxy:3128' },
      installMode: InstallMode.nodeAgent({
        driftCheck: Duration.seconds(20), tolerations: [{ operator: TolerationOperator.EXISTS }], cpuLimit: '1', memoryLimit: '1Gi',
      }),
    });
    const pod = find('DaemonSet', 'rcm-node-agent').spec.template.spec;
    expect(pod.containers[0].args).toContain('--drift-check-seconds=20');
    expect(pod.tolerations).toEqual([{ operator: 'Exists' }]);
    expect(pod.containers[0].resources.limits).toEqual({ cpu: '1', memory: '1Gi' });
    expect(pod.containers[0].env).toContainEqual({ name: 'HTTPS_PROXY', value: 'http://proxy:3128' });
  });

  test.each<[string, Parameters<typeof InstallMode.nodeAgent>[0], RegExp]>([
    ['a request above its limit', { memoryRequest: '1Gi', memoryLimit: '512Mi' }, /installMode\.nodeAgent\.memoryRequest: "1Gi" is above installMode\.nodeAgent\.memoryLimit "512Mi"/],
    ['a quantity that is none', { cpuLimit: 'lots' }, /installMode\.nodeAgent\.cpuLimit: "lots" is not a Kubernetes quantity/],
    ['a drift check of a fraction of a second', { driftCheck: Duration.millis(1500) }, /installMode\.nodeAgent\.driftCheck: must be a whole number of seconds, got 1\.5/],
    ['a toleration with a value and operator Exists', { tolerations: [{ key: 'k', operator: TolerationOperator.EXISTS, value: 'v' }] }, /installMode\.nodeAgent\.tolerations/],
  ])('bad props fail naming the field: %s', (_what, options, message) => {
    expect(() => synth({ installMode: InstallMode.nodeAgent(options) })).toThrow(message);
  });
  test('NodeAgent: a Shim whose artifact is in an image fails at addShim, naming the field (the agent pulls no images); Jobs takes it', () => {
    // GIVEN a manager in each install mode, and a Shim whose artifact is in an image
    const image = { reference: 'registry.example.com/spin@sha256:' + 'a'.repeat(64), path: '/containerd-shim-spin-v2' };
    const agent = synth({ installMode: InstallMode.nodeAgent() }).manager;
    const jobs = synth({ installMode: InstallMode.jobs() }).manager;
    // WHEN / THEN the agent's manager refuses it with what to do instead; the Jobs manager adds it
    expect(() => agent.addShim('spin', { handler: 'spin', image })).toThrow(
      /^addShim\("spin"\): image: install mode NodeAgent fetches artifacts over HTTP\(S\) only; give location or platforms, or use installMode: InstallMode.jobs\(\)$/);
    expect(jobs.addShim('spin', { handler: 'spin', image }).handler).toBe('spin');
    // AND an HTTP(S) artifact is fine in NodeAgent mode
    expect(agent.addShim('wasm', { handler: 'wasm', location: 'https://example.com/shim.tgz', sha256: 'b'.repeat(64) }).handler).toBe('wasm');
  });
});
