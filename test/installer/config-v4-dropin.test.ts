import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { parse } from 'smol-toml';
import { addRuntime, checkDropInVersion, checkVersionSupported, detectConfigVersion, importedDropInFolder, removeRuntime } from '../../src/installer/containerd-config';
import { containerdBaseConfig, FakeHost, startFakeHost } from '../support/fake-host';
import { ArtifactServer, buildInstaller, publishShim, publishShimVersions, runBundle, startArtifactServer } from '../support/installer-bundle';
import { CONTAINERD_BINARIES, stackBinary } from '../support/tools';

// containerd 2.3's config (version 4, imports of /etc/containerd/conf.d/*.toml) and drop-in
// folders. No 2.3 binary exists here: version-4 files are checked structurally, and by
// containerd 2.1's `config dump` of the same text with `version = 3` (same runtime plugin
// path). Drop-ins are judged by a real containerd 2.1 daemon on a fake host.

const C21 = CONTAINERD_BINARIES.find(c => c.version === '2.1')!;
const V4 = fs.readFileSync(path.join(__dirname, '..', 'fixtures', 'containerd-2.3', 'default-v4.toml'), 'utf8');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-v4-'));
const ENTRY = { handler: 'rcmtest', runtimeType: '/opt/rcm/shims/rcmtest/0123456789abcdef/containerd-shim-rcmtest-v2', options: { SystemdCgroup: 'true' } };
const RUNTIMES = ['plugins', 'io.containerd.cri.v1.runtime', 'containerd', 'runtimes'];
const runtimesOf = (config: any) => RUNTIMES.reduce((n, k) => n?.[k], config);

afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

/** containerd 2.1's effective config of `main` (with `files` beside it, for imports). */
function dump21(main: string, files: Record<string, string> = {}): any {
  const dir = fs.mkdtempSync(path.join(work, 'dump-'));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  fs.writeFileSync(path.join(dir, 'config.toml'), main.replace(/CONF_D/g, dir));
  const out = execFileSync(C21.binary, ['--config', path.join(dir, 'config.toml'), 'config', 'dump'], { encoding: 'utf8' });
  return parse(out.split(dir).join('DIR'));
}
const asV3 = (text: string) => text.replace(/^version = 4$/m, 'version = 3');

describe('a version-4 config (containerd 2.3)', () => {
  test('is accepted, with version 3\'s runtime plugin path; the edit adds exactly the handler and is undone byte for byte', () => {
    expect(detectConfigVersion(V4, 2)).toBe(4);
    const { text: installed, ...edit } = addRuntime(V4, 4, ENTRY);
    // structurally: the handler sits where version 3 puts it, the rest is the original text
    expect(installed.startsWith(V4)).toBe(true);
    expect(runtimesOf(parse(installed)).rcmtest).toEqual({ runtime_type: ENTRY.runtimeType, options: { SystemdCgroup: true } });
    // and containerd 2.1 reads the same text as version 3 with only the handler added
    const before = dump21(asV3(V4));
    const after = dump21(asV3(installed));
    expect(runtimesOf(after).rcmtest).toMatchObject({ runtime_type: ENTRY.runtimeType, options: { SystemdCgroup: true } });
    delete runtimesOf(after).rcmtest;
    expect(after).toEqual(before);
    expect(removeRuntime(installed, 4, 'rcmtest', edit).text).toBe(V4);
  });

  test('is refused on containerd older than 2.3, and on 1.x', () => {
    expect(() => checkVersionSupported(4, 2, 1)).toThrow(/version-4 config file needs containerd 2.3 or newer, the host runs 2.1/);
    expect(() => checkVersionSupported(4, 1, 7)).toThrow(/version-4 config file cannot be read by containerd 1.x/);
    expect(() => checkVersionSupported(4, 2, 3)).not.toThrow();
  });

  test('names the drop-in folder it imports; a drop-in for it holds version 4 and only the handler', () => {
    expect(importedDropInFolder(V4)).toBe('/etc/containerd/conf.d');
    expect(importedDropInFolder('version = 3\nimports = ["conf.d/*.toml", "/x/y.toml"]\n')).toBe('conf.d');
    expect(importedDropInFolder('version = 3\nimports = ["/etc/containerd/extra.toml"]\n')).toBeUndefined();
    expect(importedDropInFolder('version = 2\n')).toBeUndefined();
    const { text: dropIn } = addRuntime('', 4, ENTRY);
    expect(dropIn.startsWith('version = 4\n')).toBe(true);
    // the main file with its imports, and the drop-in beside it: containerd 2.1 merges them
    const main = asV3(V4).replace("imports = ['/etc/containerd/conf.d/*.toml']", "imports = ['CONF_D/*.toml']");
    const merged = dump21(main, { 'rcm-rcmtest.toml': asV3(dropIn) });
    expect(runtimesOf(merged).rcmtest.runtime_type).toBe(ENTRY.runtimeType);
    expect(runtimesOf(merged).runc).toEqual(runtimesOf(dump21(main)).runc);
  });
});

