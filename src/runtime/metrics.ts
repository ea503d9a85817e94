import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { ShimStatus } from './types';

/** The controller's Prometheus metrics, in a registry of its own. */
export class Metrics {
  readonly registry = new Registry();
  readonly reconciles = new Counter({ name: 'rcm_reconciles_total', help: 'Reconciles by result', labelNames: ['result'], registers: [this.registry] });
  readonly installs = new Counter({ name: 'rcm_node_installs_total', help: 'Finished node installs by outcome', labelNames: ['outcome'], registers: [this.registry] });
  readonly queueDepth = new Gauge({ name: 'rcm_queue_depth', help: 'Shims waiting in the work queue', registers: [this.registry] });
  readonly rollout = new Gauge({ name: 'rcm_rollout_nodes', help: 'Nodes per Shim by state', labelNames: ['shim', 'state'], registers: [this.registry] });
  readonly apiWrites = new Counter({ name: 'rcm_api_writes_total', help: 'Writes to the API server by verb', labelNames: ['verb'], registers: [this.registry] });
  readonly leader = new Gauge({ name: 'rcm_leader', help: '1 when this replica leads', registers: [this.registry] });

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  observeRollout(shim: string, status: ShimStatus): void {
    this.rollout.set({ shim, state: 'selected' }, status.nodes);
    this.rollout.set({ shim, state: 'ready' }, status.nodesReady);
    this.rollout.set({ shim, state: 'failed' }, status.nodesFailed);
  }
}
