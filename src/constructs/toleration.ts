/** How a toleration matches a taint's value. */
export enum TolerationOperator {
  /** Any value (the toleration gives no value). */
  EXISTS = 'Exists',
  /** The taint's value equals the toleration's. */
  EQUAL = 'Equal',
}

/** The taint effect a toleration tolerates. */
export enum TolerationEffect {
  /** New pods are not scheduled onto the node. */
  NO_SCHEDULE = 'NoSchedule',
  /** The scheduler avoids the node. */
  PREFER_NO_SCHEDULE = 'PreferNoSchedule',
  /** Pods that do not tolerate the taint are evicted. */
  NO_EXECUTE = 'NoExecute',
}

/** A toleration added to pods of the shim's RuntimeClass and to its installer Jobs. */
export interface ShimToleration {
  /**
   * The taint key to tolerate.
   * @default - every key (with operator EXISTS)
   */
  readonly key?: string;
  /**
   * How the taint's value is matched.
   * @default TolerationOperator.EQUAL
   */
  readonly operator?: TolerationOperator;
  /**
   * The taint value to tolerate (operator EQUAL).
   * @default - empty
   */
  readonly value?: string;
  /**
   * The effect tolerated.
   * @default - every effect
   */
  readonly effect?: TolerationEffect;
  /**
   * How long a NO_EXECUTE taint is tolerated, in whole seconds (only with that effect).
   * @default - forever
   */
  readonly tolerationSeconds?: number;
}
