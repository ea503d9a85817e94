import { parseOptions } from '../../src/installer/options';
import { installerJob, installerRequest } from '../../src/runtime/jobs';
import { fromEnv, InstallerRequest, RESERVED_INSTALLER_ENV, toEnv } from '../../src/shared/installer-contract';
import { installerEnvNameProblem } from '../../src/shared/validation';

// The controller-installer contract, checked across both programs: what the controller puts
// in an installer pod's environment is what the installer's own flag parser reads.

const FULL: InstallerRequest = {
  command: 'install',
  handler: 'gvisor',
  restart: 'command',
  restartCommand: 'systemctl restart containerd',
  location: 'https://e.com/gvisor.tgz',
  sha256: 'a'.repeat(64),
  runtimeOptions: { BinaryName: '${PAYLOAD}/bin/runsc', SystemdCgroup: 'true' },
  payloadShim: 'bin/containerd-shim-runc-v2',
  runtimeType: 'io.containerd.runc.v2',
  podAnnotations: ['dev.gvisor.*'],
  containerAnnotations: ['a/*', 'b/*'],
  privilegedWithoutHostDevices: true,
  snapshotter: 'native',
};

const asProcessEnv = (env: { name: string; value: string }[]) => Object.fromEntries(env.map(e => [e.name, e.value]));

test('a request as the pod\'s environment is what the installer parses, field by field', () => {
  // WHEN the installer parses the environment the controller renders
  const options = parseOptions([FULL.command], asProcessEnv(toEnv(FULL)), 'linux/amd64');
  // THEN every field arrives as the installer's option
  expect(options).toMatchObject({
    command: 'install',
    hostRoot: '/host',
    handler: 'gvisor',
    restart: 'command',
    restartCommand: 'systemctl restart containerd',
    location: 'https://e.com/gvisor.tgz',
    sha256: 'a'.repeat(64),
    runtimeOptions: { BinaryName: '${PAYLOAD}/bin/runsc', SystemdCgroup: 'true' },
    payloadShim: 'bin/containerd-shim-runc-v2',
    runtimeType: 'io.containerd.runc.v2',
    handlerSettings: { podAnnotations: ['dev.gvisor.*'], containerAnnotations: ['a/*', 'b/*'], privilegedWithoutHostDevices: true, snapshotter: 'native' },
    jsonLogs: true,
  });
});

test('toEnv and fromEnv are inverses; an image artifact and an uninstall too', () => {
  expect(fromEnv('install', asProcessEnv(toEnv(FULL)))).toEqual(FULL);
  const image: InstallerRequest = { command: 'install', handler: 'spin', restart: 'systemd', artifactFile: '/rcm-artifact/artifact', artifactOrigin: 'ghcr.io/x/spin@sha256:1:/spin.tgz' };
  expect(fromEnv('install', asProcessEnv(toEnv(image)))).toEqual(image);
  const uninstall: InstallerRequest = { command: 'uninstall', handler: 'spin', restart: 'none' };
  expect(fromEnv('uninstall', asProcessEnv(toEnv(uninstall)))).toEqual(uninstall);
});

describe('the installer Job sets only reserved variables, and --installer-env cannot shadow them', () => {
  const settings = {
    namespace: 'rcm',
    image: 'rcm-node-installer:1',
    pullPolicy: 'IfNotPresent',
    ttlSeconds: 600,
    defaultRestartMode: 'command',
    defaultRestartCommand: 'x',
    installerEnv: [{ name: 'HTTPS_PROXY', value: 'http://proxy:3128' }],
  };
  const shim: any = {
    metadata: { name: 'gvisor', uid: 'u1' },
    spec: {
      runtimeClass: { name: 'gvisor', handler: 'gvisor' },
      payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' },
      containerdRuntimeOptions: { BinaryName: '${PAYLOAD}/bin/runsc' },
      containerdRuntime: { podAnnotations: ['dev.gvisor.*'], containerAnnotations: ['a/*'], privilegedWithoutHostDevices: false, snapshotter: 'native' },
    },
  };
  const request: any = { name: 'j', node: 'n1', operation: 'install', handler: 'gvisor', revision: 'r1', attempt: 1, batch: 'b1', artifact: { location: 'https://e.com/g.tgz', sha256: 'b'.repeat(64) } };
  const env: { name: string; value: string }[] = installerJob(settings, shim, request).spec.template.spec.containers[0].env;

  test('every variable the controller derives is reserved (refused as --installer-env)', () => {
    const derived = env.filter(e => e.name !== 'HTTPS_PROXY').map(e => e.name);
    expect(derived.length).toBeGreaterThan(10);
    for (const name of derived) {
      expect({ name, reserved: RESERVED_INSTALLER_ENV.includes(name) }).toEqual({ name, reserved: true });
      expect(installerEnvNameProblem(name)).toMatch(/cannot be overridden/);
    }
    expect(installerEnvNameProblem('HTTPS_PROXY')).toBeUndefined();
  });

  test('the cluster-wide extras come first, so the request\'s own values win', () => {
    expect(env[0]).toEqual({ name: 'HTTPS_PROXY', value: 'http://proxy:3128' });
    expect(fromEnv('install', asProcessEnv(env.slice(1)))).toEqual(installerRequest(settings, shim, request));
  });
});
