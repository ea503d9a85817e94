import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { parse } from 'smol-toml';
import { addRuntime, checkVersionSupported, defaultRuntimesOf, detectConfigVersion, needsDefaultRuntimes, removeRuntime, RUNTIMES_PATH, tomlPart } from '../../src/installer/containerd-config';
import { CONTAINERD_BINARIES } from '../support/tools';

// The real containerd binaries judge every edit: `containerd --config F config dump` parses
// the file exactly as the daemon would and prints the effective configuration.

const FIXTURES = path.join(__dirname, '..', 'fixtures', 'containerd');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-oracle-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

// One path for every dump: containerd lists the config file itself among its imports.
function dump(binary: string, text: string): string {
  const file = path.join(work, 'config.toml');
  fs.writeFileSync(file, text);
  return execFileSync(binary, ['--config', file, 'config', 'dump'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function handlerIn(dumped: Record<string, any>, handler: string): any {
  for (const p of [RUNTIMES_PATH[2], RUNTIMES_PATH[3]]) {
    const runtimes = p.reduce<any>((n, k) => n?.[k], dumped);
    if (runtimes?.[handler]) return runtimes[handler];
  }
  return undefined;
}

function without(dumped: Record<string, any>, handler: string): Record<string, any> {
  const copy = structuredClone(dumped);
  for (const p of [RUNTIMES_PATH[2], RUNTIMES_PATH[3]]) {
    const runtimes = p.reduce<any>((n, k) => n?.[k], copy);
    if (runtimes) delete runtimes[handler];
  }
  return copy;
}

const ENTRY = {
  handler: 'rcmtest',
  runtimeType: '/opt/rcm/shims/rcmtest/0123456789ab/containerd-shim-rcmtest-v2',
  options: { SystemdCgroup: 'true', BinaryName: '/usr/bin/runc' },
};

const fixtures = fs.readdirSync(FIXTURES).filter(f => !f.startsWith('inline-')).sort();
const defaultConfigs = new Map(CONTAINERD_BINARIES.map(c => [c.version, execFileSync(c.binary, ['config', 'default'], { encoding: 'utf8' })]));
// k3s renders `{{ template "base" . }}` as its full default config: the oracle does the same.
const render = (text: string, defaultConfig: string) => tomlPart(text.replace('{{ template "base" . }}', defaultConfig));

// The combinations a node can have: containerd 1.x cannot read version-3 files (1.6 silently
// ignores their plugin tables), the installer refuses version-1 files on containerd 2 (see
// below), and k3s ships config.toml.tmpl for containerd 1 and config-v3.toml.tmpl for 2.
const cases = CONTAINERD_BINARIES.flatMap(c => fixtures.map(f => {
  const original = fs.readFileSync(path.join(FIXTURES, f), 'utf8');
  // A template's version is that of what it renders (the installer reads the rendered config.toml).
  const version = detectConfigVersion(render(original, defaultConfigs.get(c.version)!), c.major);
  return { label: `containerd ${c.version}, fixture ${f}`, containerd: c, original, version, k3sV3: f.includes('-v3') };
})).filter(({ containerd, version, original, k3sV3 }) => !(containerd.major < 2 && version === 3)
  && !(containerd.major >= 2 && version === 1)
  && !(original.includes('{{') && k3sV3 !== (containerd.major >= 2)));

describe.each(cases)('$label', ({ containerd, original, version }) => {
  const defaultConfig = defaultConfigs.get(containerd.version)!;
  const effective = (text: string) => render(text, defaultConfig);

  test('install adds exactly the handler to the effective config; uninstall restores it byte for byte', () => {
    // GIVEN the effective config before
    const before = parse(dump(containerd.binary, effective(original)));

    // WHEN the handler is added
    const defaults = needsDefaultRuntimes(effective(original), version, containerd.major) ? defaultRuntimesOf(defaultConfig) : undefined;
    const { text: installed, ...edit } = addRuntime(original, version, ENTRY, defaults);
    const after = parse(dump(containerd.binary, effective(installed)));

    // THEN the dump differs only by the handler, which points at the installed binary
    expect(handlerIn(after, 'rcmtest')).toMatchObject({ runtime_type: ENTRY.runtimeType, options: { SystemdCgroup: true, BinaryName: '/usr/bin/runc' } });
    expect(without(after, 'rcmtest')).toEqual(before);
    // and the original text is still there, byte for byte (template directives included)
    expect(installed.startsWith(original)).toBe(true);

    // WHEN it is installed again (a new revision) the file holds one block, not two
    const { text: reinstalled } = addRuntime(installed, version, { ...ENTRY, runtimeType: ENTRY.runtimeType.replace('0123456789ab', 'ba9876543210') }, defaults);
    expect(reinstalled.split('BEGIN runtime-class-manager handler rcmtest').length).toBe(2);
    expect(handlerIn(parse(dump(containerd.binary, effective(reinstalled))), 'rcmtest').runtime_type).toContain('ba9876543210');

    // WHEN it is removed
    const { text: removed } = removeRuntime(installed, version, 'rcmtest', edit);
    // THEN the file and the effective config are the original ones
    expect(removed).toBe(original);
    expect(dump(containerd.binary, effective(removed))).toBe(dump(containerd.binary, effective(original)));
  });
});

test('a version-1 file on containerd 2 is refused with a clear error', () => {
  const original = fs.readFileSync(path.join(FIXTURES, 'legacy-v1.toml'), 'utf8');
  expect(() => checkVersionSupported(detectConfigVersion(original, 2), 2)).toThrow(/version-1 config file on containerd 2: migrate it first \(containerd config migrate\)/);
  expect(() => checkVersionSupported(3, 1)).toThrow(/version-3 config file .* containerd 1/);
});

test('an inline runtimes table is refused, not broken', () => {
  const original = fs.readFileSync(path.join(FIXTURES, 'inline-runtimes-v2.toml'), 'utf8');
  expect(() => addRuntime(original, 2, ENTRY)).toThrow(/would make the file invalid .*inline table/);
});
