import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ContainerdDaemon, startContainerd } from '../support/containerd-daemon';
import { buildProductImages, CONTROLLER_IMAGE, INSTALLER_IMAGE } from '../support/product-images';

// The product images, built without Docker, run their entrypoints under a real containerd.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-images-'));
let daemon: ContainerdDaemon;

beforeAll(async () => {
  daemon = await startContainerd();
  const images = await buildProductImages(work);
  daemon.ctr(['-n', 'rcm', 'images', 'import', images.controller]);
  daemon.ctr(['-n', 'rcm', 'images', 'import', images.installer]);
}, 120_000);

afterAll(async () => {
  await daemon?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

test('the installer image runs rcm-node-installer on Node.js 24', () => {
  const help = daemon.ctr(['-n', 'rcm', 'run', '--rm', INSTALLER_IMAGE, 'installer-help']);
  expect(help).toContain('Usage: rcm-node-installer install|uninstall|status');
});

test('the installer image starts from the compile cache it was built with', () => {
  const run = spawnSync('ctr', ['--address', daemon.socket, '-n', 'rcm', 'run', '--rm', '--env', 'NODE_DEBUG_NATIVE=COMPILE_CACHE', INSTALLER_IMAGE, 'installer-cache'],
    { encoding: 'utf8' });
  expect(run.stdout).toContain('Usage: rcm-node-installer');
  expect(run.stderr).toContain('V8 code cache for CommonJS /usr/local/lib/rcm/rcm-node-installer.js was accepted');
});

test('the installer image takes the host lock with its own flock (an uninstall of nothing)', () => {
  // ctr's arguments replace the entrypoint too.
  const out = daemon.ctr(['-n', 'rcm', 'run', '--rm', INSTALLER_IMAGE, 'installer-lock',
    '/usr/local/bin/node', '/usr/local/lib/rcm/rcm-node-installer.js', 'uninstall', '--handler=nothing', '--host-root=/',
    '--distro=containerd', '--restart=none', '--result-file=/dev/stdout']);
  expect(JSON.parse(out.trim().split('\n').pop()!)).toMatchObject({ outcome: 'not-installed', exitCode: 0 });
});

test('the controller image runs rcm-controller as its non-root user', () => {
  const help = daemon.ctr(['-n', 'rcm', 'run', '--rm', CONTROLLER_IMAGE, 'controller-help']);
  expect(help).toContain('Usage: rcm-controller [flags]');
});
