import * as fs from 'fs';
import * as path from 'path';
import { parse } from 'smol-toml';
import { CRIO_VERSION_OUTPUTS } from './crio-fixtures';
import { FakeHost, startFakeHost } from '../support/fake-host';
import { installerBench } from '../support/installer-bench';
import { ArtifactServer, InstallerRun, sha256, shimBinary, tarGz } from '../support/installer-bundle';
import { eventually } from '../support/rest';

// CRI-O nodes on fake hosts (test/support/fake-host.ts), shared by the CRI-O test files.
// NO CRI-O RUNS HERE: no CRI-O package exists for these machines. Three shell scripts stand
// in, and only for what the installer uses of them:
// - `crio` answers `--version` with a release's output (crio-fixtures.ts) and
//   `status --socket S config` with what the stand-in daemon serves;
// - the stand-in daemon "serves" what CRI-O would read: crio.conf, then every file of
//   crio.conf.d in lexical order, the last one winning (a handler's table as a whole, other
//   tables key by key: crio.conf.d(5) as read, not CRI-O's validation), read at start and
//   again on SIGHUP. It refuses a configuration that defines the handler named in
//   /etc/crio-standin/refuse (on SIGHUP it keeps the old one, or exits when
//   /etc/crio-standin/crash-on-refuse is there; at start it exits), as CRI-O refuses a
//   configuration it cannot validate;
// - `systemctl` logs its calls, reloads the daemon by SIGHUP (refused when it is not running,
//   as systemd refuses to reload an inactive unit), restarts it and waits for it to be ready
//   or to fail (crio.service is Type=notify), and reports the unit's state: active, or failed
//   (with /run/crio-standin/failed's result) when the daemon exited with an error and
//   /etc/crio-standin/no-restart is there (no Restart=), or when a test says so.
// The init starts the daemon, and again when it exits (as systemd's Restart= would).

export const STANDIN = {
  crio: `#!/bin/sh
# STAND-IN for CRI-O's crio command in a test's fake host, NOT CRI-O.
case "$1" in
  --version) cat /etc/crio-standin/version; exit 0 ;;
  status)
    shift
    sock=/var/run/crio/crio.sock
    while [ $# -gt 0 ]; do
      case "$1" in
        --socket|-s) sock=$2; shift 2 ;;
        config) cmd=config; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
      esac
    done
    [ "$cmd" = config ] || { echo "only 'status config' is stood in for" >&2; exit 2; }
    pid=$(cat /run/crio-standin/pid 2>/dev/null)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ -e "$sock" ] && [ -f /run/crio-standin/served.toml ]; then
      cat /run/crio-standin/served.toml
      exit 0
    fi
    echo "dial unix $sock: connect: connection refused" >&2
    exit 1 ;;
esac
echo "unknown command $1" >&2
exit 2
`,
  daemon: `#!/bin/sh
# STAND-IN for the CRI-O daemon in a test's fake host, NOT CRI-O (see crio-standins.ts).
S=/run/crio-standin
# The files in the order CRI-O reads them, merged: the last table of a handler wins as a whole,
# other tables key by key. One line per key (no multi-line values in these tests' files).
merge() {
  awk '
    FNR == 1 { sec = "" }
    /^[ \\t]*(#|$)/ { next }
    /^[ \\t]*\\[/ {
      sec = $0; sub(/^[ \\t]*\\[[ \\t]*/, "", sec); sub(/[ \\t]*\\][ \\t]*(#.*)?$/, "", sec)
      if (!(sec in seen)) { seen[sec] = 1; order[++n] = sec }
      if (sec ~ /^crio\\.runtime\\.runtimes\\./ && owner[sec] != FILENAME) {
        owner[sec] = FILENAME
        m = split(keys[sec], old, "\\n"); for (i = 1; i <= m; i++) delete has[sec, old[i]]
        keys[sec] = ""
      }
      next
    }
    {
      key = $0; sub(/^[ \\t]*/, "", key); sub(/[ \\t]*=.*/, "", key)
      if (!((sec, key) in has)) { has[sec, key] = 1; keys[sec] = keys[sec] (keys[sec] == "" ? "" : "\\n") key }
      val[sec, key] = $0
    }
    END {
      m = split(keys[""], ks, "\\n"); for (j = 1; j <= m; j++) print val["", ks[j]]
      for (i = 1; i <= n; i++) {
        s = order[i]; if (s == "") continue
        print "[" s "]"
        m = split(keys[s], ks, "\\n"); for (j = 1; j <= m; j++) print val[s, ks[j]]
        print ""
      }
    }' "$@" < /dev/null
}
load() {
  refuse=$(cat /etc/crio-standin/refuse 2>/dev/null)
  files=""
  for f in /etc/crio/crio.conf /etc/crio/crio.conf.d/*; do
    [ -f "$f" ] || continue
    if [ -n "$refuse" ] && grep -q "^\\[crio\\.runtime\\.runtimes\\.$refuse\\]" "$f"; then
      echo "refused $f" >> $S/log
      return 1
    fi
    files="$files $f"
  done
  merge $files > $S/served.new
  mv $S/served.new $S/served.toml
  echo loaded >> $S/log
}
on_hup() {
  load && return 0
  if [ -f /etc/crio-standin/crash-on-refuse ]; then
    rm -f /run/crio/crio.sock
    echo "exited on reload" >> $S/log
    exit 1
  fi
}
mkdir -p /run/crio
load || { rm -f $S/served.toml /run/crio/crio.sock; echo "refused at start" >> $S/log; exit 1; }
trap on_hup HUP
trap 'rm -f /run/crio/crio.sock; exit 0' TERM
touch /run/crio/crio.sock
echo started >> $S/log
while true; do sleep 1 & wait $!; done
`,
  systemctl: `#!/bin/sh
# STAND-IN for systemctl in a test's fake host (no systemd runs there), NOT systemd.
S=/run/crio-standin
echo "$*" >> $S/systemctl.log
running() { pid=$(cat $S/pid 2>/dev/null); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
case "$1" in
  show)
    if [ -f $S/failed ]; then printf 'ActiveState=failed\\nSubState=failed\\nResult=%s\\n' "$(cat $S/failed)"
    else printf 'ActiveState=active\\nSubState=running\\nResult=success\\n'; fi
    printf 'StartLimitBurst=5\\nStartLimitIntervalUSec=10s\\nExecMainStartTimestampMonotonic=0\\n' ;;
  reload)
    if [ -f $S/failed ] || ! running; then echo "crio.service is not active, cannot reload." >&2; exit 1; fi
    kill -HUP "$(cat $S/pid)" ;;
  restart)
    if [ "$(cat $S/failed 2>/dev/null)" = start-limit-hit ]; then
      echo "Job for crio.service failed because start of the service was attempted too often." >&2; exit 1
    fi
    old=$(cat $S/pid)
    if [ -f $S/failed ]; then touch $S/start
    else
      kill "$old" 2>/dev/null
      while kill -0 "$old" 2>/dev/null; do sleep 0.05; done
    fi
    while [ "$(cat $S/pid)" = "$old" ]; do sleep 0.05; done
    new=$(cat $S/pid)
    while kill -0 "$new" 2>/dev/null && [ ! -e /run/crio/crio.sock ]; do sleep 0.05; done
    if ! kill -0 "$new" 2>/dev/null; then
      echo "Job for crio.service failed because the control process exited with error code." >&2; exit 1
    fi ;;
  *) echo "not stood in for: $*" >&2; exit 1 ;;
esac
`,
};

