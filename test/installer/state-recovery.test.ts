import * as fs from 'fs';
import * as path from 'path';
import { parseState } from '../../src/installer/state';
import { fakeHostArgs, installerBench } from '../support/installer-bench';
import { publishShimVersions, runBundle } from '../support/installer-bundle';

// A damaged state file (emptied by a full disk, cut short, edited by hand) is reported and
// ignored: every command still works by what containerd's config shows.

const GOOD = {
  handler: 'spin',
  shimName: 'spin',
  sha256: 'a'.repeat(64),
  location: 'https://e.com/s.tgz',
  binary: '/opt/rcm/shims/spin/aaaa/containerd-shim-spin-v2',
  runtimeOptions: {},
  distro: 'containerd',
  configFile: '/etc/containerd/config.toml',
  configVersion: 2,
  configCreated: false,
  configFolderCreated: false,
  edit: { addedSeparator: false, addedVersionLine: false },
  installedAt: '2026-11-22T00:00:00.000Z',
};

describe('parseState', () => {
  test.each([
    ['an empty file', '', /state file F is empty/],
    ['only whitespace', '\n  \n', /state file F is empty/],
    ['a file cut short', JSON.stringify(GOOD).slice(0, 40), /state file F is not valid JSON/],
    ['not an object', '[1,2]', /does not hold a JSON object/],
    ['missing fields', JSON.stringify({ handler: 'spin' }), /lacks shimName, sha256, location, binary, distro, configFile/],
    ['another handler\'s record', JSON.stringify({ ...GOOD, handler: 'wasmtime' }), /is for handler "wasmtime", not "spin"/],
    ['a bad config version', JSON.stringify({ ...GOOD, configVersion: 'x' }), /no valid configVersion/],
    ['a relative binary path', JSON.stringify({ ...GOOD, binary: 'shims/x' }), /names relative paths/],
  ])('%s is a problem, named', (_what, text, problem) => {
    const parsed = parseState(text, 'spin', 'F');
    expect(parsed.state).toBeUndefined();
    expect(parsed.problem).toMatch(problem);
  });

  test('a good record is read as written', () => {
    expect(parseState(JSON.stringify(GOOD), 'spin', 'F')).toEqual({ state: GOOD });
  });
});

describe('the installer with a damaged state file, on a fake host', () => {
  const CONFIG = '# the admin\'s config\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.9"\n'
    + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n';
  const bench = installerBench({ name: 'state', host: { 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': CONFIG } });
  let urls: { v1: string; v2: string };
  beforeAll(async () => {
    urls = await publishShimVersions(bench.server, bench.work);
  }, 60_000);

  const run = (command: string, extra: string[] = []) => runBundle(bench.bundle, command, [...fakeHostArgs(bench.host), ...extra]);
  const stateFile = () => path.join(bench.host.root, 'opt/rcm/state/rcmtest.json');
  const config = () => fs.readFileSync(path.join(bench.host.root, 'etc/containerd/config.toml'), 'utf8');

  test('an emptied state file: status says so; uninstall still removes the handler and our files', async () => {
    // GIVEN an install whose state file was emptied afterwards
    expect((await run('install', [`--location=${urls.v1}`])).code).toBe(0);
    fs.writeFileSync(stateFile(), '');
    // WHEN status is asked THEN it answers, naming the problem
    const status = await run('status');
    expect(status.code).toBe(0);
    expect(status.result.stateProblem).toBe('the state file /opt/rcm/state/rcmtest.json is empty');
    expect(status.stderr).toMatch(/is empty; ignoring it and going by what containerd's config shows/);
    // WHEN uninstalling THEN the handler leaves the config (byte for byte the admin's again) and our files go
    const uninstall = await run('uninstall');
    expect(uninstall.code).toBe(0);
    expect(uninstall.result.outcome).toBe('uninstalled');
    expect(config()).toBe(CONFIG);
    expect(fs.existsSync(path.join(bench.host.root, 'opt/rcm/shims/rcmtest'))).toBe(false);
    expect(fs.existsSync(stateFile())).toBe(false);
  }, 60_000);

  test('a state file cut short: the next install repairs it and removes the version the config named', async () => {
    // GIVEN version 1 installed, its state file cut short
    const v1 = await run('install', [`--location=${urls.v1}`]);
    expect(v1.code).toBe(0);
    fs.writeFileSync(stateFile(), fs.readFileSync(stateFile(), 'utf8').slice(0, 50));
    // WHEN version 2 is installed
    const v2 = await run('install', [`--location=${urls.v2}`]);
    // THEN it worked, the config names only version 2, version 1's folder is gone, the record is whole again
    expect(v2.code).toBe(0);
    expect(v2.stderr).toMatch(/is not valid JSON/);
    expect(config().split('BEGIN runtime-class-manager handler rcmtest').length).toBe(2);
    expect(config()).toContain(v2.result.paths.binary);
    expect(fs.existsSync(path.join(bench.host.root, v1.result.paths.binary))).toBe(false);
    expect(fs.readdirSync(path.join(bench.host.root, 'opt/rcm/shims/rcmtest'))).toEqual([path.basename(path.dirname(v2.result.paths.binary))]);
    expect(JSON.parse(fs.readFileSync(stateFile(), 'utf8'))).toMatchObject({ binary: v2.result.paths.binary, sha256: expect.any(String) });
    // AND the same install again is a no-op once more
    expect((await run('install', [`--location=${urls.v2}`, `--sha256=${v2.result.sha256}`])).result.outcome).toBe('unchanged');
    expect((await run('uninstall')).code).toBe(0);
    expect(config()).toBe(CONFIG);
  }, 60_000);
});
