// A list-and-watch cache that keeps only what the controller reads. client-node's informer
// caches whole objects (a realistic Node is ~14 KB: images, conditions, managedFields) and
// lists in one response; at 5,000 nodes that alone is hundreds of MiB. Here each object is
// transformed before it is cached, LISTs are paginated, and a watch that expired (410 Gone)
// lists again.
import { ApiError, Kube } from './kube';

export interface InformerOptions<T> {
  /** Collection path, e.g. `/api/v1/nodes`. */
  readonly path: string;
  readonly labelSelector?: string;
  readonly fieldSelector?: string;
  /** What the cache keeps of an object. */
  readonly transform: (raw: any) => T;
  /** Objects per LIST page. */
  readonly pageSize?: number;
  /** Called on failures (they are retried). */
  readonly onError?: (error: unknown) => void;
}

export interface Handlers<T> {
  add?(item: T): void;
  update?(before: T, after: T): void;
  delete?(item: T): void;
}

const RETRY_MS = 2000;

export class Informer<T> {
  private readonly items = new Map<string, T>();
  private resourceVersion = '';
  private stopped = false;
  private abort?: () => void;
  private markSynced!: () => void;
  /** Resolves once a LIST succeeded: only then is the cache the truth. */
  readonly synced = new Promise<void>(resolve => (this.markSynced = resolve));

  constructor(private readonly kube: Kube, private readonly options: InformerOptions<T>, private readonly handlers: Handlers<T> = {}) {}

  list(): T[] {
    return [...this.items.values()];
  }

  get size(): number {
    return this.items.size;
  }

  get(name: string): T | undefined {
    return this.items.get(name);
  }

  /** Starts listing and watching; resolves when the cache has synced. */
  async start(): Promise<void> {
    void this.run();
    await this.synced;
  }

  stop(): void {
    this.stopped = true;
    this.abort?.();
  }

  private query(extra: Record<string, string>): string {
    const params = new URLSearchParams(extra);
    if (this.options.labelSelector) params.set('labelSelector', this.options.labelSelector);
    if (this.options.fieldSelector) params.set('fieldSelector', this.options.fieldSelector);
    return `${this.options.path}?${params}`;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        if (!this.resourceVersion) await this.relist();
        await this.watch();
      } catch (e) {
        if (this.stopped) return;
        // An expired resourceVersion means events were missed: list again.
        if (e instanceof ApiError && e.code === 410) this.resourceVersion = '';
        this.options.onError?.(e);
        await new Promise(r => setTimeout(r, RETRY_MS));
      }
    }
  }

  private async relist(): Promise<void> {
    const fresh = new Map<string, T>();
    let cont = '';
    let version = '';
    do {
      const page = await this.kube.get(this.query({ limit: String(this.options.pageSize ?? 500), ...(cont ? { continue: cont } : {}) }));
      for (const raw of page.items ?? []) fresh.set(raw.metadata.name, this.options.transform(raw));
      cont = page.metadata?.continue ?? '';
      version = page.metadata?.resourceVersion ?? version;
    } while (cont);
    for (const [name, item] of this.items) if (!fresh.has(name)) this.remove(name, item);
    for (const [name, item] of fresh) this.put(name, item);
    this.resourceVersion = version;
    this.markSynced();
  }

  private watch(): Promise<void> {
    const path = this.query({ watch: '1', resourceVersion: this.resourceVersion, allowWatchBookmarks: 'true', timeoutSeconds: String(240 + Math.floor(Math.random() * 120)) });
    const { done, abort } = this.kube.watch(path, event => {
      const raw = event.object;
      if (event.type === 'ERROR') {
        throw new ApiError(raw?.code ?? 500, JSON.stringify(raw), 'WATCH', this.options.path);
      }
      if (raw?.metadata?.resourceVersion) this.resourceVersion = raw.metadata.resourceVersion;
      if (event.type === 'BOOKMARK') return;
      const name = raw.metadata.name;
      if (event.type === 'DELETED') {
        const old = this.items.get(name);
        if (old !== undefined) this.remove(name, old);
      } else {
        this.put(name, this.options.transform(raw));
      }
    });
    this.abort = abort;
    return done;
  }

  private put(name: string, item: T): void {
    const before = this.items.get(name);
    this.items.set(name, item);
    if (before === undefined) this.handlers.add?.(item);
    else this.handlers.update?.(before, item);
  }

  private remove(name: string, item: T): void {
    this.items.delete(name);
    this.handlers.delete?.(item);
  }
}
