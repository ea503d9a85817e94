/** Exit codes: the controller maps them to the Shim's status without reading logs. */
export enum ExitCode {
  SUCCESS = 0,
  UNEXPECTED = 1,
  BAD_INPUT = 2,
  FETCH_FAILED = 3,
  CONFIG_FAILED = 4,
  RESTART_FAILED_ROLLED_BACK = 5,
  /** containerd did not come back even with the previous config: a human must look. */
  RESTART_FAILED_NOT_ROLLED_BACK = 6,
  /**
   * The runtime's systemd unit was already failed (start-limit-hit, a crash) when the installer
   * started: it changed nothing. Reason ContainerdUnitFailed, or CrioUnitFailed for crio.service.
   */
  CONTAINERD_UNIT_FAILED = 7,
  /** Stopped by SIGTERM before anything on the host changed (128 + 15, as a shell reports it). */
  TERMINATED = 143,
}

/** A failure with a reason (CamelCase, for status conditions) and an exit code. */
export class InstallerError extends Error {
  constructor(readonly exitCode: ExitCode, readonly reason: string, message: string) {
    super(message);
  }
}

export const badInput = (message: string) => new InstallerError(ExitCode.BAD_INPUT, 'InvalidInput', message);
export const fetchFailed = (reason: string, message: string) => new InstallerError(ExitCode.FETCH_FAILED, reason, message);
export const configFailed = (message: string) => new InstallerError(ExitCode.CONFIG_FAILED, 'ContainerdConfigInvalid', message);
