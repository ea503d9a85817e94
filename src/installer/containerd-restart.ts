// containerd's restart: the unit's state before anything changes, the restart paced within
// the unit's start limit (restart-pacing.ts), and the checks that containerd serves again.
import { ExitCode, InstallerError } from './errors';
import { CommandResult, DistroLayout, HostContext, hostCommand } from './host';
import { InstallerOptions } from './options';
import { nextRestartAt, parseShow, RestartHistory, restartHistoryPath, startLimitOf, unitFailure } from './restart-pacing';
import { Timer } from './timer';
import { Logger } from '../shared/log';

/**
 * Between two health checks after a restart. A check that fails while containerd still
 * starts is asked again soon: a restart is done when containerd serves, not at the next
 * half second.
 */
const HEALTH_POLL_MS = 100;

/** A handler a restart must come back with: its name and the binary its config names. */
export interface HandlerCheck {
  readonly handler: string;
  readonly binary: string;
}

export class ContainerdRestart {
  constructor(protected readonly options: InstallerOptions, protected readonly host: HostContext, protected readonly log: Logger,
    protected readonly timer: Timer, private readonly lockFile: string | undefined) {}

  /**
   * A unit that systemd gave up on (start-limit-hit, or failed) is a human's to look at: the
   * installer neither resets its failure counter nor starts it, and touches nothing.
   */
  async refuseFailedUnit(layout: DistroLayout): Promise<void> {
    if (this.options.restart !== 'systemd' || !layout.unit) return;
    const r = await hostCommand(this.host, ['systemctl', 'show', '-p', 'ActiveState', '-p', 'SubState', '-p', 'Result', layout.unit], 20_000);
    if (r.code !== 0) {
      this.log.warn(`cannot ask systemd for ${layout.unit}'s state`, { error: r.stderr.trim().slice(0, 300) });
      return;
    }
    const failure = unitFailure(parseShow(r.stdout));
    if (!failure) return;
    throw new InstallerError(ExitCode.CONTAINERD_UNIT_FAILED, this.unitFailedReason,
      `${layout.unit}.service is failed (${failure}) on this node and the installer changed nothing: it does not reset systemd's start limit nor start the unit. ` +
      `Find out why (journalctl -u ${layout.unit}), then run 'systemctl reset-failed ${layout.unit} && systemctl start ${layout.unit}'`);
  }

  /** The reason of a unit found failed (exit 7): the runtime's own (CRI-O's in CrioRestart). */
  protected get unitFailedReason(): string {
    return 'ContainerdUnitFailed';
  }

  /**
   * Waits until the unit's start limit has room for one more start, leaving one to systemd
   * (see restart-pacing.ts); records the start. Only for systemd restarts of a unit.
   */
  protected async paceRestart(layout: DistroLayout): Promise<void> {
    if (this.options.restart !== 'systemd' || !layout.unit || !this.lockFile) return;
    const history = new RestartHistory(restartHistoryPath(this.lockFile));
    const r = await hostCommand(this.host, ['systemctl', 'show', '-p', 'StartLimitBurst', '-p', 'StartLimitIntervalUSec',
      '-p', 'ExecMainStartTimestampMonotonic', layout.unit], 20_000);
    const show = r.code === 0 ? parseShow(r.stdout) : {};
    const limit = startLimitOf(show);
    const starts = history.read();
    // The unit's last start, whoever made it (an admin, systemd's own Restart=): CLOCK_MONOTONIC is the host's too.
    const startedMono = Number(show.ExecMainStartTimestampMonotonic);
    if (startedMono > 0) {
      const started = Date.now() - (Number(process.hrtime.bigint() / 1000n) - startedMono) / 1000;
      if (!starts.some(t => Math.abs(t - started) < 1000)) starts.push(started);
    }
    const at = nextRestartAt(starts, limit, Date.now());
    if (at > Date.now()) {
      this.log.info(`pacing: ${layout.unit} allows ${limit!.burst} starts in ${limit!.intervalMs / 1000}s; the restart waits ${((at - Date.now()) / 1000).toFixed(1)}s`);
      await this.timer.time('pacing', () => new Promise(res => setTimeout(res, at - Date.now())));
    }
    history.record(Date.now());
  }

