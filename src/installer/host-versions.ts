// A handler's files on the host, one folder per version (named by the artifact's sha256): where
// a version goes, whether it is there intact, writing it (read back from the disk before the
// config may name it), and removing versions nothing uses any more. A new version never
// overwrites a binary that running pods use. Shared by the install flow (install.ts) and the
// CRI-O branch (crio-node.ts); the config's backups are here too (ConfigBackups).
import * as fs from 'fs';
import * as path from 'path';
import { ShimBinary, treeDigest, treeFiles } from './artifact';
import { ChangeSets } from './change-set';
import { ExitCode, InstallerError } from './errors';
import { onHost, removeAndPrune, sha256Of, syncFolder, writeVerified } from './host';
import { InstallerOptions } from './options';
import { parseState } from './state';
import { Logger } from '../shared/log';

/** A downloaded, verified and unpacked artifact (in the installer's scratch folder), or the intact installed copy of one. */
export interface Fetched {
  readonly url: string;
  /** The artifact's sha256 (what --sha256 names). */
  readonly sha256: string;
  /** The shim binary's own sha256 (what the installed file must hash to). */
  readonly binarySha256: string;
  readonly shim: ShimBinary;
  /** A payload of several files: its unpacked folder and content digest. */
  readonly payload?: { readonly dir: string; readonly digest: string };
}

type Options = Pick<InstallerOptions, 'hostRoot' | 'installRoot' | 'handler' | 'payloadShim'>;

/** Where this handler's binaries live, one folder per version (a host path). */
export function shimsDir(o: Options): string {
  return path.join(o.installRoot, 'shims', o.handler);
}

/** Where this handler's payloads live, one folder per version (a host path). */
export function payloadsDir(o: Options): string {
  return path.join(o.installRoot, 'payloads', o.handler);
}

/** Where an artifact of this sha256 is installed: its versioned binary, and the payload folder of a payload. */
export function versionPaths(o: Options, sha256: string, shimFileName: string): { binary: string; payloadDir?: string } {
  const version = sha256.slice(0, 16);
  const payloadDir = o.payloadShim !== undefined ? path.join(payloadsDir(o), version) : undefined;
  return { binary: payloadDir ? path.join(payloadDir, o.payloadShim!) : path.join(shimsDir(o), version, shimFileName), payloadDir };
}

/** Whether a host path lies in one of our payload folders (of any handler). */
export function isPayload(o: Pick<InstallerOptions, 'installRoot'>, hostPath: string): boolean {
  return hostPath.startsWith(path.join(o.installRoot, 'payloads') + '/');
}

/**
 * Whether a process on the host runs a program from `folder` (given as the host sees it and
 * as this process sees it). The installer runs with the host's PID namespace, so /proc
 * lists the host's processes: a pod's shim, or runsc that a shim runs again for every
 * container operation, keeps its payload in use.
 */
function folderInUse(hostFolder: string, localFolder: string): number | undefined {
  let pids: string[];
  try {
    pids = fs.readdirSync('/proc').filter(p => /^[0-9]+$/.test(p));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    let exe: string;
    try {
      exe = fs.readlinkSync(`/proc/${pid}/exe`);
    } catch {
      continue; // gone, or a kernel thread
    }
    if (exe.startsWith(hostFolder + '/') || exe.startsWith(localFolder + '/')) return Number(pid);
  }
  return undefined;
}

/** The versions of this run's handler on the host; what it changes is added to `changed`. */
export class HostVersions {
  constructor(private readonly o: InstallerOptions, private readonly log: Logger, private readonly changed: string[],
    private readonly sets: ChangeSets) {}

  /** Where an artifact of this sha256 is installed (see versionPaths). */
  paths(sha256: string, shimFileName: string): { binary: string; payloadDir?: string } {
    return versionPaths(this.o, sha256, shimFileName);
  }

  isPayload(hostPath: string): boolean {
    return isPayload(this.o, hostPath);
  }

