import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { detectDistro, layoutFor } from '../../src/installer/host';
import { InstallerOptions, parseOptions } from '../../src/installer/options';
import { parseState } from '../../src/installer/state';

// A CRI-O node as the installer tells it from the host's files (a temp folder laid out like
// one), and the record it keeps of a CRI-O install.

const SHIM = '/opt/rcm/shims/spin/0123456789abcdef/containerd-shim-spin-v2';

test('a CRI-O record is a valid state; one without its handler is reported', () => {
  const record = {
    runtime: 'crio',
    handler: 'spin',
    shimName: 'spin',
    sha256: 'a'.repeat(64),
    location: 'http://x',
    binary: SHIM,
    distro: 'crio',
    configFile: '/etc/crio/crio.conf.d/99-rcm-spin.conf',
    configCreated: true,
    installedAt: 'now',
    runtimeOptions: {},
    crio: { kind: 'vm', runtimePath: SHIM },
  };
  const parsed = parseState(JSON.stringify(record), 'spin', 'f');
  expect(parsed.problem).toBeUndefined();
  expect(parsed.state).toMatchObject({ runtime: 'crio', crio: { kind: 'vm', runtimePath: SHIM } });
  expect(parseState(JSON.stringify({ ...record, crio: undefined }), 'spin', 'f').problem).toMatch(/CRI-O record without its handler/);
  // A containerd record still needs its config version.
  expect(parseState(JSON.stringify({ ...record, runtime: undefined }), 'spin', 'f').problem).toMatch(/no valid configVersion/);
});

describe('detection of a CRI-O node from the host\'s files', () => {
  const roots: string[] = [];
  afterAll(() => roots.forEach(root => fs.rmSync(root, { recursive: true, force: true })));

  function hostWith(files: string[]): string {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-crio-host-'));
    roots.push(root);
    fs.mkdirSync(path.join(root, 'run'), { recursive: true });
    fs.mkdirSync(path.join(root, 'var'), { recursive: true });
    fs.symlinkSync('/run', path.join(root, 'var/run')); // as on real hosts
    for (const f of files) {
      fs.mkdirSync(path.dirname(path.join(root, f)), { recursive: true });
      fs.writeFileSync(path.join(root, f), '', { mode: 0o755 });
    }
    return root;
  }
  function options(root: string, extra: string[] = []): InstallerOptions {
    const o = parseOptions(['install', '--handler=spin', '--location=https://e.com/s.tgz', `--host-root=${root}`, ...extra], {}, 'linux/amd64');
    if (o === 'help') throw new Error('help');
    return o;
  }
  const CRIO = ['run/crio/crio.sock', 'usr/bin/crio', 'usr/lib/systemd/system/crio.service'];

  test.each([
    ['socket, binary and unit: CRI-O', CRIO, 'crio'],
    ['the unit in /etc/systemd/system', ['run/crio/crio.sock', 'usr/bin/crio', 'etc/systemd/system/crio.service'], 'crio'],
    ['no unit: not detected', ['run/crio/crio.sock', 'usr/bin/crio'], 'containerd'],
    ['no crio binary: not detected', ['run/crio/crio.sock', 'usr/lib/systemd/system/crio.service'], 'containerd'],
    ['no socket (CRI-O down: a failed crio.service) and no containerd on the host: CRI-O', ['usr/bin/crio', 'usr/lib/systemd/system/crio.service'], 'crio'],
    ['no socket and containerd on the host\'s PATH: containerd', ['usr/bin/crio', 'usr/lib/systemd/system/crio.service', 'usr/bin/containerd'], 'containerd'],
    ['containerd\'s socket too: containerd, as before', [...CRIO, 'run/containerd/containerd.sock'], 'containerd'],
    ['a k3s node with crio lying around: k3s', [...CRIO, 'var/lib/rancher/k3s/agent/etc/containerd/.keep'], 'k3s'],
  ])('%s', (_what, files, distro) => {
    expect(detectDistro(options(hostWith(files)))).toBe(distro);
  });

  test('the layout: our drop-in, CRI-O\'s socket and unit; --distro=crio and --config win', () => {
    const o = options(hostWith(CRIO));
    expect(layoutFor(o, 'crio', undefined)).toEqual({
      distro: 'crio',
      config: '/etc/crio/crio.conf.d/99-rcm-spin.conf',
      effectiveConfig: '/etc/crio/crio.conf.d/99-rcm-spin.conf',
      template: false,
      socket: '/var/run/crio/crio.sock',
      unit: 'crio',
      ownFile: true,
    });
    const forced = options(hostWith([]), ['--distro=crio', '--config=/etc/crio/crio.conf.d/90-mine.conf']);
    expect(detectDistro(forced)).toBe('crio');
    expect(layoutFor(forced, 'crio', undefined).config).toBe('/etc/crio/crio.conf.d/90-mine.conf');
  });
});
