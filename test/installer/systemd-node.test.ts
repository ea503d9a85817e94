import * as fs from 'fs';
import * as path from 'path';
import { parse } from 'smol-toml';
import { eventually } from '../support/rest';
import { bootSystemdNode, SystemdNode } from '../support/systemd-node';

// The test bed of "production-shaped" nodes is real: PID 1 is systemd 252, containerd is
// Debian's stock containerd.service with systemd's default start limit (5 starts in 10 s), its
// config is containerd's default with runc's SystemdCgroup = true. What the installer's
// restarts of containerd meet on most production nodes (../shared/notes/systemd-nodes.md).
// Needs the root file system of scripts/provision.sh (fails saying so when it is missing).

jest.setTimeout(120_000);

/** Processes of this machine whose command line names the node (its systemd-nspawn). */
function nspawnsOf(name: string): string[] {
  return fs.readdirSync('/proc').filter(p => /^\d+$/.test(p)).filter(p => {
    try {
      return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').includes(`--machine=${name}`);
    } catch {
      return false;
    }
  });
}

/** Nothing of the node is left on the machine: no nspawn, no cgroup, no folder. */
function expectGone(node: SystemdNode): void {
  expect(nspawnsOf(node.name)).toEqual([]);
  expect(node.cgroups.filter(c => fs.existsSync(c))).toEqual([]);
  expect(fs.existsSync(node.dir)).toBe(false);
  expect(fs.existsSync(`/run/systemd/nspawn/propagate/${node.name}`)).toBe(false);
}

describe('a node whose PID 1 is systemd, with Debian\'s containerd.service', () => {
  let node: SystemdNode;
  let stopped = false;
  beforeAll(async () => {
    node = await bootSystemdNode('rcm-sdnode-a');
    console.log(`systemd node booted: copy ${node.timings.copyMs} ms, boot to containerd answering ${node.timings.bootMs} ms`
      + ` (daemon-reexec ${node.timings.reexecMs} ms)`);
  });
  afterAll(async () => {
    if (node && !stopped) await node.stop();
  });

  test('PID 1 is systemd 252, the boot settles, systemd manages the cgroup controllers', () => {
    expect(fs.readFileSync(`/proc/${node.pid}/comm`, 'utf8').trim()).toBe('systemd');
    expect(fs.readlinkSync(`/proc/${node.pid}/ns/pid`)).not.toBe(fs.readlinkSync('/proc/self/ns/pid'));
    expect(node.exec(['cat', '/proc/1/comm']).trim()).toBe('systemd');
    expect(node.exec(['systemctl', '--version'])).toMatch(/^systemd 252\b/);
    expect(['running', 'degraded']).toContain(node.tryExec(['systemctl', 'is-system-running']).stdout.trim());
    expect(node.exec(['hostname']).trim()).toBe('rcm-sdnode-a');
    // after the daemon-reexec that follows node-prep's remount: system.slice in the memory controller
    expect(node.tryExec(['test', '-d', '/sys/fs/cgroup/memory/system.slice']).code).toBe(0);
    expect(node.unitState('node-prep')).toMatchObject({ activeState: 'active', result: 'success' });
    expect(node.timings.bootMs).toBeLessThan(60_000);
  });

  test('containerd.service is Debian\'s stock unit, active, with the default start limit', () => {
    expect(node.unitState('containerd')).toMatchObject({ activeState: 'active', subState: 'running', result: 'success' });
    expect(node.show('containerd', ['StartLimitBurst', 'StartLimitIntervalUSec', 'FragmentPath', 'DropInPaths', 'Restart', 'Type']))
      .toEqual({
        StartLimitBurst: '5',
        StartLimitIntervalUSec: '10s',
        FragmentPath: '/lib/systemd/system/containerd.service',
        DropInPaths: '',
        Restart: 'always',
        Type: 'notify',
      });
    const unit = fs.readFileSync(path.join(node.root, 'lib/systemd/system/containerd.service'), 'utf8');
    expect(unit).not.toMatch(/StartLimit/);
    expect(unit).toMatch(/^Restart=always$/m);
    // the package's files are as Debian shipped them; only the config (a conffile) was changed
    const changed = node.exec(['dpkg', '--verify', 'containerd']).split('\n').filter(Boolean);
    expect(changed).toEqual([expect.stringMatching(/ c \/etc\/containerd\/config\.toml$/)]);
    expect(node.exec(['containerd', '--version'])).toMatch(/ 1\.6\.20/);
    expect(node.exec(['ctr', 'version'])).toMatch(/Server:\s+Version:\s+1\.6\.20/);
  });

  test('containerd\'s config is its default (version 2) with runc\'s SystemdCgroup = true', () => {
    const config: any = parse(fs.readFileSync(path.join(node.root, 'etc/containerd/config.toml'), 'utf8'));
    expect(config.version).toBe(2);
    const cri = config.plugins['io.containerd.grpc.v1.cri'];
    expect(cri.containerd.runtimes.runc.options.SystemdCgroup).toBe(true);
    expect(cri.restrict_oom_score_adj).toBe(true);
    // what the running containerd reads
    const dumped: any = parse(node.exec(['containerd', 'config', 'dump']));
    expect(dumped.plugins['io.containerd.grpc.v1.cri'].containerd.runtimes.runc.options.SystemdCgroup).toBe(true);
    // the socket is reachable from the machine through the node's view
    expect(fs.statSync(node.containerdSocket).isSocket()).toBe(true);
  });

  test('the sixth restart within 10 s is refused (start-limit-hit), containerd stays down, reset-failed brings it back', async () => {
    // start from a clean start counter, as on a node whose containerd started long ago
    node.exec(['systemctl', 'reset-failed', 'containerd']);
    const startsBefore = node.startsOf('containerd');
    const runs: { code: number; ms: number; stderr: string }[] = [];
    for (let i = 0; i < 6; i++) {
      const t = Date.now();
      const r = node.tryExec(['systemctl', 'restart', 'containerd']);
      runs.push({ code: r.code, ms: Date.now() - t, stderr: r.stderr });
    }
    console.log(`systemctl restart containerd x6: ${runs.map(r => `exit ${r.code} in ${r.ms} ms`).join(', ')}`);
    expect(runs.slice(0, 5).map(r => r.code)).toEqual([0, 0, 0, 0, 0]);
    expect(runs[5].code).not.toBe(0);
    expect(runs[5].stderr).toMatch(/start of the service was attempted too often/);
    expect(runs.reduce((a, r) => a + r.ms, 0)).toBeLessThan(10_000); // all within the start limit's interval
    expect(node.unitState('containerd')).toMatchObject({ activeState: 'failed', subState: 'failed', result: 'start-limit-hit', mainPid: 0 });
    // the journal tells the same (journald writes a moment later)
    await eventually(async () => node.startLimitHits('containerd') === 1, 10_000, () => node.journal('containerd'));
    expect(node.startsOf('containerd')).toBe(startsBefore + 5);
    expect(node.restartsOf('containerd')).toBe(startsBefore + 4);

    // Restart=always does not bring it back (RestartSec=5)
    await new Promise(r => setTimeout(r, 6_000));
    expect(node.unitState('containerd')).toMatchObject({ activeState: 'failed', result: 'start-limit-hit' });
    expect(node.tryExec(['ctr', '--connect-timeout', '1s', 'version']).code).not.toBe(0);

    node.sh('systemctl reset-failed containerd && systemctl start containerd');
    expect(node.unitState('containerd')).toMatchObject({ activeState: 'active', subState: 'running', result: 'success' });
    expect(node.exec(['ctr', 'version'])).toMatch(/Server:/);
    expect(node.startsOf('containerd')).toBe(startsBefore + 6);
  });

  test('stop halts the node and leaves nothing behind', async () => {
    const { haltMs } = await node.stop();
    stopped = true;
    console.log(`systemd node halted in ${haltMs} ms`);
    expect(haltMs).toBeLessThan(30_000);
    expectGone(node);
  });
});

