/**
 * The node labels and annotations through which the controller records a shim's state on
 * each node, and the RuntimeClass annotation that lets a Shim adopt a synthesized
 * RuntimeClass. The constructs use them for the RuntimeClass's node selector and the
 * controller for its bookkeeping: one definition serves both.
 *
 * Per Shim and node:
 * - label `<shim>.shim.runtime.spinkube.dev/handler`: the runtime handler that is installed
 *   and registered on the node. This is the scheduling gate: the Shim's RuntimeClass selects
 *   `handler=<its handler>`, so it never selects a node that lacks its handler.
 * - label `<shim>.shim.runtime.spinkube.dev/state`: a summary for people and tools
 *   (`provisioned`, `retrying`, `failed`, `uninstalling`).
 * - annotation `<shim>.shim.runtime.spinkube.dev/installed`: JSON list of what is installed,
 *   newest first: `[{"handler","revision","sha256","bootID"}]`. Uninstall removes exactly this.
 * - annotation `<shim>.shim.runtime.spinkube.dev/failure`: JSON of the last failed operation
 *   while it is being retried (operation, handler, revision, attempt, reason, message, at).
 */
export class ShimNodeLabels {
  /** Suffix of every per-shim label prefix. */
  public static readonly DOMAIN = 'shim.runtime.spinkube.dev';

  /**
   * The longest Shim name that maps to a valid label key.
   */
  public static readonly MAX_SHIM_NAME_LENGTH = 253 - '.shim.runtime.spinkube.dev'.length;

  /** The state value: a revision of the shim is installed and its last operation succeeded. */
  public static readonly PROVISIONED = 'provisioned';
  /** The state value: the last operation failed and is retried after a backoff. */
  public static readonly RETRYING = 'retrying';
  /** The state value: the operation failed as often as the controller allows, which stops the rollout (see the Shim's status). */
  public static readonly FAILED = 'failed';
  /** The state value: the node is no longer selected (or the Shim is deleted) and the shim is being removed. */
  public static readonly UNINSTALLING = 'uninstalling';

  /**
   * The annotation on a RuntimeClass that lets the Shim of that name adopt it (the
   * constructs set it on the RuntimeClass they synthesize). A RuntimeClass without it that
   * the Shim does not own is never touched.
   */
  public static readonly ADOPT_ANNOTATION = 'runtime.spinkube.dev/shim';

  /**
   * The label key whose value is the runtime handler installed on a node:
   * `<shimName>.shim.runtime.spinkube.dev/handler`. The RuntimeClass selects nodes by it.
   *
   * @param shimName the Shim object's name
   * @throws when the name cannot form a valid label prefix
   */
  public static handlerKey(shimName: string): string {
    return `${ShimNodeLabels.prefix(shimName)}/handler`;
  }

  /**
   * The label key that summarizes a shim's state on a node: `<shimName>.shim.runtime.spinkube.dev/state`.
   *
   * The Shim name becomes the key's DNS prefix, so any name that is a DNS subdomain short
   * enough to leave room for the suffix maps to a distinct, valid key.
   *
   * @param shimName the Shim object's name
   * @throws when the name cannot form a valid label prefix
   */
  public static stateKey(shimName: string): string {
    return `${ShimNodeLabels.prefix(shimName)}/state`;
  }

  /**
   * The node annotation key that records what is installed on the node (JSON, newest
   * first): `<shimName>.shim.runtime.spinkube.dev/installed`.
   *
   * @param shimName the Shim object's name
   */
  public static installedKey(shimName: string): string {
    return `${ShimNodeLabels.prefix(shimName)}/installed`;
  }

  /**
   * The node annotation key that records the last failed operation while it is retried:
   * `<shimName>.shim.runtime.spinkube.dev/failure`.
   *
   * @param shimName the Shim object's name
   */
  public static failureKey(shimName: string): string {
    return `${ShimNodeLabels.prefix(shimName)}/failure`;
  }

  private static prefix(shimName: string): string {
    const prefix = `${shimName}.${ShimNodeLabels.DOMAIN}`;
    const labelPart = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
    if (shimName.length === 0 || shimName.length > ShimNodeLabels.MAX_SHIM_NAME_LENGTH
      || !shimName.split('.').every(part => part.length <= 63 && labelPart.test(part))) {
      throw new Error(`Shim name "${shimName}" cannot form a node label prefix: it must be a DNS subdomain of at most ${ShimNodeLabels.MAX_SHIM_NAME_LENGTH} characters`);
    }
    return prefix;
  }

  private constructor() {}
}
