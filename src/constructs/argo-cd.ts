import * as fs from 'fs';
import * as path from 'path';
import { findUp } from './metadata';

/**
 * Argo CD sync waves of the objects this library synthesizes. Argo CD applies lower waves
 * first and waits for each wave to be healthy before the next; it deletes (an Application
 * deletion, and a prune during sync since Argo CD 2.9) in the reverse order, waiting for each
 * wave to be gone. The defaults put every object of this library below Argo CD's default
 * wave 0, so workloads without a wave start only once their Shims are installed, and the
 * Shims are deleted (and uninstalled by the controller) before the controller goes.
 */
export interface SyncWaves {
  /**
   * Wave of the controller's Namespace.
   * @default SyncWaves.DEFAULT_NAMESPACE (-40)
   */
  readonly namespace?: number;
  /**
   * Wave of the Shim CustomResourceDefinition.
   * @default SyncWaves.DEFAULT_DEFINITION (-30)
   */
  readonly definition?: number;
  /**
   * Wave of the controller: ServiceAccount, RBAC, Deployment and the objects beside it.
   * @default SyncWaves.DEFAULT_CONTROLLER (-20)
   */
  readonly controller?: number;
  /**
   * Wave of the Shims (and of the RuntimeClasses that `createRuntimeClass` synthesizes).
   * @default SyncWaves.DEFAULT_SHIMS (-10)
   */
  readonly shims?: number;
}

/** Argo CD annotations and the Shim health check. */
export class ArgoCd {
  /** The annotation holding an object's sync wave. */
  public static readonly SYNC_WAVE_ANNOTATION = 'argocd.argoproj.io/sync-wave';
  /** The annotation holding an object's sync options. */
  public static readonly SYNC_OPTIONS_ANNOTATION = 'argocd.argoproj.io/sync-options';
  /** The sync option that lets an object skip Argo CD's dry run while its CRD is missing (it comes in the same sync). */
  public static readonly SKIP_DRY_RUN_ON_MISSING_RESOURCE = 'SkipDryRunOnMissingResource=true';
  /** The Namespace's default wave. */
  public static readonly DEFAULT_NAMESPACE_WAVE = -40;
  /** The CRD's default wave. */
  public static readonly DEFAULT_DEFINITION_WAVE = -30;
  /** The controller's default wave. */
  public static readonly DEFAULT_CONTROLLER_WAVE = -20;
  /** The Shims' default wave (and that of RuntimeClasses synthesized with them). */
  public static readonly DEFAULT_SHIMS_WAVE = -10;
  /** The `argocd-cm` key under which Argo CD looks for the Shim kind's health check. */
  public static readonly HEALTH_CHECK_KEY = 'resource.customizations.health.runtime.spinkube.dev_Shim';

  /**
   * The Lua health check of the Shim kind, as Argo CD runs custom health checks: Healthy
   * when the controller has installed the current generation on every selected node,
   * Progressing while it installs (or has not yet seen the generation), Degraded when its
   * Degraded condition is True (failed nodes, an invalid Shim, a RuntimeClass conflict).
   */
  public static get shimHealthCheck(): string {
    return fs.readFileSync(findUp(HEALTH_CHECK_FILE), 'utf8');
  }

  /**
   * The entries to merge into Argo CD's `argocd-cm` ConfigMap so that it uses the Shim
   * health check (`HEALTH_CHECK_KEY` to the Lua script).
   */
  public static healthCheckConfig(): { [key: string]: string } {
    return { [ArgoCd.HEALTH_CHECK_KEY]: ArgoCd.shimHealthCheck };
  }

  /**
   * The waves in effect: the defaults, overridden by `waves`.
   * @param waves overrides
   */
  public static resolveSyncWaves(waves: SyncWaves = {}): SyncWaves {
    const resolved: SyncWaves = {
      namespace: waves.namespace ?? ArgoCd.DEFAULT_NAMESPACE_WAVE,
      definition: waves.definition ?? ArgoCd.DEFAULT_DEFINITION_WAVE,
      controller: waves.controller ?? ArgoCd.DEFAULT_CONTROLLER_WAVE,
      shims: waves.shims ?? ArgoCd.DEFAULT_SHIMS_WAVE,
    };
    for (const [field, wave] of Object.entries(resolved)) {
      if (!Number.isInteger(wave)) throw new Error(`syncWaves.${field}: must be a whole number, got ${wave}`);
    }
    const order = ['namespace', 'definition', 'controller', 'shims'] as const;
    for (let i = 1; i < order.length; i++) {
      if (resolved[order[i]]! <= resolved[order[i - 1]]!) {
        throw new Error(`syncWaves.${order[i]}: must be above syncWaves.${order[i - 1]} (${resolved[order[i - 1]]}), got ${resolved[order[i]]}: ` +
          'Argo CD applies lower waves first and deletes higher waves first');
      }
    }
    return resolved;
  }

  private constructor() {}
}

const HEALTH_CHECK_FILE = path.join('argocd', 'shim-health.lua');
