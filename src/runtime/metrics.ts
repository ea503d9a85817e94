import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { JobView, ShimStatus } from './types';

const ROLLOUT_STATES = ['selected', 'ready', 'failed'] as const;

/**
 * The controller's Prometheus metrics, in a registry of its own. Names follow Prometheus's
 * conventions: the `rcm_` prefix, `_total` on counters, base units (`_seconds`) on histograms.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly reconciles = new Counter({ name: 'rcm_reconciles_total', help: 'Reconciles by result', labelNames: ['result'], registers: [this.registry] });
  readonly reconcileDuration = new Histogram({
    name: 'rcm_reconcile_duration_seconds',
    help: 'Time to reconcile one Shim (plan, API writes, status), by result',
    labelNames: ['result'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly planSeconds = new Counter({
    name: 'rcm_plan_seconds_total',
    help: 'Time spent deciding reconciles (what the caches show read, the planner over every node), without the API writes',
    registers: [this.registry],
  });
  readonly installs = new Counter({ name: 'rcm_node_installs_total', help: 'Finished node installs by outcome', labelNames: ['outcome'], registers: [this.registry] });
  readonly operationDuration = new Histogram({
    name: 'rcm_node_operation_duration_seconds',
    help: 'Time from an installer Job\'s creation to its end (scheduling, image pull, download, containerd restart), by operation and outcome',
    labelNames: ['operation', 'outcome'],
    buckets: [1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 900],
    registers: [this.registry],
  });
  readonly queueDepth = new Gauge({ name: 'rcm_queue_depth', help: 'Shims waiting in the work queue', registers: [this.registry] });
  readonly rollout = new Gauge({ name: 'rcm_rollout_nodes', help: 'Nodes per Shim by state', labelNames: ['shim', 'state'], registers: [this.registry] });
  readonly apiWrites = new Counter({ name: 'rcm_api_writes_total', help: 'Writes to the API server by verb', labelNames: ['verb'], registers: [this.registry] });
  readonly watchEvents = new Counter({
    name: 'rcm_watch_events_total',
    help: 'Watch events received by resource',
    labelNames: ['resource'],
    registers: [this.registry],
    collect: () => this.flushReceived(),
  });
  readonly watchBytes = new Counter({
    name: 'rcm_watch_bytes_total',
    help: 'Characters of JSON received on watches by resource (what the controller parses)',
    labelNames: ['resource'],
    registers: [this.registry],
    collect: () => this.flushReceived(),
  });
  readonly leader = new Gauge({ name: 'rcm_leader', help: '1 when this replica leads', registers: [this.registry] });

  /**
   * Events and bytes received per resource since the counters were last read. prom-client
   * makes a key of the labels at every inc(), and every watch event counts: the counters get
   * the sums when they are scraped.
   */
  private readonly received = new Map<string, { events: number; bytes: number }>();

  /** Finished Jobs already observed (name and creation time: Job names are reused per attempt). */
  private readonly observedJobs = new Set<string>();

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  /** What counts the events (and their bytes) received on the watch of `resource`. */
  receivedOn(resource: string): (bytes: number) => void {
    let tally = this.received.get(resource);
    if (!tally) this.received.set(resource, tally = { events: 0, bytes: 0 });
    const counted = tally;
    return bytes => {
      counted.events++;
      counted.bytes += bytes;
    };
  }

  private flushReceived(): void {
    for (const [resource, tally] of this.received) {
      if (tally.events === 0) continue;
      this.watchEvents.inc({ resource }, tally.events);
      this.watchBytes.inc({ resource }, tally.bytes);
      tally.events = tally.bytes = 0;
    }
  }

  observeRollout(shim: string, status: ShimStatus): void {
    this.rollout.set({ shim, state: 'selected' }, status.nodes);
    this.rollout.set({ shim, state: 'ready' }, status.nodesReady);
    this.rollout.set({ shim, state: 'failed' }, status.nodesFailed);
  }

  /** A Shim that is gone leaves no series behind. */
  forgetShim(shim: string): void {
    for (const state of ROLLOUT_STATES) this.rollout.remove({ shim, state });
  }

  /**
   * Observes the duration of each finished Job once, from its creation to its end; forgets
   * Jobs that left the cache.
   */
  observeJobs(jobs: readonly JobView[]): void {
    const present = new Set<string>();
    for (const job of jobs) {
      if (job.phase === 'running' || !job.createdAt || !job.finishedAt) continue;
      const key = `${job.name}@${job.createdAt}`;
      present.add(key);
      if (this.observedJobs.has(key)) continue;
      this.observedJobs.add(key);
      const seconds = (Date.parse(job.finishedAt) - Date.parse(job.createdAt)) / 1000;
      if (Number.isFinite(seconds) && seconds >= 0) {
        this.operationDuration.observe({ operation: job.operation, outcome: job.phase === 'succeeded' ? 'success' : 'failure' }, seconds);
      }
    }
    for (const key of this.observedJobs) if (!present.has(key)) this.observedJobs.delete(key);
  }
}