  /**
   * Restarts containerd and waits for it to serve with every handler of `installs` in its
   * effective config; returns what went wrong, or undefined.
   */
  async restartAndCheck(layout: DistroLayout, installs: readonly HandlerCheck[]): Promise<string | undefined> {
    const argv = this.options.restart === 'command'
      ? ['sh', '-c', this.options.restartCommand!]
      : ['systemctl', 'restart', layout.unit ?? 'containerd'];
    await this.paceRestart(layout);
    this.log.info('restarting containerd', { command: argv.join(' ') });
    const r = await this.timer.time('restartCommand', () => hostCommand(this.host, argv));
    if (r.code !== 0) return `restart command exited ${r.code}: ${r.stderr.trim().slice(0, 300)}`;
    const deadline = Date.now() + this.options.healthTimeoutSeconds * 1000;
    let last = 'no answer';
    while (Date.now() < deadline) {
      last = await this.timer.time('health', () => this.health(layout, installs)) ?? '';
      if (last === '') return undefined;
      await new Promise(res => setTimeout(res, HEALTH_POLL_MS));
    }
    return `containerd not healthy after ${this.options.healthTimeoutSeconds}s: ${last}`;
  }

  /**
   * Without a restart: containerd reads its config with every handler of `installs` in it,
   * and (where this installer manages containerd's restarts) the daemon serves CRI. With
   * --restart=none containerd may be down on purpose: only the config is judged.
   */
  async verify(layout: DistroLayout, installs: readonly HandlerCheck[]): Promise<string | undefined> {
    if (this.restarts(layout)) return this.health(layout, installs);
    return judgeDump(await hostCommand(this.host, ['containerd', '--config', layout.effectiveConfig, 'config', 'dump'], 20_000), installs);
  }

  /** Whether this run restarts containerd for changes of this layout. */
  restarts(layout: DistroLayout): boolean {
    return !(this.options.restart === 'none' || (this.options.restart === 'systemd' && !layout.unit));
  }

  /**
   * The three checks run at once: `ctr` waits for the socket to appear by itself (it polls
   * for it every 10 ms), so the two ctr calls return as soon as the daemon serves, and the
   * effective config (a file containerd reads, not a question to the daemon) is read while
   * it starts. Every check must pass, and the first failing one, in this order, is reported.
   */
  private async health(layout: DistroLayout, installs: readonly HandlerCheck[]): Promise<string | undefined> {
    const [version, plugins, dump] = await Promise.all([
      hostCommand(this.host, ['ctr', '--address', layout.socket, 'version'], 10_000),
      hostCommand(this.host, ['ctr', '--address', layout.socket, 'plugins', 'ls'], 10_000),
      installs.length > 0 ? hostCommand(this.host, ['containerd', '--config', layout.effectiveConfig, 'config', 'dump'], 20_000) : undefined,
    ]);
    if (version.code !== 0) return `socket ${layout.socket} does not answer`;
    const cri = plugins.stdout.split('\n').filter(l => /\bcri\b/.test(l));
    if (plugins.code !== 0 || cri.length === 0 || cri.some(l => /\berror\b/.test(l))) return 'the CRI plugin is not running';
    return dump ? judgeDump(dump, installs) : undefined;
  }
}

/** What `containerd config dump` says of these handlers: undefined when it reads the config and names each one's binary. */
function judgeDump(dump: CommandResult, installs: readonly HandlerCheck[]): string | undefined {
  if (dump.code !== 0) return `containerd cannot read its config: ${dump.stderr.trim().slice(0, 300)}`;
  const missing = installs.filter(i => !dump.stdout.includes(i.binary)).map(i => i.handler);
  return missing.length > 0 ? `the effective config does not contain handler ${missing.join(', ')}` : undefined;
}
