import { Duration } from 'cdk8s';
import { ShimToleration } from './toleration';

/** Options of install mode NodeAgent. */
export interface NodeAgentOptions {
  /**
   * How often the agent checks that every handler it installed is still what it installed
   * (binary, payload, config entry). A handler that drifted loses its scheduling gate at
   * once and is installed again through the controller.
   * @default Duration.minutes(1)
   */
  readonly driftCheck?: Duration;
  /**
   * Tolerations of the agent's pods: the nodes whose taints they tolerate get the agent, and
   * so can get Shims at all.
   * @default - none: only untainted nodes (add the taints of the nodes that run Shims)
   */
  readonly tolerations?: ShimToleration[];
  /**
   * CPU request of each agent pod (it is idle but for a change set or a drift check).
   * @default '10m'
   */
  readonly cpuRequest?: string;
  /**
   * CPU limit of each agent pod.
   * @default '500m'
   */
  readonly cpuLimit?: string;
  /**
   * Memory request of each agent pod.
   * @default '96Mi'
   */
  readonly memoryRequest?: string;
  /**
   * Memory limit of each agent pod (a change set streams its artifacts: it does not hold them).
   * @default '512Mi'
   */
  readonly memoryLimit?: string;
}

/**
 * How the controller's operations reach the nodes.
 *
 * - `InstallMode.jobs()`: an installer Job per node and operation (the original
 *   runtime-class-manager's way). No privileged pod stays on the nodes between operations.
 * - `InstallMode.nodeAgent()`: a DaemonSet `rcm-node-agent` (the installer as a long-running
 *   process) carries out what the controller admits on its node through the node record,
 *   all Shims' changes at once with one containerd restart, and repairs drift. The
 *   controller then creates and watches no Jobs nor pods. Artifacts in images need Jobs.
 */
export class InstallMode {
  /** An installer Job per node and operation. */
  public static jobs(): InstallMode {
    return new InstallMode('jobs', {});
  }

  /** A node agent (DaemonSet) per node. */
  public static nodeAgent(options: NodeAgentOptions = {}): InstallMode {
    return new InstallMode('agent', options);
  }

  private constructor(
    /** The controller's `--install-mode`: `jobs` or `agent`. */
    public readonly mode: string,
    /** The node agent's options (install mode NodeAgent). */
    public readonly agent: NodeAgentOptions) {}
}