  /** Whether this version's binary (or payload folder) is on the host already, and whether it holds other bytes (damage). */
  inspect(fetched: Fetched, binary: string, payloadDir: string | undefined): { exists: boolean; damaged: boolean } {
    const binaryOnHost = onHost(this.o, binary);
    const versionOnHost = payloadDir ? onHost(this.o, payloadDir) : path.dirname(binaryOnHost);
    const exists = payloadDir ? fs.existsSync(versionOnHost) : fs.existsSync(binaryOnHost);
    // Other bytes at our versioned path are damage (a truncated or edited file): rewrite them.
    const damaged = exists && (fetched.payload
      ? treeDigest(versionOnHost) !== fetched.payload.digest
      : sha256Of(binaryOnHost) !== fetched.binarySha256);
    return { exists, damaged };
  }

  /** Writes this version's binary (or payload) unless it is there intact; on failure what this created goes and the journal is cleared. */
  async write(fetched: Fetched, binary: string, payloadDir: string | undefined, exists: boolean, damaged: boolean): Promise<void> {
    const o = this.o;
    const { shim } = fetched;
    const binaryOnHost = onHost(o, binary);
    const versionOnHost = payloadDir ? onHost(o, payloadDir) : path.dirname(binaryOnHost);
    // Undo removes exactly the folders this install created (never a repaired binary).
    let createdForBinary: string | undefined;
    const undoBinary = () => {
      if (createdForBinary) removeAndPrune(o, createdForBinary);
    };
    if (fetched.payload && (!exists || damaged)) {
      createdForBinary = this.writePayload(fetched.payload.dir, versionOnHost, fetched.payload.digest, damaged);
      this.changed.push(`${damaged ? 'repaired' : 'installed'} ${payloadDir} (${treeFiles(fetched.payload.dir).length} files)`);
    } else if (!exists || damaged) {
      if (!exists) createdForBinary = fs.mkdirSync(path.dirname(binaryOnHost), { recursive: true }) ?? path.dirname(binaryOnHost);
      // The shim's bytes (their sha256 is binarySha256; a payload's shim, a file, goes with its
      // payload above): the file must read back as them.
      let misread: string | undefined;
      try {
        misread = await writeVerified(binaryOnHost, shim.data ?? fs.readFileSync(shim.file), 0o755);
      } catch (e) {
        // A full disk or an I/O error: what this run created goes, and the node is as it was.
        undoBinary();
        this.sets.clear(o.handler);
        throw new InstallerError(ExitCode.UNEXPECTED, 'BinaryWriteFailed', `${binary} could not be written: ${(e as Error).message}`);
      }
      if (misread !== undefined) {
        undoBinary();
        this.sets.clear(o.handler);
        throw new InstallerError(ExitCode.UNEXPECTED, 'BinaryWriteFailed',
          `${binary} reads back with sha256 ${misread}, not the shim's ${fetched.binarySha256}: the host's disk did not keep what was written`);
      }
      // The new folders' entries too, up to the first folder that was there before.
      const stop = createdForBinary && path.dirname(createdForBinary);
      for (let d = path.dirname(binaryOnHost); stop && d !== stop; d = path.dirname(d)) syncFolder(path.dirname(d));
      this.changed.push(`${damaged ? 'repaired' : 'installed'} ${binary}`);
    }
  }

