// Outcomes of changes made in a change set, left by the installer that restarted containerd
// for the set to each installer of it (in a folder beside the host lock, in /run). Each reads
// its own when it holds the lock again, and removes it.
import * as fs from 'fs';
import * as path from 'path';
import { ExitCode } from './errors';
import { writeAtomically } from './host';

export type Outcome =
  /** containerd came back with the change: its state is written, its clean-up done. */
  | { readonly kind: 'done' }
  /** The set was refused and rolled back: the change is tried again alone. */
  | { readonly kind: 'retry-alone' }
  /** The set was interrupted and undone: the change is made again. */
  | { readonly kind: 'retry' }
  | { readonly kind: 'failed'; readonly exitCode: ExitCode; readonly reason: string; readonly message: string };

/** Outcomes nobody came for (their installer ended) are removed after this long. */
const KEEP_MS = 30 * 60_000;

export class OutcomeBox {
  constructor(private readonly dir: string) {}

  put(owner: string, outcome: Outcome): void {
    fs.mkdirSync(this.dir, { recursive: true });
    this.prune();
    writeAtomically(this.file(owner), JSON.stringify(outcome) + '\n', 0o600);
  }

  peek(owner: string): Outcome | undefined {
    try {
      const value = JSON.parse(fs.readFileSync(this.file(owner), 'utf8'));
      return value && typeof value.kind === 'string' ? value : undefined;
    } catch {
      return undefined;
    }
  }

  take(owner: string): Outcome | undefined {
    const outcome = this.peek(owner);
    fs.rmSync(this.file(owner), { force: true });
    try {
      fs.rmdirSync(this.dir); // when it was the last one
    } catch {
      // others' outcomes are still there, or there was none
    }
    return outcome;
  }

  private file(owner: string): string {
    return path.join(this.dir, `${owner.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
  }

  private prune(): void {
    const now = Date.now();
    for (const name of fs.readdirSync(this.dir)) {
      const file = path.join(this.dir, name);
      try {
        if (now - fs.statSync(file).mtimeMs > KEEP_MS) fs.rmSync(file, { force: true });
      } catch {
        // gone meanwhile
      }
    }
  }
}