/** The init: starts the stand-in daemon, and again when it exits (as systemd's Restart= would; not with no-restart after a failure). */
const INIT = `S=/run/crio-standin
mkdir -p $S
while true; do
  rm -f $S/failed
  /usr/libexec/crio-standin-daemon &
  echo $! > $S/pid
  wait $!
  if [ $? -ne 0 ] && [ -f /etc/crio-standin/no-restart ]; then
    echo exit-code > $S/failed
    while [ ! -f $S/start ]; do sleep 0.1; done
    rm -f $S/start
  fi
  sleep 0.2
done`;

/** The distribution's own CRI-O files, which must stay byte for byte. */
export const CRIO_CONF = '# the distribution\'s crio.conf\n[crio]\nlog_dir = "/var/log/crio/pods"\n\n[crio.runtime]\ndefault_runtime = "runc"\n';
export const DEFAULT_DROPIN = '[crio.runtime.runtimes.runc]\nruntime_path = ""\nruntime_type = "oci"\nruntime_root = "/run/runc"\n';
export const KATA_DROPIN = '[crio.runtime.runtimes.kata-qemu]\nruntime_path = "/opt/kata/bin/containerd-shim-kata-v2"\nruntime_type = "vm"\nruntime_root = "/run/vc"\n';

/** Fake CRI-O hosts of one test file: made in `work`, stopped by stopAll. */
export class CrioHosts {
  private readonly hosts: FakeHost[] = [];

  constructor(private readonly work: string) {}

