// A list-and-watch cache that keeps only what the controller reads. client-node's informer
// caches whole objects (a realistic Node is ~14 KB: images, conditions, managedFields) and
// lists in one response; at 5,000 nodes that alone is hundreds of MiB. Here each object is
// reduced before it is cached, LISTs are paginated, and a watch that expired (410 Gone)
// lists again. Built-in kinds are read as protobuf, whose unread parts cost nothing to skip.
import { objectMeta, statusFromProto } from './slim-proto';
import { ApiError, Kube, PROTOBUF, PROTOBUF_METADATA, PROTOBUF_METADATA_LIST } from '../shared/kube/kube';
import { Fields, unwrap } from '../shared/kube/protobuf';

export interface InformerOptions<T> {
  /** Collection path, e.g. `/api/v1/nodes`. */
  readonly path: string;
  readonly labelSelector?: string;
  readonly fieldSelector?: string;
  /** What the cache keeps of an object read as JSON. */
  readonly transform: (raw: any) => T;
  /**
   * What the cache keeps of an object read as protobuf (built-in kinds only); when given,
   * lists and watches use protobuf and `transform` is not used.
   */
  readonly decode?: (object: Buffer) => T;
  /**
   * With `decode`: the objects' metadata only (PartialObjectMetadata; `decode` gets an object
   * whose spec and status are absent). A Node's spec and status are four fifths of its bytes,
   * and every kubelet heartbeat sends them again.
   */
  readonly metadataOnly?: boolean;
  /**
   * Whether a received object is the cached one over again in all the cache keeps. Then the
   * cached object stays and no handler runs: most events of a rollout change nothing the
   * controller reads (a kubelet's status update of a Node, a Job's `active` count, a pod
   * bound to its node), and a new copy of each would only be garbage that had first lived long
   * enough to be promoted.
   */
  readonly unchanged?: (before: T, after: T) => boolean;
  /**
   * With `decode`: a digest of the bytes `decode` reads of an object. An update whose digest
   * is that of the last one of the object is not decoded at all (the cached object stays, as
   * `unchanged` would have found): most Node events are kubelet heartbeats, which change none
   * of the bytes a Node's view reads. Equal digests must mean equal decoded objects; the
   * converse need not hold (a digest that changes for nothing only costs a decode).
   */
  readonly fingerprint?: (object: Buffer) => string;
  /** Objects per LIST page. */
  readonly pageSize?: number;
  /** Called for each object received, with its size in characters (lists and watches). */
  readonly onReceived?: (bytes: number) => void;
  /** Called on failures (they are retried). */
  readonly onError?: (error: unknown) => void;
}

export interface Handlers<T> {
  add?(item: T): void;
  update?(before: T, after: T): void;
  delete?(item: T): void;
  /** An update that was not decoded (options.fingerprint): nothing the cache keeps changed but the object's resourceVersion. */
  unchangedAt?(name: string, resourceVersion: string): void;
}

const RETRY_MS = 2000;

