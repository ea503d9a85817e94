// HTTP(S)_PROXY and NO_PROXY, as curl and Go read them: plain http goes to the proxy in
// absolute form; https is tunnelled through CONNECT, so TLS still ends at the origin.
import * as http from 'http';
import type * as Https from 'https';
import type * as Tls from 'tls';

// https and tls are loaded when an https URL is fetched, not at start-up (some 7 ms of
// every run that fetches over http or copies the artifact out of an image).
const https = () => process.getBuiltinModule('https') as typeof Https;
const tls = () => process.getBuiltinModule('tls') as typeof Tls;

function env(names: string[], from: NodeJS.ProcessEnv): string | undefined {
  for (const n of names) if (from[n]) return from[n];
  return undefined;
}

/** The proxy for `url`, or undefined when it is reached directly. */
export function proxyFor(url: URL, from: NodeJS.ProcessEnv = process.env): URL | undefined {
  const proxy = url.protocol === 'https:' ? env(['HTTPS_PROXY', 'https_proxy'], from) : env(['HTTP_PROXY', 'http_proxy'], from);
  if (!proxy) return undefined;
  const noProxy = (env(['NO_PROXY', 'no_proxy'], from) ?? '').split(',').map(s => s.trim().toLowerCase()).filter(Boolean);
  const host = url.hostname.toLowerCase();
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  for (const entry of noProxy) {
    if (entry === '*') return undefined;
    const [name, entryPort] = entry.split(':');
    if (entryPort && entryPort !== port) continue;
    const bare = name.replace(/^\*?\./, '');
    if (host === bare || host.endsWith(`.${bare}`)) return undefined;
  }
  return new URL(proxy.includes('://') ? proxy : `http://${proxy}`);
}

/** A GET of `url`, through the proxy the environment names for it. */
export function get(url: URL, timeoutMs: number, onResponse: (res: http.IncomingMessage) => void): http.ClientRequest {
  const proxy = proxyFor(url);
  if (!proxy) {
    return (url.protocol === 'https:' ? https() : http).get(url, { timeout: timeoutMs, agent: false }, onResponse);
  }
  const credentials = `${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`;
  const auth = proxy.username ? { 'Proxy-Authorization': `Basic ${Buffer.from(credentials).toString('base64')}` } : {};
  if (url.protocol === 'http:') {
    const absoluteForm = { host: proxy.hostname, port: proxy.port || 80, path: url.toString(), headers: { Host: url.host, ...auth } };
    return http.get({ ...absoluteForm, timeout: timeoutMs, agent: false }, onResponse);
  }
  // https: a CONNECT tunnel, then TLS to the origin over it.
  const agent = new (https().Agent)({ keepAlive: false });
  (agent as any).createConnection = (_opts: unknown, callback: (err: Error | null, socket?: Tls.TLSSocket) => void) => {
    const connect = http.request({ host: proxy.hostname, port: proxy.port || 80, method: 'CONNECT', path: `${url.hostname}:${url.port || 443}`, headers: auth, timeout: timeoutMs });
    connect.on('connect', (res, socket) => {
      if (res.statusCode !== 200) return callback(new Error(`proxy ${proxy.host} refused CONNECT: HTTP ${res.statusCode}`));
      callback(null, tls().connect({ socket, servername: url.hostname }));
    });
    connect.on('error', err => callback(err));
    // A proxy that accepts the connection but never answers CONNECT.
    connect.on('timeout', () => connect.destroy(new Error(`proxy ${proxy.host} did not answer CONNECT within ${timeoutMs} ms`)));
    connect.end();
  };
  return https().get(url, { timeout: timeoutMs, agent }, onResponse);
}
