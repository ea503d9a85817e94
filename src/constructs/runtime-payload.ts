// The shape of a runtime beyond one shim binary: several files installed together, the
// handler-level fields containerd reads beside the options, and RuntimeClass overheads.

/**
 * A payload of several files (a `.tar.gz`), installed on each node as one versioned folder
 * that is switched atomically: gVisor's runsc beside its shim, Kata's whole tree, a crun
 * binary with its runc shim. Runtime options name its files as `${PAYLOAD}/<path>`.
 */
export interface ShimPayload {
  /**
   * Path of the shim binary inside the payload.
   * @example 'bin/containerd-shim-runc-v2'
   */
  readonly shim: string;
  /**
   * The runtime type the shim implements. containerd then gets the shim as `runtime_path`
   * and passes that type's options, e.g. runc's `BinaryName` for a runc shim that drives
   * runsc or crun (containerd 1.x hands a shim given by path only generic options).
   * @example 'io.containerd.runc.v2'
   * @default - the shim's installed path is the runtime type
   */
  readonly runtimeType?: string;
}

/** containerd's handler-level fields beside the options, as Kata, gVisor and GPU runtimes set them. */
export interface ContainerdHandlerSettings {
  /**
   * Pod annotations (keys or globs) passed to the runtime (`pod_annotations`).
   * @default - none
   */
  readonly podAnnotations?: string[];
  /**
   * Container annotations (keys or globs) passed to the runtime (`container_annotations`).
   * @default - none
   */
  readonly containerAnnotations?: string[];
  /**
   * Privileged pods of this handler do not get the host's devices
   * (`privileged_without_host_devices`), as VM-based runtimes need.
   * @default false
   */
  readonly privilegedWithoutHostDevices?: boolean;
  /**
   * Snapshotter of this handler's containers (containerd 1.7 and later; older nodes refuse it).
   * @default - containerd's default snapshotter
   */
  readonly snapshotter?: string;
}

/**
 * RuntimeClass overheads to start from, as the runtimes' own deployments publish them.
 *
 * Pass one as a Shim's `overhead`, or measure your own workloads and set yours.
 */
export class RuntimeOverhead {
  /** Kata Containers with QEMU (kata-deploy's RuntimeClass `kata-qemu`). */
  public static readonly KATA_QEMU: { [resource: string]: string } = { memory: '160Mi', cpu: '250m' };
  /** Kata Containers with Cloud Hypervisor (kata-deploy's `kata-clh`). */
  public static readonly KATA_CLH: { [resource: string]: string } = { memory: '130Mi', cpu: '250m' };
  /** Kata Containers with Firecracker (kata-deploy's `kata-fc`). */
  public static readonly KATA_FC: { [resource: string]: string } = { memory: '130Mi', cpu: '250m' };

  private constructor() {}
}