test('two nodes at once, each with its own systemd and containerd', async () => {
  const booted = await Promise.allSettled([bootSystemdNode('rcm-sdnode-b'), bootSystemdNode('rcm-sdnode-c')]);
  const nodes = booted.flatMap(b => (b.status === 'fulfilled' ? [b.value] : []));
  try {
    for (const b of booted) if (b.status === 'rejected') throw b.reason;
    const [b, c] = nodes;
    expect(b.pid).not.toBe(c.pid);
    expect(fs.readlinkSync(`/proc/${b.pid}/ns/pid`)).not.toBe(fs.readlinkSync(`/proc/${c.pid}/ns/pid`));
    for (const n of nodes) expect(n.unitState('containerd')).toMatchObject({ activeState: 'active', subState: 'running' });
    const pids = nodes.map(n => n.mainPidOnMachine('containerd'));
    console.log(`two systemd nodes booted at once: ${nodes.map(n => `${n.name} copy ${n.timings.copyMs} ms, boot ${n.timings.bootMs} ms`).join('; ')}`);
    expect(pids[0]).toBeGreaterThan(0);
    expect(pids[1]).toBeGreaterThan(0);
    expect(pids[0]).not.toBe(pids[1]);
    // each containerd is its node's own (its own state, its own instance id)
    const uuid = (n: SystemdNode) => n.exec(['ctr', 'version']).match(/UUID:\s+(\S+)/)?.[1];
    expect(uuid(b)).toBeTruthy();
    expect(uuid(b)).not.toBe(uuid(c));
    // a restart on one node leaves the other's containerd alone
    b.exec(['systemctl', 'restart', 'containerd']);
    expect(c.mainPidOnMachine('containerd')).toBe(pids[1]);
    expect(b.mainPidOnMachine('containerd')).not.toBe(pids[0]);
  } finally {
    await Promise.all(nodes.map(n => n.stop()));
  }
  for (const n of nodes) expectGone(n);
});
