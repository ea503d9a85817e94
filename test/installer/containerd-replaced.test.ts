import * as fs from 'fs';
import * as path from 'path';
import { startFakeHost } from '../support/fake-host';
import { fakeHostArgs, IDLE_INIT, installerBench, RUNC_ONLY_CONFIG as CONFIG } from '../support/installer-bench';
import { runBundle } from '../support/installer-bundle';
import { CONTAINERD_BINARIES } from '../support/tools';

// containerd replaced under an installed handler (a package upgrade, a new node image): the
// handler counts as installed again only once the containerd that is there now has read the
// config with it. The binaries are Debian's containerd 1.6, 1.7 and 2.1, each the host's
// /usr/bin/containerd in turn.

const [V16, V17, V21] = CONTAINERD_BINARIES;
const bench = installerBench({ name: 'replaced', shim: true, host: { 'usr/bin/containerd': { copy: V16.binary }, 'etc/containerd/config.toml': CONFIG } });
const { bundle } = bench;

const args = () => [...fakeHostArgs(bench.host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`];
const onHost = (p: string) => path.join(bench.host.root, p);
const config = () => fs.readFileSync(onHost('etc/containerd/config.toml'), 'utf8');
const replaceContainerd = (binary: string) => {
  // As a package upgrade does: a new file renamed over the old one.
  fs.copyFileSync(binary, onHost('usr/bin/containerd.new'));
  fs.chmodSync(onHost('usr/bin/containerd.new'), 0o755);
  fs.renameSync(onHost('usr/bin/containerd.new'), onHost('usr/bin/containerd'));
};

test('a handler installed under containerd 1.6 is drift once containerd is replaced, and is verified again with 1.7, then 2.1, without a change to the config', async () => {
  // GIVEN the handler installed under containerd 1.6
  const install = await runBundle(bundle, 'install', args());
  expect(install.code).toBe(0);
  expect(install.result.state.containerdBuild).toMatch(/ 1\.6\.\d+/);
  const configAfterInstall = config();
  expect((await runBundle(bundle, 'status', args())).result).toMatchObject({ installed: true });

  for (const next of [V17, V21]) {
    // WHEN containerd is replaced by another version
    replaceContainerd(next.binary);

    // THEN status no longer counts the handler installed, and says why (the node agent's drift check reads this)
    const status = await runBundle(bundle, 'status', args());
    expect(status.result).toMatchObject({ installed: false, message: expect.stringMatching(new RegExp(`containerd was replaced since \\(.* → .* ${next.version.replace('.', '\\.')}\\.\\d+`)) });

    // WHEN the install runs again (what the controller admits after the gate dropped)
    const again = await runBundle(bundle, 'install', args());

    // THEN the handler is verified with the new containerd: nothing downloaded into place, the config byte for byte as it was
    expect(again.code).toBe(0);
    expect(again.result).toMatchObject({ outcome: 'installed', message: expect.stringMatching(/verified with the containerd that replaced/) });
    expect(again.result.changed).toEqual([expect.stringMatching(new RegExp(`^verified handler rcmtest with containerd .* ${next.version.replace('.', '\\.')}\\.\\d+`))]);
    expect(config()).toBe(configAfterInstall);
    expect(again.result.paths.binary).toBe(install.result.paths.binary);
    // AND status counts it installed again, and a third run changes nothing
    expect((await runBundle(bundle, 'status', args())).result).toMatchObject({ installed: true });
    expect((await runBundle(bundle, 'install', args())).result).toMatchObject({ outcome: 'unchanged' });
  }
}, 120_000);

test('a containerd replaced by one that cannot read the config (a node image rolled back from 2.1 to 1.6) is a failure with a reason, and nothing changes', async () => {
  // GIVEN a host of containerd 2.1 with a config of version 3, and the handler installed there
  const v3 = 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n';
  const newer = await startFakeHost({ 'usr/bin/containerd': { copy: V21.binary }, 'etc/containerd/config.toml': v3 }, IDLE_INIT);
  try {
    const argsOf = () => [...fakeHostArgs(newer), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`];
    expect((await runBundle(bundle, 'install', argsOf())).code).toBe(0);
    const stateFile = path.join(newer.root, 'opt/rcm/state/rcmtest.json');
    const stateBefore = fs.readFileSync(stateFile, 'utf8');
    const configBefore = fs.readFileSync(path.join(newer.root, 'etc/containerd/config.toml'), 'utf8');

    // WHEN containerd 1.6 replaces it
    fs.copyFileSync(V16.binary, path.join(newer.root, 'usr/bin/containerd'));

    // THEN the install again fails with the reason (1.6 reads a version 3 config without a word, and without the handler), and the record and config are as they were
    const again = await runBundle(bundle, 'install', argsOf());
    expect(again.code).toBe(4);
    expect(again.result).toMatchObject({ reason: 'ReplacedContainerdRefusesHandler', message: expect.stringMatching(/containerd was replaced .* 1\.6\.\d+.*does not take handler rcmtest: the effective config does not contain handler rcmtest/) });
    expect(fs.readFileSync(stateFile, 'utf8')).toBe(stateBefore);
    expect(fs.readFileSync(path.join(newer.root, 'etc/containerd/config.toml'), 'utf8')).toBe(configBefore);
  } finally {
    await newer.stop();
  }
}, 120_000);