export class Informer<T> {
  private readonly items = new Map<string, T>();
  /** The fingerprint of each cached object's last event (options.fingerprint). */
  private readonly prints = new Map<string, string>();
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
      const query = this.query({ limit: String(this.options.pageSize ?? 500), ...(cont ? { continue: cont } : {}) });
      const page = this.options.decode ? await this.protobufPage(query, fresh) : await this.jsonPage(query, fresh);
      cont = page.continue;
      version = page.resourceVersion || version;
    } while (cont);
    // The fingerprints were of events before the list: an object may have changed and changed
    // back meanwhile, so the next event of each is decoded.
    this.prints.clear();
    for (const [name, item] of this.items) if (!fresh.has(name)) this.remove(name, item);
    for (const [name, item] of fresh) this.put(name, item);
    this.resourceVersion = version;
    this.markSynced();
  }

  private async jsonPage(query: string, into: Map<string, T>): Promise<{ continue: string; resourceVersion: string }> {
    const page = await this.kube.get(query);
    for (const raw of page.items ?? []) into.set(raw.metadata.name, this.options.transform(raw));
    return { continue: page.metadata?.continue ?? '', resourceVersion: page.metadata?.resourceVersion ?? '' };
  }

  /** A list as protobuf: metadata = 1 (ListMeta: resourceVersion = 2, continue = 3), items = 2. */
  private async protobufPage(query: string, into: Map<string, T>): Promise<{ continue: string; resourceVersion: string }> {
    const list = await this.kube.getProtobuf(query, this.options.metadataOnly ? PROTOBUF_METADATA_LIST : PROTOBUF);
    const meta = { continue: '', resourceVersion: '' };
    const f = new Fields(list);
    while (f.next()) {
      if (f.no === 1) {
        const m = f.nested();
        while (m.next()) {
          if (m.no === 2) meta.resourceVersion = m.text();
          else if (m.no === 3) meta.continue = m.text();
        }
      } else if (f.no === 2) {
        const item = f.bytes();
        into.set(objectMeta(item).name, this.options.decode!(item));
      }
    }
    return meta;
  }

  private watch(): Promise<void> {
    const path = this.query({ watch: '1', resourceVersion: this.resourceVersion, allowWatchBookmarks: 'true', timeoutSeconds: String(240 + Math.floor(Math.random() * 120)) });
    const { done, abort } = this.options.decode
      ? this.kube.watchProtobuf(path, (type, enveloped, bytes) => {
        this.options.onReceived?.(bytes);
        if (type === 'ERROR') {
          // Whatever the error (410 Gone when the resourceVersion expired), the next watch
          // starts from a fresh LIST: a Status that cannot be read must not make it retry the
          // same resourceVersion for ever.
          this.resourceVersion = '';
          let status = { code: 500, message: 'a watch error whose Status could not be read' };
          try {
            status = statusFromProto(unwrap(enveloped));
          } catch { /* keep the generic error */ }
          throw new ApiError(status.code, status.message, 'WATCH', this.options.path);
        }
        const object = unwrap(enveloped);
        const { name, resourceVersion } = objectMeta(object);
        const print = this.options.fingerprint && (type === 'ADDED' || type === 'MODIFIED') ? this.options.fingerprint(object) : undefined;
        if (print !== undefined && type === 'MODIFIED' && this.prints.get(name) === print && this.items.has(name)) {
          // Not one byte that the view reads changed: nothing to decode.
          if (resourceVersion) this.resourceVersion = resourceVersion;
          this.handlers.unchangedAt?.(name, resourceVersion);
          return;
        }
        this.apply(type, name, resourceVersion, () => this.options.decode!(object));
        if (print !== undefined) this.prints.set(name, print);
      }, this.options.metadataOnly ? PROTOBUF_METADATA : PROTOBUF)
      : this.kube.watch(path, (event, bytes) => {
        this.options.onReceived?.(bytes);
        const raw = event.object;
        if (event.type === 'ERROR') {
          throw new ApiError(raw?.code ?? 500, JSON.stringify(raw), 'WATCH', this.options.path);
        }
        this.apply(event.type, raw?.metadata?.name, raw?.metadata?.resourceVersion, () => this.options.transform(raw));
      });
    this.abort = abort;
    return done;
  }

  private apply(type: string, name: string, resourceVersion: string | undefined, item: () => T): void {
    if (resourceVersion) this.resourceVersion = resourceVersion;
    if (type === 'BOOKMARK') return;
    if (type === 'DELETED') {
      const old = this.items.get(name);
      if (old !== undefined) this.remove(name, old);
    } else {
      this.put(name, item());
    }
  }

  private put(name: string, item: T): void {
    const before = this.items.get(name);
    if (before !== undefined && this.options.unchanged?.(before, item)) return;
    this.items.set(name, item);
    if (before === undefined) this.handlers.add?.(item);
    else this.handlers.update?.(before, item);
  }

  private remove(name: string, item: T): void {
    this.items.delete(name);
    this.prints.delete(name);
    this.handlers.delete?.(item);
  }
}