  /**
   * Copies an unpacked payload to its versioned folder: written beside it, synced, checked
   * against its digest and renamed into place, so the folder is either whole or absent. A
   * damaged folder is moved aside (processes may still run from it) and collected later.
   * Returns the topmost folder this created (what an undo removes).
   */
  private writePayload(source: string, target: string, digest: string, damaged: boolean): string {
    const parent = path.dirname(target);
    const created = fs.mkdirSync(parent, { recursive: true });
    const temporary = `${target}.partial-${process.pid}`;
    fs.rmSync(temporary, { recursive: true, force: true });
    fs.cpSync(source, temporary, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
    for (const rel of treeFiles(temporary)) {
      const file = path.join(temporary, rel);
      if (fs.lstatSync(file).isFile()) {
        const fd = fs.openSync(file, 'r');
        fs.fsyncSync(fd);
        fs.closeSync(fd);
      }
    }
    const written = treeDigest(temporary);
    if (written !== digest) {
      fs.rmSync(temporary, { recursive: true, force: true });
      if (created) fs.rmSync(created, { recursive: true, force: true });
      throw new InstallerError(ExitCode.UNEXPECTED, 'BinaryWriteFailed',
        `the payload copied to ${temporary} reads back with another content digest: the host's disk did not keep what was written`);
    }
    if (damaged) fs.renameSync(target, `${target}.damaged-${Date.now()}`);
    fs.renameSync(temporary, target);
    syncFolder(parent);
    return created ?? target;
  }

  /**
   * Removes payload versions no config refers to any more (neither this handler's current
   * one nor another handler's) once no process on the host runs from them; those still in
   * use stay for a later run. Old runsc or kata binaries must outlive their pods: a shim
   * runs them again to stop or delete a container.
   */
  collectPayloads(): void {
    const root = path.join(this.o.installRoot, 'payloads');
    const rootOnHost = onHost(this.o, root);
    if (!fs.existsSync(rootOnHost)) return;
    for (const handler of fs.readdirSync(rootOnHost)) {
      const stateOf = onHost(this.o, path.join(this.o.installRoot, 'state', `${handler}.json`));
      const parsed = fs.existsSync(stateOf) ? parseState(fs.readFileSync(stateOf, 'utf8'), handler, stateOf) : undefined;
      // An unreadable record of another handler: its payloads are left alone.
      if (parsed?.problem) continue;
      const current = parsed?.state?.payloadDir;
      if (fs.existsSync(onHost(this.o, this.sets.journalFile(handler)))) continue;
      for (const version of fs.readdirSync(path.join(rootOnHost, handler))) {
        const hostFolder = path.join(root, handler, version);
        if (hostFolder === current) continue;
        const pid = folderInUse(hostFolder, onHost(this.o, hostFolder));
        if (pid !== undefined) {
          this.log.info('an old payload stays while a process runs from it', { payload: hostFolder, pid });
          continue;
        }
        removeAndPrune(this.o, onHost(this.o, hostFolder));
        this.changed.push(`removed unused payload ${hostFolder}`);
      }
    }
  }

  /** Removes a previous version's binary folder. */
  remove(binary: string): void {
    // Unlinking is safe for running shims (they keep the inode); only overwriting is not.
    removeAndPrune(this.o, path.dirname(onHost(this.o, binary)));
    this.changed.push(`removed previous version ${binary}`);
  }
}

/** The config as it was before each change of this handler: saved before the edit, five kept. */
export class ConfigBackups {
  constructor(private readonly o: InstallerOptions) {}

  /** Where the config as it was before this edit is saved (a host path). */
  path(): string {
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    return path.join(this.o.installRoot, 'backups', this.o.handler, `${stamp}-${path.basename(this.o.config ?? 'config.toml')}`);
  }

  /** Saves the file as it was before this edit at `hostFile` (an undo removes it, and the folders it made). */
  save(text: string, hostFile: string): void {
    const file = onHost(this.o, hostFile);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text, { mode: 0o600 });
  }

  /** Keeps the five newest backups; run only after a change succeeded. */
  rotate(): void {
    const dir = onHost(this.o, path.join(this.o.installRoot, 'backups', this.o.handler));
    if (!fs.existsSync(dir)) return;
    const backups = fs.readdirSync(dir).sort();
    for (const old of backups.slice(0, Math.max(0, backups.length - 5))) fs.rmSync(path.join(dir, old), { force: true });
  }
}
