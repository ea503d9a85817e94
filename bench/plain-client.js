// The baseline of the controller benchmark: a plain client loop that performs only the
// unavoidable writes, one Job and one node label patch per node and Shim, and nothing else.
// With RCM_BENCH_MODE=agent (install mode NodeAgent), the Job is a request in the node's
// requests ConfigMap (made with the first Shim's, patched for the others).
// Usage: node bench/plain-client.js SERVER TOKEN CA_FILE NAMESPACE SHIMS NODE...
const fs = require('fs');
const https = require('https');

const [server, token, caFile, namespace, shims, ...nodes] = process.argv.slice(2);
const agent = new https.Agent({ keepAlive: true, maxSockets: 16, ca: fs.readFileSync(caFile) });
let writes = 0;

function request(method, path, body, contentType) {
  writes++;
  return new Promise((resolve, reject) => {
    const req = https.request(new URL(path, server), {
      // Only metadata back, as the controller asks: a realistic Node's answer is 14 KB otherwise,
      // which is not part of the unavoidable cost.
      method, agent, headers: { Authorization: `Bearer ${token}`, 'Content-Type': contentType, Accept: 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json' },
    }, res => {
      res.resume();
      res.on('end', () => (res.statusCode < 300 ? resolve() : reject(new Error(`${method} ${path}: ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

async function main() {
  const work = [];
  for (const shim of shims.split(',')) for (const node of nodes) work.push([shim, node]);
  let next = 0;
  const made = new Set();
  const worker = async () => {
    while (next < work.length) {
      const [shim, node] = work[next++];
      if (process.env.RCM_BENCH_MODE === 'agent') {
        const data = { [shim]: JSON.stringify({ name: `plain-${shim}-${node}`, operation: 'install', handler: shim }) };
        if (made.has(node)) {
          await request('PATCH', `/api/v1/namespaces/${namespace}/configmaps/plain-requests.${node}`, { data }, 'application/merge-patch+json');
        } else {
          made.add(node);
          await request('POST', `/api/v1/namespaces/${namespace}/configmaps`, { metadata: { name: `plain-requests.${node}` }, data }, 'application/json');
        }
      } else await request('POST', `/apis/batch/v1/namespaces/${namespace}/jobs`, {
        apiVersion: 'batch/v1', kind: 'Job', metadata: { name: `plain-${shim}-${node}` },
        // parallelism 0: the job controller makes no pods for these, so that the controller's
        // run that follows does not share the API server with thousands of baseline pods.
        spec: { parallelism: 0, template: { spec: { nodeName: node, restartPolicy: 'Never', containers: [{ name: 'c', image: 'x' }] } } },
      }, 'application/json');
      // RCM_BENCH_REQUESTS_ONLY=1: the requests alone (install mode NodeAgent, where the agents write the records).
      if (process.env.RCM_BENCH_REQUESTS_ONLY !== '1') {
        await request('PATCH', `/api/v1/nodes/${node}`, { metadata: { labels: { [`${shim}.plain.example/state`]: 'provisioned' } } }, 'application/merge-patch+json');
      }
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  process.stdout.write(JSON.stringify({ writes }) + '\n');
}

main().catch(e => { console.error(e); process.exit(1); });