  async host(version: keyof typeof CRIO_VERSION_OUTPUTS, extra: Record<string, string> = {}): Promise<FakeHost> {
    const host = await startFakeHost({
      'var/run': { link: '/run' },
      'usr/bin/crio': this.script('crio', STANDIN.crio),
      'usr/bin/systemctl': this.script('systemctl', STANDIN.systemctl),
      'usr/libexec/crio-standin-daemon': this.script('daemon', STANDIN.daemon),
      'usr/bin/printf': { link: 'busybox' },
      'usr/bin/awk': { link: 'busybox' },
      'usr/lib/systemd/system/crio.service': '[Service]\nType=notify\nExecStart=/usr/bin/crio\nExecReload=/bin/kill -s HUP $MAINPID\n',
      'etc/crio/crio.conf': CRIO_CONF,
      'etc/crio/crio.conf.d/00-default.conf': DEFAULT_DROPIN,
      'etc/crio/crio.conf.d/99-kata-deploy': KATA_DROPIN,
      'etc/crio-standin/version': CRIO_VERSION_OUTPUTS[version],
      ...extra,
    }, INIT);
    this.hosts.push(host);
    await eventually(async () => {
      host.run(['crio', 'status', 'config']);
      return true;
    }, 10_000, () => `the CRI-O stand-in does not serve; its log: ${readIfThere(path.join(host.root, 'run/crio-standin/log'))}`, 100);
    return host;
  }

  /** A fake host of another shape (kept to be stopped with the others). */
  add(host: FakeHost): FakeHost {
    this.hosts.push(host);
    return host;
  }

  async stopAll(): Promise<void> {
    for (const host of this.hosts) await host.stop();
  }

  private script(name: string, text: string): { copy: string; mode: number } {
    const file = path.join(this.work, `${name}-${Math.random().toString(36).slice(2)}`);
    fs.writeFileSync(file, text);
    return { copy: file, mode: 0o755 };
  }
}

const readIfThere = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '(none)');

/** Every file under a folder of the host (relative path → bytes), to compare byte for byte. */
export function snapshot(host: FakeHost, folder: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string) => {
    if (!fs.existsSync(dir)) return;
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else out[path.relative(host.root, full)] = fs.readFileSync(full, 'latin1');
    }
  };
  walk(path.join(host.root, folder));
  return out;
}

/** The reloads and restarts asked of the stand-in systemctl, in order. */
export const systemctlCalls = (host: FakeHost): string[] => {
  const log = path.join(host.root, 'run/crio-standin/systemctl.log');
  return fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter(l => /^(reload|restart) /.test(l)) : [];
};

/** What the stand-in daemon serves now (`crio status config`), parsed. */
export const served = (host: FakeHost): any => parse(host.run(['crio', 'status', 'config']));

export interface CrioBenchOptions {
  /** The private folder's name: `rcm-<name>-`. */
  readonly name: string;
}

export interface CrioBench {
  /** The private folder. */
  readonly work: string;
  /** The installer bundle's path (built in beforeAll). */
  readonly bundle: string;
  /** The artifact server (from beforeAll on). */
  readonly server: ArtifactServer;
  /** The test shim, containerd-shim-rcmtest-v2 (from beforeAll on). */
  readonly shim: { url: string; sha256: string };
  /** The same shim named containerd-shim-rcmtest-v1 (from beforeAll on). */
  readonly v1Shim: { url: string; sha256: string };
  /** The fake CRI-O hosts, stopped after the tests. */
  readonly crio: CrioHosts;
  /** The installer's flags for a CRI-O host: handler rcmtest, no retries, a 5 s health timeout, no gather window; then `extra`. */
  args(host: FakeHost, extra?: string[]): string[];
  /** Fails with the installer's exit code and stderr unless it exited 0. */
  expectOk(r: InstallerRun): void;
}

/**
 * What the CRI-O installer tests set up the same way: an installer bench (installer-bench.ts:
 * a private folder, the bundle, an artifact server serving the test shim), the shim again
 * under a -v1 name, and fake CRI-O hosts. Registers its beforeAll and afterAll hooks; call it
 * at the top of a test file or in a describe block.
 */
export function crioBench(options: CrioBenchOptions): CrioBench {
  const bench = installerBench({ name: options.name, shim: true });
  const crio = new CrioHosts(bench.work);
  let v1Shim: { url: string; sha256: string } | undefined;

  beforeAll(async () => {
    const v1 = await tarGz(bench.work, { 'containerd-shim-rcmtest-v1': shimBinary() });
    v1Shim = { url: bench.server.put('shim-v1.tgz', v1), sha256: sha256(v1) };
  });
  afterAll(() => crio.stopAll());

  return {
    work: bench.work,
    bundle: bench.bundle,
    get server() { return bench.server; },
    get shim() { return bench.shim; },
    get v1Shim() {
      if (!v1Shim) throw new Error('the CRI-O bench has no -v1 shim before beforeAll');
      return v1Shim;
    },
    crio,
    args: (host, extra = []) => [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--handler=rcmtest', '--retries=0', '--health-timeout=5', '--set-gather=0', ...extra],
    expectOk: r => {
      if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
    },
  };
}
