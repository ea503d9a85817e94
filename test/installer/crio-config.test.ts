import { parse } from 'smol-toml';
import { CRIO_CONF_5_HANDLER_FIELDS, crioConf5Problems, CRIO_VERSION_OUTPUTS } from './crio-fixtures';
import {
  crioApplyBy, crioConflicts, crioDropIn, crioDropInProblem, crioHandlerFor, CRIO_HANDLER_FIELDS, CrioRequest, crioServedHandler, crioShadowing,
  CrioVersion, CRIO_RELOAD_RUNS_NEW_HANDLERS_FROM, isOurDropIn, parseCrioVersion,
} from '../../src/installer/crio-config';

// CRI-O's drop-in for a Shim, as pure text (crio-config.ts): every file is parsed with
// smol-toml and checked against crio.conf(5)'s handler fields (crio-fixtures.ts names the
// source). No CRI-O read these files: what CRI-O does with them is read from its docs.

const v = (key: keyof typeof CRIO_VERSION_OUTPUTS): CrioVersion => parseCrioVersion(CRIO_VERSION_OUTPUTS[key])!;
const SHIM = '/opt/rcm/shims/spin/0123456789abcdef/containerd-shim-spin-v2';
const PAYLOAD = '/opt/rcm/payloads/gvisor/0123456789abcdef';

function request(extra: Partial<CrioRequest> = {}): CrioRequest {
  return { handler: 'spin', binary: SHIM, options: {}, settings: {}, version: v('1.29.1'), ...extra };
}

/** The handler table of a drop-in, parsed; the file must hold it and nothing else. */
function handlerTable(text: string, handler: string): Record<string, unknown> {
  const parsed: any = parse(text);
  expect(Object.keys(parsed)).toEqual(['crio']);
  expect(Object.keys(parsed.crio.runtime.runtimes)).toEqual([handler]);
  return parsed.crio.runtime.runtimes[handler];
}

describe('the drop-in for a Shim: parsed back, and only crio.conf(5) fields of their documented types', () => {
  test.each([
    ['a Wasm shim (a containerd shim v2): vm, its binary, a runtime root of its own', request(),
      { runtime_type: 'vm', runtime_path: SHIM, runtime_root: '/run/rcm/crio/spin' }],
    ['a Wasm shim with SystemdCgroup (ignored: CRI-O\'s cgroup_manager decides)', request({ options: { SystemdCgroup: 'true' } }),
      { runtime_type: 'vm', runtime_path: SHIM, runtime_root: '/run/rcm/crio/spin' }],
    ['a Kata-like payload: vm, its shim, ConfigPath as runtime_config_path, privileged without host devices, annotations',
      request({
        handler: 'kata',
        binary: `${PAYLOAD}/bin/containerd-shim-kata-v2`,
        options: { ConfigPath: `${PAYLOAD}/share/configuration-qemu.toml` },
        settings: { privilegedWithoutHostDevices: true, podAnnotations: ['io.katacontainers.*'], containerAnnotations: ['io.katacontainers.*', 'x.example/y'] },
      }),
      {
        runtime_type: 'vm',
        runtime_path: `${PAYLOAD}/bin/containerd-shim-kata-v2`,
        runtime_root: '/run/rcm/crio/kata',
        runtime_config_path: `${PAYLOAD}/share/configuration-qemu.toml`,
        privileged_without_host_devices: true,
        allowed_annotations: ['io.katacontainers.*', 'x.example/y'],
      }],
    ['a gVisor payload through containerd\'s runc shim: oci, the OCI runtime itself (BinaryName), Root as runtime_root',
      request({
        handler: 'gvisor',
        binary: `${PAYLOAD}/containerd-shim-runc-v2`,
        runtimeType: 'io.containerd.runc.v2',
        options: { BinaryName: `${PAYLOAD}/runsc-wrapper`, Root: '/run/runsc', SystemdCgroup: 'true' },
      }),
      { runtime_type: 'oci', runtime_path: `${PAYLOAD}/runsc-wrapper`, runtime_root: '/run/runsc' }],
    ['an OCI runtime on a CRI-O whose version is unknown (oci has no name rule)',
      request({ handler: 'crun', binary: '/opt/rcm/payloads/crun/1/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v1', options: { BinaryName: '/opt/rcm/payloads/crun/1/crun' }, version: undefined }),
      { runtime_type: 'oci', runtime_path: '/opt/rcm/payloads/crun/1/crun' }],
    ['a shim given with a runtimeType name that is not runc\'s (the name means nothing to CRI-O): vm',
      request({ runtimeType: 'io.containerd.spin.v2' }), { runtime_type: 'vm', runtime_path: SHIM, runtime_root: '/run/rcm/crio/spin' }],
  ])('%s', (_what, req, expected) => {
    const text = crioDropIn(crioHandlerFor(req));
    const table = handlerTable(text, req.handler);
    expect(table).toEqual(expected);
    expect(crioConf5Problems(table)).toEqual([]);
    expect(crioDropInProblem(text, req.handler)).toBeUndefined();
    expect(isOurDropIn(text, req.handler)).toBe(true);
    expect(isOurDropIn(text, 'other')).toBe(false);
  });

  test('the module\'s own field table is crio.conf(5)\'s, less platform_runtime_paths (never written)', () => {
    const documented = Object.fromEntries(Object.entries(CRIO_CONF_5_HANDLER_FIELDS).filter(([k]) => k !== 'platform_runtime_paths'));
    expect(CRIO_HANDLER_FIELDS).toEqual(documented);
  });

  test('SystemdCgroup is reported as ignored; nothing else is', () => {
    expect(crioHandlerFor(request({ options: { SystemdCgroup: 'true' } })).ignored).toEqual(['option SystemdCgroup']);
    expect(crioHandlerFor(request()).ignored).toEqual([]);
  });

  test('a value TOML must escape is written escaped, and reads back as given', () => {
    const odd = '/opt/rcm/payloads/x/1/share/conf "q" \\ é.toml';
    const text = crioDropIn(crioHandlerFor(request({ options: { ConfigPath: odd } })));
    expect(handlerTable(text, 'spin').runtime_config_path).toBe(odd);
  });

  test('the checker refuses what is not one handler table of documented fields', () => {
    const good = crioDropIn(crioHandlerFor(request()));
    expect(crioDropInProblem(`${good}[crio.runtime]\ndefault_runtime = "spin"\n`, 'spin')).toMatch(/nothing else/);
    expect(crioDropInProblem(good.replace('runtime_type = "vm"', 'runtime_type = "vm"\nsnapshotter = "x"'), 'spin')).toBe('snapshotter is not a handler field of crio.conf(5)');
    expect(crioDropInProblem(good.replace('runtime_type = "vm"', 'runtime_type = "vm"\nprivileged_without_host_devices = "yes"'), 'spin')).toBe('privileged_without_host_devices must be a boolean');
    expect(crioDropInProblem(good.replace('runtime_type = "vm"', 'runtime_type = "oci"\nruntime_config_path = "/x"'), 'spin')).toMatch(/only with runtime_type "vm"/);
    expect(crioDropInProblem(good.replace('runtime_type = "vm"', 'runtime_type = "shim"'), 'spin')).toMatch(/must be "vm" or "oci"/);
    expect(crioDropInProblem(good, 'other')).toMatch(/\[crio.runtime.runtimes.other\]/);
    expect(crioDropInProblem('[crio', 'spin')).toMatch(/not valid TOML/);
  });
});