test('a drop-in is edited only in the version of the root importing it', () => {
  expect(() => checkDropInVersion('', 2, 'conf.d/rcm-rcmtest.toml')).not.toThrow();
  expect(() => checkDropInVersion('version = 4\n', 4, 'conf.d/rcm-rcmtest.toml')).not.toThrow();
  expect(() => checkDropInVersion('version = 4\n', 2, 'conf.d/rcm-rcmtest.toml'))
    .toThrow(/conf.d\/rcm-rcmtest.toml declares config version 4 but the root config importing it declares 2: containerd refuses a drop-in newer than its root/);
  expect(() => checkDropInVersion('version = 3\n', 4, 'x.toml')).toThrow(/declares config version 3 but the root config importing it declares 4/);
});

describe('a containerd 2.1 host whose config imports a drop-in folder', () => {
  const MAIN = '/etc/containerd/config.toml';
  const SOCKET = '/run/containerd/containerd.sock';
  let bundle: string;
  let server: ArtifactServer;
  let url: string;
  const hosts: FakeHost[] = [];
  /** The main config: 2.1's defaults on this host's paths, importing conf.d as 2.2+ do. */
  const mainConfig = () => containerdBaseConfig(C21.binary, { root: '/var/lib/containerd', state: '/run/containerd', socket: SOCKET })
    .replace(/^imports = \[\]$/m, "imports = ['/etc/containerd/conf.d/*.toml']");
  const RESTART = 'old=$(cat /run/containerd.pid); kill $old; while kill -0 $old 2>/dev/null; do sleep 0.05; done';

  beforeAll(async () => {
    bundle = buildInstaller(work);
    server = await startArtifactServer();
    url = (await publishShim(server, work)).url;
  });
  afterAll(async () => {
    for (const host of hosts) await host.stop();
    await server?.close();
  });

  async function bootHost(extra: Record<string, string> = {}): Promise<FakeHost> {
    const h = await startFakeHost({
      'usr/bin/containerd': { copy: C21.binary },
      'usr/bin/ctr': { copy: path.join(path.dirname(C21.binary), 'ctr') },
      [MAIN.slice(1)]: mainConfig(),
      'var/log/.keep': '',
      ...extra,
    }, `while true; do containerd --config ${MAIN} >> /var/log/containerd.log 2>&1 & echo $! > /run/containerd.pid; wait $!; sleep 0.2; done`);
    hosts.push(h);
    for (let i = 0; i < 100; i++) {
      try {
        h.run(['ctr', '--address', SOCKET, 'version']);
        break;
      } catch {
        await new Promise(r => setTimeout(r, 200));
      }
    }
    return h;
  }
  const args = (h: FakeHost) => [`--host-root=${h.root}`, `--host-pid=${h.pid}`, '--handler=rcmtest', '--restart=command', `--restart-command=${RESTART}`,
    '--retries=0', '--health-timeout=30'];
  const effective = (h: FakeHost) => parse(h.run(['containerd', '--config', MAIN, 'config', 'dump']));

  test('the handler goes into a drop-in of its own; the main file is never touched; uninstall leaves nothing', async () => {
    // GIVEN a host whose main config imports /etc/containerd/conf.d/*.toml (the folder does not exist yet)
    const h = await bootHost();
    const main = fs.readFileSync(path.join(h.root, MAIN), 'utf8');
    const before = effective(h);
    // WHEN installing
    const install = await runBundle(bundle, 'install', [...args(h), `--location=${url}`]);
    // THEN the drop-in holds the handler, the main file is byte for byte the same, and the restarted daemon serves it
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    expect(install.result).toMatchObject({ configVersion: 3, paths: { config: '/etc/containerd/conf.d/rcm-rcmtest.toml' } });
    expect(fs.readFileSync(path.join(h.root, MAIN), 'utf8')).toBe(main);
    expect(fs.readFileSync(path.join(h.root, 'etc/containerd/conf.d/rcm-rcmtest.toml'), 'utf8')).toMatch(/^version = 3\n/);
    const after: any = effective(h);
    expect(runtimesOf(after).rcmtest.runtime_type).toBe(install.result.paths.binary);
    expect(runtimesOf(after).runc).toEqual(runtimesOf(before).runc);
    // WHEN uninstalling THEN the drop-in and the folder it needed are gone, and containerd reads what it read before
    const uninstall = await runBundle(bundle, 'uninstall', args(h));
    expect(uninstall.code).toBe(0);
    expect(fs.existsSync(path.join(h.root, 'etc/containerd/conf.d'))).toBe(false);
    expect(fs.readFileSync(path.join(h.root, MAIN), 'utf8')).toBe(main);
    expect(effective(h)).toEqual(before);
  }, 90_000);

  test('a new revision replaces the handler in our own drop-in; a drop-in of another tool that wins over ours is refused, nothing changed', async () => {
    // GIVEN the handler installed in our drop-in (a first revision)
    const h = await bootHost();
    const versions = await publishShimVersions(server, work);
    const first = await runBundle(bundle, 'install', [...args(h), `--location=${versions.v1}`]);
    expect(first.code).toBe(0);
    // WHEN the next revision is installed THEN it replaces ours (containerd serves the handler from our drop-in today: no conflict)
    const second = await runBundle(bundle, 'install', [...args(h), `--location=${versions.v2}`]);
    expect(second.stderr).not.toMatch(/ERROR/);
    expect(second.code).toBe(0);
    expect(second.result.paths.binary).not.toBe(first.result.paths.binary);
    expect(runtimesOf(effective(h)).rcmtest.runtime_type).toBe(second.result.paths.binary);
    // WHEN another tool's drop-in, read after ours, gives the handler another shim
    const dropIns = path.join(h.root, 'etc/containerd/conf.d');
    fs.writeFileSync(path.join(dropIns, 'zz-other.toml'), 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.rcmtest]\n  runtime_type = "/opt/other/containerd-shim-other-v2"\n');
    const ours = fs.readFileSync(path.join(dropIns, 'rcm-rcmtest.toml'), 'utf8');
    const third = await runBundle(bundle, 'install', [...args(h), `--location=${versions.v1}`]);
    // THEN it is refused before anything changes, naming the winning definition
    expect(third.code).toBe(4);
    expect(third.stderr).toContain('/opt/other/containerd-shim-other-v2');
    expect(fs.readFileSync(path.join(dropIns, 'rcm-rcmtest.toml'), 'utf8')).toBe(ours);
    fs.rmSync(path.join(dropIns, 'zz-other.toml'));
    expect((await runBundle(bundle, 'uninstall', args(h))).code).toBe(0);
  }, 120_000);

  test('without the state file, uninstall still removes our drop-in and leaves the admin\'s', async () => {
    const h = await bootHost({ 'etc/containerd/conf.d/00-admin.toml': 'version = 3\n[plugins."io.containerd.cri.v1.images"]\n  snapshotter = "native"\n' });
    expect((await runBundle(bundle, 'install', [...args(h), `--location=${url}`])).code).toBe(0);
    fs.rmSync(path.join(h.root, 'opt/rcm/state/rcmtest.json'));
    const uninstall = await runBundle(bundle, 'uninstall', args(h));
    expect(uninstall.code).toBe(0);
    expect(uninstall.result.outcome).toBe('uninstalled');
    expect(fs.readdirSync(path.join(h.root, 'etc/containerd/conf.d'))).toEqual(['00-admin.toml']);
    expect(runtimesOf(effective(h)).rcmtest).toBeUndefined();
  }, 90_000);
});

