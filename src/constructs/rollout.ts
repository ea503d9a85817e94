/**
 * How many nodes may install a shim at the same time during a rolling rollout.
 */
export class MaxUpdate {
  /**
   * At most `nodes` nodes at a time.
   * @param nodes a whole number, at least 1
   */
  public static count(nodes: number): MaxUpdate {
    if (!Number.isInteger(nodes) || nodes < 1) {
      throw new Error(`rollout.maxUpdate: count must be a whole number >= 1, got ${nodes}`);
    }
    return new MaxUpdate(nodes);
  }

  /**
   * At most this percentage of the selected nodes at a time (rounded up, at least one node).
   * @param percentage a whole number from 1 to 100
   */
  public static percent(percentage: number): MaxUpdate {
    if (!Number.isInteger(percentage) || percentage < 1 || percentage > 100) {
      throw new Error(`rollout.maxUpdate: percentage must be a whole number from 1 to 100, got ${percentage}`);
    }
    return new MaxUpdate(`${percentage}%`);
  }

  private constructor(private readonly value: number | string) {}

  /**
   * The value as written in the Shim spec: a number or a string like "10%".
   * @internal
   */
  public _toKube(): number | string {
    return this.value;
  }
}

/** Options of a rolling rollout. */
export interface RollingRolloutOptions {
  /**
   * How many nodes install at a time, the next batch starting only when the previous one
   * succeeded.
   * @default MaxUpdate.count(1)
   */
  readonly maxUpdate?: MaxUpdate;
}

/**
 * How a shim is rolled out over the selected nodes (the Shim's `spec.rolloutStrategy`).
 */
export class Rollout {
  /** Install on every selected node at once. */
  public static recreate(): Rollout {
    return new Rollout('recreate');
  }

  /** Install on a limited number of nodes at a time. */
  public static rolling(options: RollingRolloutOptions = {}): Rollout {
    return new Rollout('rolling', options.maxUpdate ?? MaxUpdate.count(1));
  }

  private constructor(private readonly type: string, private readonly maxUpdate?: MaxUpdate) {}

  /**
   * The `spec.rolloutStrategy` object.
   * @internal
   */
  public _toKube(): { type: string; rolling?: { maxUpdate: number | string } } {
    return this.maxUpdate
      ? { type: this.type, rolling: { maxUpdate: this.maxUpdate._toKube() } }
      : { type: this.type };
  }
}

/** How the node installer restarts containerd (the Shim's `spec.restart.mode`). */
export enum ContainerdRestartMode {
  /** `systemctl restart <unit>` on the host. */
  SYSTEMD = 'systemd',
  /** A host command. */
  COMMAND = 'command',
  /** No restart. */
  NONE = 'none',
}

/**
 * How the node installer restarts containerd after editing its configuration.
 */
export class ContainerdRestart {
  /** `systemctl restart <unit>` on the host, the unit chosen per distribution. */
  public static systemd(): ContainerdRestart {
    return new ContainerdRestart(ContainerdRestartMode.SYSTEMD);
  }

  /**
   * A host command that restarts containerd (run in the host's namespaces).
   * @param command the command line, for example `/usr/local/bin/restart-containerd`
   */
  public static command(command: string): ContainerdRestart {
    if (command.trim().length === 0) {
      throw new Error('restart: the restart command must not be empty');
    }
    return new ContainerdRestart(ContainerdRestartMode.COMMAND, command);
  }

  /** Do not restart (k0s reloads by itself, or the operator restarts separately). */
  public static none(): ContainerdRestart {
    return new ContainerdRestart(ContainerdRestartMode.NONE);
  }

  private constructor(
    /** The restart mode. */
    public readonly mode: ContainerdRestartMode,
    /** The restart command, for mode command. */
    public readonly restartCommand?: string,
  ) {}

  /**
   * The `spec.restart` object.
   * @internal
   */
  public _toKube(): { mode: string; command?: string } {
    return this.restartCommand ? { mode: this.mode, command: this.restartCommand } : { mode: this.mode };
  }
}