describe('what CRI-O would refuse is refused, with the reason', () => {
  test.each([
    ['a containerd shim v1 on CRI-O up to 1.36 (runwasi\'s wasmtime)', request({ binary: '/opt/rcm/shims/wt/1/containerd-shim-wasmtime-v1' }),
      /CRI-O 1\.29\.1 runs a containerd shim .* only from a file whose name ends in -v2 .*containerd-shim-wasmtime-v1/],
    ['the same on a CRI-O whose version is unknown (the stricter rule)', request({ binary: '/opt/rcm/shims/wt/1/containerd-shim-wasmtime-v1', version: undefined }),
      /\(version unknown\).*-v2/],
    ['a vm binary not named containerd-shim-<name> (a payload\'s shim file)', request({ binary: `${PAYLOAD}/bin/kata-runtime` }),
      /only from a file named containerd-shim-<name>; this one is kata-runtime/],
    ['a per-handler snapshotter', request({ settings: { snapshotter: 'stargz' } }), /CRI-O has no per-handler snapshotter .*"stargz"/],
    ['an option CRI-O has no field for', request({ options: { TypeUrl: 'x', Debug: 'true' } }), /options TypeUrl, Debug cannot be given to a vm runtime/],
    ['runc\'s BinaryName on a vm runtime', request({ options: { BinaryName: '/x' } }), /option BinaryName cannot be given to a vm runtime .*only ConfigPath/],
    ['runc\'s shim type without BinaryName', request({ runtimeType: 'io.containerd.runc.v2' }), /must be named by an absolute BinaryName option/],
    ['a relative ConfigPath', request({ options: { ConfigPath: 'conf.toml' } }), /ConfigPath option must be an absolute path/],
  ])('%s', (_what, req, message) => {
    expect(() => crioHandlerFor(req)).toThrow(message);
  });

  test('a -v1 shim name is allowed from CRI-O 1.37 on (a version object, not a real output: no 1.37 was released when this was written)', () => {
    const future: CrioVersion = { text: '1.37.0', major: 1, minor: 37, build: '' };
    expect(crioHandlerFor(request({ binary: '/opt/rcm/shims/wt/1/containerd-shim-wasmtime-v1', version: future })).kind).toBe('vm');
    expect(() => crioHandlerFor(request({ binary: '/opt/rcm/shims/wt/1/wasmtime', version: future }))).toThrow(/containerd-shim-<name>/);
  });
});