describe('a containerd 2.4 host whose root config says version = 2 and imports conf.d', () => {
  // A root as managed clouds ship it (AKS: version 2, runc with the systemd cgroup driver)
  // under containerd 2.4.2, whose own default is version 4: the handler goes into the root.
  const MAIN = '/etc/containerd/config.toml';
  const SOCKET = '/run/containerd/containerd.sock';
  const ROOT_V2 = `version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
`;
  const RESTART = 'old=$(cat /run/containerd.pid); kill $old; while kill -0 $old 2>/dev/null; do sleep 0.05; done';
  /** What containerd logs when it refuses a config for its version (its own words, 2.2 to upstream's main). */
  const VERSION_ERROR = /drop-in config version|expected containerd config version|unsupported (containerd )?config(uration)? version/i;
  let bundle: string;
  let server: ArtifactServer;
  let url: string;
  const hosts: FakeHost[] = [];

  beforeAll(async () => {
    bundle = buildInstaller(work);
    server = await startArtifactServer();
    url = (await publishShim(server, work)).url;
  });
  afterAll(async () => {
    for (const host of hosts) await host.stop();
    await server?.close();
  });

  async function bootHost(files: Record<string, string>): Promise<FakeHost> {
    const h = await startFakeHost({
      'usr/bin/containerd': { copy: stackBinary('containerd') },
      'usr/bin/ctr': { copy: stackBinary('ctr') },
      'usr/bin/crictl': { copy: stackBinary('crictl') },
      'var/log/.keep': '',
      ...files,
    }, `while true; do containerd --config ${MAIN} >> /var/log/containerd.log 2>&1 & echo $! > /run/containerd.pid; wait $!; sleep 0.2; done`);
    hosts.push(h);
    await servingOn(h);
    return h;
  }
  const pid = (h: FakeHost) => fs.readFileSync(path.join(h.root, 'run/containerd.pid'), 'utf8').trim();
  /** containerd answers on its socket, and its CRI plugin (`crictl info`) reports these runtimes. */
  async function servingOn(h: FakeHost): Promise<any> {
    for (let i = 0; ; i++) {
      try {
        return JSON.parse(h.run(['crictl', '--runtime-endpoint', `unix://${SOCKET}`, 'info'])).config.containerd.runtimes;
      } catch (e) {
        if (i >= 100) throw e;
        await new Promise(r => setTimeout(r, 200));
      }
    }
  }
  const args = (h: FakeHost) => [`--host-root=${h.root}`, `--host-pid=${h.pid}`, '--handler=rcmtest', '--restart=command', `--restart-command=${RESTART}`,
    '--retries=0', '--health-timeout=30'];
  const effective = (h: FakeHost) => parse(h.run(['containerd', '--config', MAIN, 'config', 'dump']));
  const log = (h: FakeHost) => fs.readFileSync(path.join(h.root, 'var/log/containerd.log'), 'utf8');

  test('install edits the version-2 root in place (no drop-in newer than it); containerd starts, serves the handler, keeps runc; uninstall leaves nothing', async () => {
    // GIVEN the version-2 root importing conf.d (the folder does not exist yet)
    const h = await bootHost({ [MAIN.slice(1)]: ROOT_V2 });
    const before = effective(h);
    const pidBefore = pid(h);
    // WHEN installing
    const install = await runBundle(bundle, 'install', [...args(h), `--location=${url}`]);
    // THEN the handler is in the root, in the root's version; no drop-in was written
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    expect(install.result).toMatchObject({ configVersion: 2, paths: { config: MAIN } });
    expect(fs.existsSync(path.join(h.root, 'etc/containerd/conf.d'))).toBe(false);
    const main = fs.readFileSync(path.join(h.root, MAIN), 'utf8');
    expect(main.startsWith(ROOT_V2)).toBe(true);
    expect(main).toContain('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.rcmtest]');
    // AND the restarted containerd serves the handler beside runc, its log without a version error
    expect(pid(h)).not.toBe(pidBefore);
    const runtimes = await servingOn(h);
    expect(runtimes.rcmtest).toMatchObject({ runtimeType: install.result.paths.binary });
    expect(runtimes.runc).toMatchObject({ runtimeType: 'io.containerd.runc.v2' });
    expect(log(h)).not.toMatch(VERSION_ERROR);
    const after: any = effective(h);
    expect(runtimesOf(after).rcmtest.runtime_type).toBe(install.result.paths.binary);
    delete runtimesOf(after).rcmtest;
    expect(after).toEqual(before);
    // WHEN uninstalling THEN the root is byte for byte what it was, and so is containerd's reading of it
    const uninstall = await runBundle(bundle, 'uninstall', args(h));
    expect(uninstall.code).toBe(0);
    expect(fs.readFileSync(path.join(h.root, MAIN), 'utf8')).toBe(ROOT_V2);
    expect(effective(h)).toEqual(before);
    expect((await servingOn(h)).rcmtest).toBeUndefined();
  }, 120_000);

  test('negative control: what containerd 2.4.2 itself does with a version-4 drop-in under the version-2 root', async () => {
    // GIVEN the drop-in nvidia-ctk 1.19.1 wrote on AKS (NVIDIA/aicr#1688): version 4, from `config dump`
    const h = await bootHost({
      [MAIN.slice(1)]: ROOT_V2,
      'etc/containerd/conf.d/99-nvidia.toml': 'version = 4\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n',
    });
    // THEN 2.4.2 starts: upstream's refusal ("drop-in config version 4 higher than root config
    // version 2", containerd#12891) came after 2.4.2, and AKS's 2.3.2 carries it. With that check
    // applied to 2.4.2's source (built by hand), the same files stop containerd, and a version-2
    // drop-in does not: what this installer writes is never newer than the root.
    const runtimes = await servingOn(h);
    expect(runtimes.nvidia).toBeDefined();
    expect(runtimes.runc).toBeDefined();
    expect(log(h)).not.toMatch(VERSION_ERROR);
  }, 60_000);

  test('our own drop-in declaring a version other than its root\'s is refused with the reason, nothing changed', async () => {
    // GIVEN a version-3 root importing conf.d, and our drop-in left as version 4 (written when the root was 2.3's default)
    const root = ROOT_V2.replace('version = 2', 'version = 3').replace(/^\[plugins[\s\S]*$/m, '');
    const dropIn = 'version = 4\n';
    const h = await bootHost({ [MAIN.slice(1)]: root, 'etc/containerd/conf.d/rcm-rcmtest.toml': dropIn });
    // WHEN installing
    const install = await runBundle(bundle, 'install', [...args(h), `--location=${url}`]);
    // THEN it is refused, saying why, and neither file nor the shim folder changed
    expect(install.code).toBe(4);
    expect(install.result.message).toMatch(/rcm-rcmtest\.toml declares config version 4 but the root config importing it declares 3/);
    expect(fs.readFileSync(path.join(h.root, MAIN), 'utf8')).toBe(root);
    expect(fs.readFileSync(path.join(h.root, 'etc/containerd/conf.d/rcm-rcmtest.toml'), 'utf8')).toBe(dropIn);
    expect(fs.existsSync(path.join(h.root, 'opt/rcm/shims'))).toBe(false);
  }, 60_000);
});
