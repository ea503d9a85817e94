// The marks of declared change sets on the host, in <install root>/journal/sets/<id>/.
//
// The controller tells every installer the node's change set it belongs to (--change-set
// <id>/<size>). A written change of the set restarts containerd only once all `size` members
// are accounted for: a member is, once its change is written into the open set (its journal
// names the set), or once it ended without a change there (failed before writing, or had
// nothing to change): it then leaves `<run id>.ended` here. When the set restarts it leaves
// `restarted`, so that a member whose pod starts later waits for nobody. The files are not
// `*.json`: the journals' folder lists only those as journals (ChangeSets.handlers).
import * as fs from 'fs';
import * as path from 'path';
import { onHost, removeAndPrune, writeAtomically } from './host';
import { InstallerOptions } from './options';

const ENDED = '.ended';
const RESTARTED = 'restarted';
/** A set's folder older than this is pruned: its members are long gone (they wait at most --set-wait). */
const PRUNE_AFTER_MS = 3600_000;

export class SetMarks {
  constructor(private readonly o: Pick<InstallerOptions, 'hostRoot' | 'installRoot' | 'setWaitSeconds'>) {}

  /** The folder of set `id`, or of all sets (host paths resolved in this process's view). */
  private dir(id?: string): string {
    return onHost(this.o, path.join(this.o.installRoot, 'journal', 'sets', ...(id === undefined ? [] : [id])));
  }

  /** Run `run` of set `id` ended without a change of its own in the set: nobody waits for it. */
  markEnded(id: string, run: string): void {
    this.write(path.join(this.dir(id), run + ENDED));
  }

  /** Set `id` restarted: a member that comes later is a set of its own. */
  markRestarted(id: string): void {
    this.write(path.join(this.dir(id), RESTARTED));
  }

  restarted(id: string): boolean {
    return fs.existsSync(path.join(this.dir(id), RESTARTED));
  }

  /** How many members of set `id` ended without a change in it. */
  endedCount(id: string): number {
    const dir = this.dir(id);
    return fs.existsSync(dir) ? fs.readdirSync(dir).filter(f => f.endsWith(ENDED)).length : 0;
  }

  /** Removes the folders of sets nobody touched for an hour (or twice --set-wait, if longer). */
  prune(now = Date.now()): void {
    const root = this.dir();
    if (!fs.existsSync(root)) return;
    const age = Math.max(PRUNE_AFTER_MS, 2 * this.o.setWaitSeconds * 1000);
    for (const id of fs.readdirSync(root)) {
      const dir = path.join(root, id);
      try {
        if (now - fs.statSync(dir).mtimeMs > age) removeAndPrune(this.o, dir);
      } catch {
        // another run pruned it, or wrote into the folders meanwhile: the next run looks again
      }
    }
  }

  /** Written like a journal (fsynced, renamed into place); again when a pruning run removed the folder meanwhile. */
  private write(file: string): void {
    for (let attempt = 0; ; attempt++) {
      try {
        writeAtomically(file, new Date().toISOString() + '\n', 0o600);
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || attempt >= 3) throw e;
      }
    }
  }
}
