/**
 * The node labels and annotations through which the controller records a shim's state on
 * each node. The constructs use them for the RuntimeClass's node selector and the
 * controller uses them for its bookkeeping: one definition serves both.
 */
export class ShimNodeLabels {
  /** Suffix of every per-shim label prefix. */
  public static readonly DOMAIN = 'shim.runtime.spinkube.dev';

  /**
   * The longest Shim name that maps to a valid label key.
   */
  public static readonly MAX_SHIM_NAME_LENGTH = 253 - '.shim.runtime.spinkube.dev'.length;

  /** The state value: the current or a previous revision of the shim is installed and usable. */
  public static readonly PROVISIONED = 'provisioned';
  /** The state value: an install was started and has not finished. */
  public static readonly PENDING = 'pending';
  /** The state value: the last install failed (see the Shim's status for the reason). */
  public static readonly FAILED = 'failed';
  /** The state value: the shim is being removed from the node. */
  public static readonly UNINSTALLING = 'uninstalling';

  /**
   * The label key that carries a shim's state on a node: `<shimName>.shim.runtime.spinkube.dev/state`.
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
   * The node annotation key that records which revision of the shim is installed:
   * `<shimName>.shim.runtime.spinkube.dev/revision`.
   *
   * @param shimName the Shim object's name
   */
  public static revisionKey(shimName: string): string {
    return `${ShimNodeLabels.prefix(shimName)}/revision`;
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
