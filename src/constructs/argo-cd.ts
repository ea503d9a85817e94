// Argo CD applies objects by sync wave, lowest first. The CRD and the controller must exist
// before any Shim, and a Shim must not fail Argo CD's dry run while its CRD is missing.

export const SYNC_WAVE_ANNOTATION = 'argocd.argoproj.io/sync-wave';
export const SYNC_OPTIONS_ANNOTATION = 'argocd.argoproj.io/sync-options';
export const SKIP_DRY_RUN = 'SkipDryRunOnMissingResource=true';

export const SyncWave = {
  NAMESPACE: '-3',
  CRD: '-2',
  CONTROLLER: '-1',
  SHIM: '0',
} as const;
