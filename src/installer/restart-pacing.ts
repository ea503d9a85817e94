// Restarts of containerd's unit paced within the unit's own start limit.
//
// systemd refuses a unit's start once it was started StartLimitBurst times within
// StartLimitIntervalSec (defaults 5 in 10 s, which Debian's and containerd's own units keep):
// the unit ends `failed` with Result=start-limit-hit and Restart=always does not bring it back.
// Several installers on one node (a new node, a wave of Shims) each restarting containerd hit
// that within a second. So every restart is recorded in a file beside the host lock (tmpfs:
// gone at reboot, like systemd's own counter) and the next one waits until the window holds a
// spare start for systemd itself (a crash's automatic restart, an admin). The limits are read
// from systemd, never changed, and the failure counter is never reset: a unit found failed is
// reported to a human, not hidden.
import * as fs from 'fs';
import * as path from 'path';
import { writeAtomically } from './host';

/** A unit's start limit as systemd reports it. */
export interface StartLimit {
  /** Starts allowed within the interval. */
  readonly burst: number;
  /** The interval in milliseconds; 0: no limit. */
  readonly intervalMs: number;
}

/** Slack added to the window: a restart counted by systemd a little later than we wrote it down. */
const WINDOW_SLACK_MS = 500;

/** systemd's time spans as `systemctl show` prints them ("10s", "1min 30s", "500ms", "infinity"). */
export function parseTimespanMs(text: string): number | undefined {
  const t = text.trim();
  if (t === 'infinity') return Number.POSITIVE_INFINITY;
  if (t === '0' || t === '') return 0;
  const units: Record<string, number> = {
    us: 0.001,
    usec: 0.001,
    ms: 1,
    msec: 1,
    s: 1000,
    sec: 1000,
    min: 60_000,
    m: 60_000,
    h: 3_600_000,
    hr: 3_600_000,
    d: 86_400_000,
    w: 604_800_000,
  };
  let total = 0;
  let rest = t;
  const part = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)/;
  while (rest.trim() !== '') {
    const m = part.exec(rest);
    if (!m || units[m[2]] === undefined) return undefined;
    total += Number(m[1]) * units[m[2]];
    rest = rest.slice(m[0].length);
  }
  return total;
}

/** `systemctl show -p A -p B` output as a record. */
export function parseShow(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

/** The start limit from `systemctl show -p StartLimitBurst -p StartLimitIntervalUSec`; undefined when it does not say. */
export function startLimitOf(show: Record<string, string>): StartLimit | undefined {
  const burst = Number(show.StartLimitBurst);
  const intervalMs = parseTimespanMs(show.StartLimitIntervalUSec ?? '');
  if (!Number.isInteger(burst) || intervalMs === undefined) return undefined;
  return { burst, intervalMs: Number.isFinite(intervalMs) ? intervalMs : 0 };
}

/**
 * When the next restart may run, given the starts already made (epoch ms) and the limit:
 * `now` when the window has room, else the moment the oldest start that fills it leaves the
 * window. One start of the burst is left to systemd (Restart=always after a crash, an
 * admin) unless the burst is 1.
 */
export function nextRestartAt(starts: readonly number[], limit: StartLimit | undefined, now: number): number {
  if (!limit || limit.intervalMs <= 0 || limit.burst <= 0) return now;
  const allowed = Math.max(1, limit.burst - 1);
  const window = limit.intervalMs + WINDOW_SLACK_MS;
  const recent = starts.filter(t => t > now - window).sort((a, b) => a - b);
  if (recent.length < allowed) return now;
  // The (recent.length - allowed + 1)-th oldest must leave the window for one more start to fit.
  return recent[recent.length - allowed] + window;
}

/** Starts kept in the history: those that can still matter for any limit. */
const HISTORY_KEEP_MS = 10 * 60_000;

/** The restart history of a unit (epoch ms), in the file beside the host lock. */
export class RestartHistory {
  constructor(private readonly file: string) {}

  read(): number[] {
    try {
      const value = JSON.parse(fs.readFileSync(this.file, 'utf8'));
      return Array.isArray(value?.starts) ? value.starts.filter((t: unknown) => typeof t === 'number') : [];
    } catch {
      return [];
    }
  }

  /** Records a start at `at`; only under the host lock (one writer at a time). */
  record(at: number): void {
    const starts = [...this.read().filter(t => t > at - HISTORY_KEEP_MS), at];
    fs.mkdirSync(path.dirname(this.file), { recursive: true });
    writeAtomically(this.file, JSON.stringify({ starts }) + '\n', 0o600);
  }
}

/** The history file's host path for an install root (beside the host lock, in /run). */
export function restartHistoryPath(lockFile: string): string {
  return lockFile.replace(/\.lock$/, '') + '.restarts.json';
}

/** What `systemctl show` says of a unit's state, when it is failed; undefined when it is not. */
export function unitFailure(show: Record<string, string>): string | undefined {
  if (show.ActiveState !== 'failed') return undefined;
  return `${show.Result && show.Result !== 'success' ? show.Result : 'failed'}`;
}
