// The outcomes of one change set (the requests the node agent started together, which
// containerd took in one restart) are written to the Node in one patch. Each Node write is a
// watch event for every watcher of Nodes (the controller, the scheduler, each node's daemons):
// a change set of three Shims was three of them, one per outcome, a moment apart. An outcome
// waits for the rest of its change set only so long (REPORT_LINGER_MS after the first): a
// member that takes longer (one Shim's request chained behind that Shim's previous one, a
// kubelet slow to list a handler) writes its own later.
import { RecordPatch } from '../shared/agent-protocol';

/** One outcome (or progress) report: its Shim's keys on the Node. */
export interface NodeReport {
  readonly shim: string;
  /** The request it is about, and its phase (for logs). */
  readonly request: string;
  readonly phase: string;
  /** The Shim's result annotation, with its record after a success. */
  readonly patch: RecordPatch;
  /** Checked before each attempt to write: a report of a request withdrawn meanwhile is not written, however late. */
  readonly stillWanted: () => boolean;
}

/** Writes reports in one patch (trying again as it sees fit); resolves once written or all withdrawn. */
export type ReportWriter = (reports: readonly NodeReport[]) => Promise<void>;

/** How long an outcome waits for the others of its change set at most. */
export const REPORT_LINGER_MS = 2000;

/**
 * One change set's reports. Its members (the requests started together, by id) each either
 * report once or leave (no outcome to write: withdrawn before it started, the agent stopping);
 * the reports are written together once no member is still open, or `lingerMs` after the
 * first report, whichever is first. Reports that come after that are written as they come.
 * Where the write of several fails, each is written alone: one report's failure is its own.
 */
export class ChangeSetReports {
  private readonly open: Set<string>;
  private waiting: { report: NodeReport; written: () => void; failed: (e: unknown) => void }[] = [];
  private lingerTimer?: NodeJS.Timeout;
  private flushed = false;

  constructor(members: Iterable<string>, private readonly write: ReportWriter, private readonly lingerMs = REPORT_LINGER_MS) {
    this.open = new Set(members);
  }

  /** `member`'s outcome; resolves once written (or withdrawn), rejects where the write failed. */
  report(member: string, report: NodeReport): Promise<void> {
    if (this.flushed || !this.open.delete(member)) return this.write([report]);
    const written = new Promise<void>((resolve, reject) => this.waiting.push({ report, written: resolve, failed: reject }));
    if (this.open.size === 0) this.flush();
    else this.lingerTimer ??= setTimeout(() => this.flush(), this.lingerMs);
    return written;
  }

  /** `member` writes no outcome: the others do not wait for it. A member that reported already is not affected. */
  leave(member: string): void {
    if (!this.open.delete(member) || this.flushed) return;
    if (this.open.size === 0 && this.waiting.length > 0) this.flush();
  }

  private flush(): void {
    if (this.lingerTimer) clearTimeout(this.lingerTimer);
    this.flushed = true;
    const waiting = this.waiting;
    this.waiting = [];
    this.write(waiting.map(w => w.report)).then(() => waiting.forEach(w => w.written()), e => {
      // One report may be what the API server refused (a label value, the size of the
      // annotations): the others are not failed with it, each is tried alone.
      if (waiting.length === 1) waiting[0].failed(e);
      else for (const w of waiting) this.write([w.report]).then(w.written, w.failed);
    });
  }
}

/**
 * The reports as one merge patch. Reports of different Shims touch different keys; of one Shim,
 * the later one's keys win, as its own later write would.
 */
export function mergedPatch(reports: readonly NodeReport[]): { metadata: { labels?: Patch; annotations: Patch } } {
  let labels: Patch | undefined;
  const annotations: Patch = {};
  for (const { patch } of reports) {
    if (Object.keys(patch.labels).length > 0) labels = { ...labels, ...patch.labels };
    Object.assign(annotations, patch.annotations);
  }
  return { metadata: { ...(labels ? { labels } : {}), annotations } };
}

/** Keys of a merge patch: null removes. */
type Patch = Record<string, string | null>;
