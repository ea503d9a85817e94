import { Duration, Testing } from 'cdk8s';
import { ContainerdRestart, InstallMode, LogFormat, PullPolicy, RuntimeClassManager, RuntimeClassManagerProps } from '../../src';
import { Flags, parseArgs } from '../../src/runtime/flags';

// The construct renders the controller's flags from its props; the controller parses them with
// src/runtime/flags.ts. Each side is one module, and this test holds them to each other: what
// the Deployment says is what the controller reads, value by value.

function controllerFlags(props: RuntimeClassManagerProps = {}, pullSecrets: string[] = []): Flags {
  const chart = Testing.chart();
  const manager = new RuntimeClassManager(chart, 'Manager', props);
  for (const name of pullSecrets) manager.addImagePullSecret(name);
  const deployment = Testing.synth(chart).find(o => o.kind === 'Deployment' && o.metadata.name === 'rcm-controller');
  const container = deployment.spec.template.spec.containers[0];
  // The controller's own environment in its pod (the Downward API's POD_NAMESPACE, POD_NAME) is not
  // what the flags carry; the RCM_* variables would be, and the construct sets none.
  expect((container.env ?? []).filter((e: any) => e.name.startsWith('RCM_'))).toEqual([]);
  const parsed = parseArgs(container.args, {});
  if (parsed === 'help') throw new Error('the Deployment asks for --help');
  return parsed;
}

test('the default Deployment\'s arguments are all flags the controller knows, and mean the construct\'s defaults', () => {
  // WHEN the controller parses the synthesized arguments (an unknown flag or a bad value throws)
  const { values, installerEnv, imagePullSecrets } = controllerFlags();
  // THEN the values are the construct's documented defaults
  expect(values).toMatchObject({
    'namespace': 'runtime-class-manager',
    'installer-image-pull-policy': 'IfNotPresent',
    'leader-elect': 'true',
    'log-format': 'json',
    'default-restart-mode': 'systemd',
    'install-mode': 'jobs',
    'workers': '4',
  });
  expect(values['installer-namespace']).toBeUndefined();
  expect(installerEnv).toEqual([]);
  expect(imagePullSecrets).toEqual([]);
});

test('every prop the construct turns into a controller flag arrives as the controller reads it', () => {
  // GIVEN a manager with a non-default value for each prop that becomes a flag
  const { values, installerEnv, imagePullSecrets } = controllerFlags({
    namespace: 'rcm',
    installerNamespace: 'rcm-installers',
    imageRegistry: 'registry.example.com/rcm',
    imageTag: '1.2.3',
    imagePullPolicy: PullPolicy.ALWAYS,
    replicas: 1,
    leaderElection: false,
    metricsPort: 9090,
    probePort: 9091,
    logFormat: LogFormat.TEXT,
    defaultRestart: ContainerdRestart.command('systemctl restart containerd-custom'),
    jobTtl: Duration.minutes(20),
    retryBackoff: Duration.seconds(10),
    maxRetryBackoff: Duration.minutes(5),
    failureThreshold: 5,
    kubeApiQps: 80,
    kubeApiBurst: 160,
    leaseDuration: Duration.seconds(30),
    workers: 8,
    resyncPeriod: Duration.minutes(2),
    installerEnv: { HTTPS_PROXY: 'http://proxy.example.com:3128', RCM_CONFIG: '/etc/containerd/custom.toml' },
    installMode: InstallMode.nodeAgent(),
  }, ['installer-cred', 'mirror-cred']);

  // THEN the controller reads each value as given
  expect(values).toMatchObject({
    'namespace': 'rcm',
    'installer-namespace': 'rcm-installers',
    'installer-image': 'registry.example.com/rcm/rcm-node-installer:1.2.3',
    'installer-image-pull-policy': 'Always',
    'leader-elect': 'false',
    'metrics-bind-address': ':9090',
    'health-probe-bind-address': ':9091',
    'log-format': 'text',
    'default-restart-mode': 'command',
    'default-restart-command': 'systemctl restart containerd-custom',
    'job-ttl-seconds': '1200',
    'retry-base-seconds': '10',
    'retry-max-seconds': '300',
    'failure-threshold': '5',
    'kube-api-qps': '80',
    'kube-api-burst': '160',
    'lease-duration-seconds': '30',
    'workers': '8',
    'resync-seconds': '120',
    'install-mode': 'agent',
  });
  expect(installerEnv).toEqual(expect.arrayContaining([
    { name: 'HTTPS_PROXY', value: 'http://proxy.example.com:3128' },
    { name: 'RCM_CONFIG', value: '/etc/containerd/custom.toml' },
  ]));
  expect(installerEnv).toHaveLength(2);
  expect(imagePullSecrets).toEqual(expect.arrayContaining(['installer-cred', 'mirror-cred']));
});