describe('crio --version (real outputs) and how a change reaches CRI-O', () => {
  test.each([
    ['1.17.1', '1.17.1', 'restart'],
    ['1.18.1', '1.18.1', 'restart'],
    ['1.18.3', '1.18.3', 'restart'],
    ['1.23.2', '1.23.2', 'restart'],
    ['1.29.1', '1.29.1', 'restart'],
    ['1.34.0', '1.34.0', 'restart'],
  ] as const)('%s', (key, text, by) => {
    const version = parseCrioVersion(CRIO_VERSION_OUTPUTS[key]);
    expect(version?.text).toBe(text);
    expect(crioApplyBy(version)).toBe(by);
  });

  test('every version known restarts: a handler added by a reload is listed but cannot run a pod (a real 1.34.0; cri-o/cri-o#10202); the build names the commit', () => {
    expect(CRIO_RELOAD_RUNS_NEW_HANDLERS_FROM).toBeUndefined();
    expect(crioApplyBy({ text: '1.25.9', major: 1, minor: 25, build: '' })).toBe('restart');
    expect(crioApplyBy({ text: '1.26.0', major: 1, minor: 26, build: '' })).toBe('restart');
    expect(crioApplyBy(v('1.34.0'))).toBe('restart');
    expect(crioApplyBy(v('1.37.0'))).toBe('restart');
    expect(crioApplyBy(undefined)).toBe('restart');
    expect(parseCrioVersion('no version here')).toBeUndefined();
    expect(v('1.23.2').build).toContain('9a36bb83172c02ebd060586086abd6c160e8a550');
  });

  test('1.34 indents its lines under the first: the commit is still part of the build (a rebuild of the same version is seen)', () => {
    expect(v('1.34.0').build).toBe('crio version 1.34.0 GitCommit:      unknown');
    const rebuilt = parseCrioVersion(CRIO_VERSION_OUTPUTS['1.34.0'].replace('GitCommit:      unknown', 'GitCommit:      0123456789abcdef0123456789abcdef01234567'))!;
    expect(rebuilt.text).toBe('1.34.0');
    expect(rebuilt.build).not.toBe(v('1.34.0').build);
  });
});

test('another file defining the handler is a conflict; our own file and other handlers are not', () => {
  const ours = crioDropIn(crioHandlerFor(request()));
  const files = new Map([
    ['/etc/crio/crio.conf', '[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.crun]\nruntime_path = "/usr/bin/crun"\n'],
    ['/etc/crio/crio.conf.d/99-kata-deploy', '[crio.runtime.runtimes.kata-qemu]\nruntime_type = "vm"\n'],
    ['/etc/crio/crio.conf.d/99-rcm-spin.conf', ours],
    ['/etc/crio/crio.conf.d/50-broken', '[crio'],
  ]);
  expect(crioConflicts(files, 'spin', '/etc/crio/crio.conf.d/99-rcm-spin.conf')).toEqual([]);
  expect(crioConflicts(files, 'kata-qemu', '/etc/crio/crio.conf.d/99-rcm-kata-qemu.conf')).toEqual(['/etc/crio/crio.conf.d/99-kata-deploy']);
  expect(crioConflicts(files, 'crun', '/etc/crio/crio.conf.d/99-rcm-crun.conf')).toEqual(['/etc/crio/crio.conf']);
});

test('what CRI-O serves (crio status config prints its running config as TOML)', () => {
  const running = '[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.spin]\nruntime_type = "vm"\nruntime_path = "/x/containerd-shim-spin-v2"\n';
  expect(crioServedHandler(running, 'spin')).toEqual({ runtimePath: '/x/containerd-shim-spin-v2', runtimeType: 'vm' });
  expect(crioServedHandler(running, 'kata')).toBe('CRI-O does not list handler kata');
  expect(crioServedHandler('level=error', 'spin')).toMatch(/not TOML/);
});

test('a file CRI-O reads after ours that defines the handler takes it over (the last one wins); files read before do not', () => {
  const ours = '/etc/crio/crio.conf.d/99-rcm-spin.conf';
  const spin = '[crio.runtime.runtimes.spin]\nruntime_type = "vm"\nruntime_path = "/usr/bin/other"\n';
  const files = new Map([
    ['/etc/crio/crio.conf', spin],
    ['/etc/crio/crio.conf.d/50-early', spin],
    ['/etc/crio/crio.conf.d/99-rcm-spin.conf', spin],
    ['/etc/crio/crio.conf.d/99-rcm-spin.conf.bak', spin],
    ['/etc/crio/crio.conf.d/99-zz-other.toml', spin],
    ['/etc/crio/crio.conf.d/99-zz-kata', '[crio.runtime.runtimes.kata]\nruntime_type = "vm"\n'],
    ['/etc/crio/crio.conf.d/zz-broken', '[crio'],
  ]);
  expect(crioShadowing(files, 'spin', ours)).toEqual(['/etc/crio/crio.conf.d/99-rcm-spin.conf.bak', '/etc/crio/crio.conf.d/99-zz-other.toml']);
  expect(crioShadowing(files, 'kata', '/etc/crio/crio.conf.d/99-rcm-kata.conf')).toEqual(['/etc/crio/crio.conf.d/99-zz-kata']);
  expect(crioShadowing(files, 'kata', '/etc/crio/crio.conf.d/zzz-rcm-kata.conf')).toEqual([]);
});
