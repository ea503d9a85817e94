import * as fs from 'fs';
import * as https from 'https';
import { ControlPlane } from './control-plane';

/**
 * Every state of a Node the API server went through while `during` ran: a watch from the
 * Node's resourceVersion before it, so no state is missed between polls (a label set and taken
 * away again within a second is still seen). The first entry is the Node before `during`.
 */
export async function nodeStatesDuring(cp: ControlPlane, node: string, during: () => Promise<void>): Promise<any[]> {
  const get = (p: string) => new Promise<any>((resolve, reject) => {
    https.get(new URL(p, cp.server), { ca: fs.readFileSync(cp.caFile), headers: { Authorization: `Bearer ${cp.adminToken}` }, agent: false }, res => {
      let body = '';
      res.on('data', c => body += c).on('end', () => res.statusCode === 200 ? resolve(JSON.parse(body)) : reject(new Error(`GET ${p}: ${res.statusCode} ${body}`)));
    }).on('error', reject);
  });
  const initial = await get(`/api/v1/nodes/${node}`);
  const seen: any[] = [initial];
  const url = new URL(`/api/v1/nodes?watch=true&fieldSelector=metadata.name%3D${node}&resourceVersion=${initial.metadata.resourceVersion}`, cp.server);
  let broken: string | undefined;
  let stopped = false;
  const req = https.get(url, { ca: fs.readFileSync(cp.caFile), headers: { Authorization: `Bearer ${cp.adminToken}` }, agent: false }, res => {
    let buffer = '';
    res.on('data', chunk => {
      buffer += chunk;
      for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
        const event = JSON.parse(buffer.slice(0, i));
        buffer = buffer.slice(i + 1);
        if (event.type === 'ERROR') broken = JSON.stringify(event.object);
        else seen.push(event.object);
      }
    });
    res.on('end', () => {
      if (!stopped) broken = 'the watch ended early';
    });
  });
  req.on('error', e => void (broken = e.message));
  try {
    await during();
  } finally {
    stopped = true;
    req.destroy();
  }
  if (broken) throw new Error(`the watch of node ${node} broke: ${broken}`);
  return seen;
}
