// The reading half of the controller benchmark's floor: the same three watches the controller
// keeps (Nodes, and the installer namespace's Jobs and pods), read as protobuf and split into
// events, nothing decoded, nothing kept. Its CPU is what receiving the rollout's events costs
// a Node.js process at the least; the plain loop is the writing half.
// Usage: node bench/plain-watcher.js SERVER TOKEN CA_FILE NAMESPACE [agent]
// With `agent` (install mode NodeAgent), what the controller reads then: the Nodes' metadata,
// the cordoned Nodes' metadata, and the node agents' pods (no Jobs nor installer pods).
const fs = require('fs');
const https = require('https');

const [server, token, caFile, namespace, mode] = process.argv.slice(2);
const agent = new https.Agent({ keepAlive: true, ca: fs.readFileSync(caFile) });
let events = 0;

const PROTOBUF = 'application/vnd.kubernetes.protobuf';
const METADATA = `${PROTOBUF};as=PartialObjectMetadata;g=meta.k8s.io;v=v1`;

function watch(path, accept = PROTOBUF, query = '') {
  // One watch for the whole run (the server ends it after timeoutSeconds; then it starts over).
  const req = https.request(new URL(`${path}?watch=1&timeoutSeconds=3600${query}`, server), {
    agent, headers: { Authorization: `Bearer ${token}`, Accept: accept },
  }, res => {
    let parts = [];
    let size = 0;
    res.on('data', chunk => {
      parts.push(chunk);
      size += chunk.length;
      for (;;) {
        if (size < 4) return;
        if (parts[0].length < 4) parts = [Buffer.concat(parts)];
        const length = parts[0].readUInt32BE(0);
        if (size < 4 + length) return;
        const all = parts.length === 1 ? parts[0] : Buffer.concat(parts);
        const rest = all.subarray(4 + length);
        parts = rest.length > 0 ? [rest] : [];
        size = rest.length;
        events++;
      }
    });
    res.on('end', () => watch(path, accept, query));
  });
  req.on('error', () => setTimeout(() => watch(path, accept, query), 500));
  req.end();
}

if (mode === 'agent') {
  watch('/api/v1/nodes', METADATA);
  watch('/api/v1/nodes', METADATA, `&fieldSelector=${encodeURIComponent('spec.unschedulable=true')}`);
  watch(`/api/v1/namespaces/${namespace}/pods`, PROTOBUF, `&labelSelector=${encodeURIComponent('app.kubernetes.io/component=node-agent')}`);
} else {
  watch('/api/v1/nodes');
  watch(`/apis/batch/v1/namespaces/${namespace}/jobs`);
  watch(`/api/v1/namespaces/${namespace}/pods`);
}
process.on('SIGTERM', () => {
  process.stdout.write(JSON.stringify({ events }) + '\n');
  process.exit(0);
});
