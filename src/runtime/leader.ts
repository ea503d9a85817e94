// Leader election on a coordination.k8s.io/v1 Lease, guarded by resourceVersion: one
// replica acts, the others wait; a leader that cannot renew in time steps down.
import { isConflictOrExists, isNotFound, Kube } from '../shared/kube/kube';
import { Logger } from '../shared/log';

export interface LeaseSettings {
  readonly namespace: string;
  readonly name: string;
  readonly identity: string;
  readonly durationSeconds: number;
}

export class LeaderElector {
  private renewTimer?: NodeJS.Timeout;
  private lastRenew = 0;

  constructor(private readonly kube: Kube, private readonly s: LeaseSettings, private readonly log: Logger) {}

  private get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.s.namespace}/leases/${this.s.name}`;
  }

  /** Resolves once this replica holds the lease. */
  async acquire(): Promise<void> {
    for (;;) {
      if (await this.tryAcquireOrRenew()) {
        this.log.info('became leader', { identity: this.s.identity, lease: this.s.name });
        return;
      }
      await new Promise(r => setTimeout(r, Math.max(1000, (this.s.durationSeconds * 1000) / 5)));
    }
  }

  /** Renews until lost; calls onLost once when it cannot renew within the lease duration. */
  keepRenewing(onLost: () => void): void {
    const period = Math.max(500, (this.s.durationSeconds * 1000) / 3);
    this.renewTimer = setInterval(async () => {
      const ok = await this.tryAcquireOrRenew().catch(() => false);
      if (ok) return;
      if (Date.now() - this.lastRenew > this.s.durationSeconds * 1000 * 0.8) {
        this.stop();
        onLost();
      }
    }, period);
  }

  stop(): void {
    if (this.renewTimer) clearInterval(this.renewTimer);
  }

  /** Gives the lease up (clean shutdown), so that another replica takes over at once. */
  async release(): Promise<void> {
    this.stop();
    try {
      const lease = await this.kube.get(this.path);
      if (lease.spec?.holderIdentity !== this.s.identity) return;
      await this.kube.request('PUT', this.path, { ...lease, spec: { ...lease.spec, holderIdentity: '', renewTime: null } });
    } catch {
      // best effort
    }
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date();
    const micro = now.toISOString().replace('Z', '000Z');
    let lease: any;
    try {
      lease = await this.kube.get(this.path);
    } catch (e) {
      if (!isNotFound(e)) throw e;
      try {
        await this.kube.create(`/apis/coordination.k8s.io/v1/namespaces/${this.s.namespace}/leases`, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: this.s.name, namespace: this.s.namespace },
          spec: {
            holderIdentity: this.s.identity, leaseDurationSeconds: this.s.durationSeconds, acquireTime: micro, renewTime: micro, leaseTransitions: 0,
          },
        });
        this.lastRenew = Date.now();
        return true;
      } catch (err) {
        if (isConflictOrExists(err)) return false;
        throw err;
      }
    }
    const spec = lease.spec ?? {};
    const mine = spec.holderIdentity === this.s.identity;
    const renewed = spec.renewTime ? Date.parse(spec.renewTime) : 0;
    const expired = !spec.holderIdentity || renewed + (spec.leaseDurationSeconds ?? this.s.durationSeconds) * 1000 < now.getTime();
    if (!mine && !expired) return false;
    try {
      await this.kube.request('PUT', this.path, {
        ...lease,
        spec: {
          ...spec,
          holderIdentity: this.s.identity,
          leaseDurationSeconds: this.s.durationSeconds,
          renewTime: micro,
          ...(mine ? {} : { acquireTime: micro, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
        },
      });
      this.lastRenew = Date.now();
      return true;
    } catch (e) {
      if (isConflictOrExists(e)) return false; // someone else won the race
      throw e;
    }
  }
}
