import * as fs from 'fs';
import * as https from 'https';
import { Informer } from '../../src/runtime/informer';
import { samePlain, slimAgentPod, slimJob, slimNode, slimNodeMetadata, slimPod } from '../../src/runtime/slim';
import { agentPodFromProto, jobFromProto, nodeFingerprint, nodeFromProto, nodeMetadataFromProto, objectMeta, podFromProto } from '../../src/runtime/slim-proto';
import { NodeView } from '../../src/runtime/types';
import { ApiError, Kube, PROTOBUF_METADATA, WRITE_ACCEPT } from '../../src/shared/kube/kube';
import { kubeconfigAccess } from '../../src/shared/kube/kube-config';
import { ControlPlane, startControlPlane } from '../support/control-plane';
import { eventually, Rest } from '../support/rest';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { realisticNode } = require('../../bench/realistic-node.js');

// The controller reads Nodes, Jobs and Pods as protobuf, picking field numbers by hand. The
// oracle is the same object read as JSON from the same real API server (1.20): both views
// must be equal, for every field the controller keeps, in GETs, paginated LISTs and watches.

let cp: ControlPlane;
let admin: Rest;
let kube: Kube;
const NS = 'default';
const DOMAIN = 'shim.runtime.spinkube.dev';

beforeAll(async () => {
  cp = await startControlPlane();
  admin = new Rest(cp.server, cp.adminToken, cp.caFile);
  kube = new Kube(kubeconfigAccess(cp.kubeconfig));
}, 120_000);

afterAll(async () => {
  await cp?.stop();
});

async function makeNode(name: string, index: number, extra: { unschedulable?: boolean; ready?: boolean; ours?: boolean }): Promise<void> {
  const { node, status } = realisticNode(name, index);
  if (extra.unschedulable) node.spec.unschedulable = true;
  if (extra.ours) {
    node.metadata.labels[`spin.${DOMAIN}/handler`] = 'spin';
    node.metadata.annotations[`spin.${DOMAIN}/installed`] = JSON.stringify([{ handler: 'spin', revision: 'abc' }]);
    node.metadata.annotations['other.example/unrelated'] = 'dropped';
  }
  if (extra.ready === false) status.conditions.find((c: any) => c.type === 'Ready').status = 'False';
  await admin.request('POST', '/api/v1/nodes', node);
  await admin.request('PATCH', `/api/v1/nodes/${name}/status`, { status }, 'application/merge-patch+json');
}

test('Nodes: labels, our annotations only, readiness, cordon and boot ID read alike from protobuf and JSON', async () => {
  // GIVEN realistic nodes (50 images, managedFields): one of ours and cordoned, one not Ready, one plain
  await makeNode('pb-node-a', 1, { unschedulable: true, ours: true });
  await makeNode('pb-node-b', 2, { ready: false });
  await makeNode('pb-node-c', 3, {});
  for (const name of ['pb-node-a', 'pb-node-b', 'pb-node-c']) {
    // WHEN each is read both ways
    const fromJson = slimNode(await admin.get(`/api/v1/nodes/${name}`));
    const fromProto = nodeFromProto(await kube.getProtobuf(`/api/v1/nodes/${name}`));
    // THEN the views are equal
    expect(fromProto).toEqual(fromJson);
  }
  // AND they say what was written
  const a = nodeFromProto(await kube.getProtobuf('/api/v1/nodes/pb-node-a'));
  expect(a).toMatchObject({ schedulable: false, ready: true, labels: { [`spin.${DOMAIN}/handler`]: 'spin' } });
  expect(Object.keys(a.annotations)).toEqual([`spin.${DOMAIN}/installed`]);
  expect(a.bootID).toMatch(/^[0-9a-f]{36}$/);
  expect(nodeFromProto(await kube.getProtobuf('/api/v1/nodes/pb-node-b')).ready).toBe(false);
});

test('Jobs and Pods: identity, Failed conditions, completion, phase, waiting reason and result', async () => {
  // GIVEN a Job that failed and one that succeeded, as the job controller records them
  const job = (name: string) => ({
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, labels: { 'app.kubernetes.io/managed-by': 'rcm', [`${DOMAIN}/batch`]: '17' }, annotations: { [`${DOMAIN}/node`]: 'pb-node-a' } },
    spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', nodeName: 'pb-node-a', containers: [{ name: 'installer', image: 'x', args: ['install'] }] } } },
  });
  await admin.request('POST', `/apis/batch/v1/namespaces/${NS}/jobs`, job('pb-failed'));
  await admin.request('POST', `/apis/batch/v1/namespaces/${NS}/jobs`, job('pb-succeeded'));
  const t = '2026-11-22T10:00:00Z';
  await admin.request('PATCH', `/apis/batch/v1/namespaces/${NS}/jobs/pb-failed/status`, {
    // (the job controller of 1.31 and later writes FailureTarget before Failed, and the API server requires it)
    status: { startTime: t, failed: 1, conditions: ['FailureTarget', 'Failed'].map(type => ({ type, status: 'True', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit', lastProbeTime: t, lastTransitionTime: t })) },
  }, 'application/merge-patch+json');
  await admin.request('PATCH', `/apis/batch/v1/namespaces/${NS}/jobs/pb-succeeded/status`, {
    // (and SuccessCriteriaMet before Complete)
    status: { startTime: t, completionTime: '2026-11-22T10:00:07Z', succeeded: 1, conditions: ['SuccessCriteriaMet', 'Complete'].map(type => ({ type, status: 'True', lastProbeTime: t, lastTransitionTime: t })) },
  }, 'application/merge-patch+json');
  for (const name of ['pb-failed', 'pb-succeeded']) {
    const path = `/apis/batch/v1/namespaces/${NS}/jobs/${name}`;
    expect(jobFromProto(await kube.getProtobuf(path))).toEqual(slimJob(await admin.get(path)));
  }
  expect(jobFromProto(await kube.getProtobuf(`/apis/batch/v1/namespaces/${NS}/jobs/pb-failed`)).status.conditions)
    .toEqual([{ type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit', lastTransitionTime: t }]);

  // AND pods: one whose container could not be created, one that ended with a result, one pending
  const pod = (name: string) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { 'controller-uid': 'u-1' }, annotations: { [`${DOMAIN}/shim`]: 'spin' } },
    spec: { restartPolicy: 'Never', nodeName: 'pb-node-a', automountServiceAccountToken: false, containers: [{ name: 'installer', image: 'x' }] },
  });
  await admin.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts`, { metadata: { name: 'default' } }); // no controller-manager makes it
  for (const name of ['pb-waiting', 'pb-ended', 'pb-pending']) await admin.request('POST', `/api/v1/namespaces/${NS}/pods`, pod(name));
  const containerStatus = (state: object) => ({ name: 'installer', image: 'x', imageID: '', ready: false, restartCount: 0, state });
  await admin.request('PATCH', `/api/v1/namespaces/${NS}/pods/pb-waiting/status`, {
    status: { phase: 'Failed', startTime: t, containerStatuses: [containerStatus({ waiting: { reason: 'CreateContainerError', message: 'failed to reserve container name' } })] },
  }, 'application/merge-patch+json');
  await admin.request('PATCH', `/api/v1/namespaces/${NS}/pods/pb-ended/status`, {
    status: {
      phase: 'Succeeded',
      startTime: t,
      containerStatuses: [containerStatus({ terminated: { exitCode: 0, reason: 'Completed', message: '{"outcome":"installed"}', startedAt: t, finishedAt: '2026-11-22T10:00:05Z' } })],
    },
  }, 'application/merge-patch+json');
  for (const name of ['pb-waiting', 'pb-ended', 'pb-pending']) {
    const path = `/api/v1/namespaces/${NS}/pods/${name}`;
    expect(podFromProto(await kube.getProtobuf(path))).toEqual(slimPod(await admin.get(path)));
  }
  expect(podFromProto(await kube.getProtobuf(`/api/v1/namespaces/${NS}/pods/pb-ended`)).status).toEqual({
    phase: 'Succeeded', startTime: t, containerStatuses: [{ state: { terminated: { message: '{"outcome":"installed"}', finishedAt: '2026-11-22T10:00:05Z' } } }],
  });
});

test('an informer reads the same cache through protobuf as through JSON: paginated LIST, then watch events', async () => {
  // GIVEN two informers on Nodes, one per encoding, with pages smaller than the list
  const seen: string[] = [];
  const json = new Informer(kube, { path: '/api/v1/nodes', transform: slimNode, pageSize: 2 });
  const proto = new Informer(kube, { path: '/api/v1/nodes', transform: slimNode, decode: nodeFromProto, pageSize: 2, onReceived: () => seen.push('event') },
    { update: (_, after) => seen.push(`update ${after.name}`) });
  await makeNode('pb-node-d', 4, {});
  await Promise.all([json.start(), proto.start()]);
  try {
    // THEN the lists agree
    const byName = (i: Informer<any>) => Object.fromEntries(i.list().map((n: any) => [n.name, n]));
    expect(byName(proto)).toEqual(byName(json));
    expect(proto.size).toBeGreaterThanOrEqual(4);
    // WHEN a node gets a label of ours and is cordoned, and another goes
    await admin.patch('/api/v1/nodes/pb-node-d', { metadata: { labels: { [`spin.${DOMAIN}/state`]: 'provisioned' } }, spec: { unschedulable: true } });
    await admin.request('DELETE', '/api/v1/nodes/pb-node-c');
    // THEN the watch delivers both, and the caches still agree
    await eventually(async () => proto.get('pb-node-d')?.schedulable === false && !proto.get('pb-node-c') && json.get('pb-node-d')?.schedulable === false && !json.get('pb-node-c'),
      20_000, () => JSON.stringify(proto.get('pb-node-d')));
    expect(byName(proto)).toEqual(byName(json));
    expect(proto.get('pb-node-d')!.labels[`spin.${DOMAIN}/state`]).toBe('provisioned');
    expect(seen).toContain('update pb-node-d');
  } finally {
    json.stop();
    proto.stop();
  }
});

test('an informer that keeps equal objects: a kubelet heartbeat changes nothing kept, so the cached object stays and no handler runs', async () => {
  // GIVEN an informer on Nodes that keeps an object equal to the cached one (as the controller's Job-mode informers do)
  await makeNode('pb-node-h', 8, {});
  const updates: { name: string; before: unknown; after: NodeView }[] = [];
  const informer = new Informer(kube, { path: '/api/v1/nodes', transform: slimNode, decode: nodeFromProto, unchanged: samePlain },
    { update: (before, after) => updates.push({ name: after.name, before, after }) });
  await informer.start();
  try {
    const listed = informer.get('pb-node-h')!;
    const ready = (status: string, at: string) => admin.request('PATCH', '/api/v1/nodes/pb-node-h/status', {
      status: { conditions: [{ type: 'Ready', status, reason: 'KubeletReady', message: 'kubelet is posting ready status. AppArmor enabled', lastHeartbeatTime: at }] },
    }, 'application/strategic-merge-patch+json');
    // WHEN the kubelet posts its Ready condition twice (a new heartbeat time, nothing else), then the node goes NotReady
    await ready('True', '2026-11-26T10:00:00Z');
    await ready('True', '2026-11-26T10:01:00Z');
    await ready('False', '2026-11-26T10:02:00Z');
    // THEN one update runs, for the change the view keeps (events arrive in order: the heartbeats came first), from the listed object itself
    await eventually(async () => updates.some(u => u.name === 'pb-node-h'), 20_000, () => JSON.stringify(informer.get('pb-node-h')));
    const ours = updates.filter(u => u.name === 'pb-node-h');
    expect(ours).toHaveLength(1);
    expect(ours[0].before).toBe(listed);
    expect(ours[0].after.ready).toBe(false);
    expect(informer.get('pb-node-h')).toBe(ours[0].after);
  } finally {
    informer.stop();
  }
});

test('a Node\'s fingerprint: the same across kubelet heartbeats, another for each change its view keeps', async () => {
  // GIVEN a realistic node (50 images, managedFields, conditions with times)
  await makeNode('pb-node-f', 9, {});
  const path = '/api/v1/nodes/pb-node-f';
  const read = async () => {
    const object = await kube.getProtobuf(path);
    // Install mode NodeAgent reads the Node's metadata alone (PartialObjectMetadata): its fingerprint behaves alike.
    const metadata = await kube.getProtobuf(path, PROTOBUF_METADATA);
    return { print: nodeFingerprint(object), view: nodeFromProto(object), metadataPrint: nodeFingerprint(metadata) };
  };
  const heartbeat = (status: string, at: string) => admin.request('PATCH', `${path}/status`, {
    status: { conditions: [{ type: 'Ready', status, reason: 'KubeletReady', message: 'kubelet is posting ready status. AppArmor enabled', lastHeartbeatTime: at }] },
  }, 'application/strategic-merge-patch+json');
  const first = await read();
  // WHEN the kubelet posts two heartbeats (new times, a new resourceVersion and managedFields)
  await heartbeat('True', '2026-11-27T10:00:00Z');
  const second = await read();
  await heartbeat('True', '2026-11-27T10:01:00Z');
  // THEN the fingerprint stays (of the whole Node and of its metadata)
  const third = await read();
  expect([second.print, third.print]).toEqual([first.print, first.print]);
  expect([second.metadataPrint, third.metadataPrint]).toEqual([first.metadataPrint, first.metadataPrint]);
  // WHEN each thing the view keeps changes in turn
  const changes: [string, () => Promise<unknown>][] = [
    ['a label', async () => {
      const before = (await read()).metadataPrint;
      await admin.patch(path, { metadata: { labels: { [`spin.${DOMAIN}/state`]: 'provisioned' } } });
      expect((await read()).metadataPrint).not.toBe(before);
    }],
    ['an annotation of ours', () => admin.patch(path, { metadata: { annotations: { [`spin.${DOMAIN}/installed`]: '[]' } } })],
    ['cordoned', () => admin.patch(path, { spec: { unschedulable: true } })],
    ['not Ready', () => heartbeat('False', '2026-11-27T10:02:00Z')],
    ['a new boot ID', () => admin.request('PATCH', `${path}/status`, { status: { nodeInfo: { bootID: '00000000-0000-4000-8000-000000000001' } } }, 'application/strategic-merge-patch+json')],
  ];
  const prints = new Set([first.print]);
  let view = first.view;
  for (const [what, change] of changes) {
    await change();
    const now = await read();
    // THEN the fingerprint is new each time, and so is the view
    expect({ what, seen: prints.has(now.print) }).toEqual({ what, seen: false });
    expect({ what, same: samePlain(now.view, view) }).toEqual({ what, same: false });
    prints.add(now.print);
    view = now.view;
  }
});

test('an informer with fingerprints decodes no heartbeat and still sees every change, as the JSON informer does', async () => {
  // GIVEN the Job-mode Node informer (fingerprints, equal objects kept) beside a JSON one
  await makeNode('pb-node-g', 10, {});
  let decoded = 0;
  const updates: NodeView[] = [];
  const proto = new Informer(kube, {
    path: '/api/v1/nodes', transform: slimNode, decode: o => { decoded++; return nodeFromProto(o); }, fingerprint: nodeFingerprint, unchanged: samePlain,
  }, { update: (_, after) => { if (after.name === 'pb-node-g') updates.push(after); } });
  const json = new Informer(kube, { path: '/api/v1/nodes', transform: slimNode });
  await Promise.all([proto.start(), json.start()]);
  const path = '/api/v1/nodes/pb-node-g';
  try {
    const heartbeat = (at: string) => admin.request('PATCH', `${path}/status`, {
      status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'kubelet is posting ready status. AppArmor enabled', lastHeartbeatTime: at }] },
    }, 'application/strategic-merge-patch+json');
    // WHEN a first heartbeat comes (its fingerprint is not known yet: the list made none), then three more
    const listed = decoded;
    await heartbeat('2026-11-27T11:00:00Z');
    await eventually(async () => decoded > listed, 20_000, () => 'the first event was not decoded');
    const afterFirst = decoded;
    for (const at of ['2026-11-27T11:01:00Z', '2026-11-27T11:02:00Z', '2026-11-27T11:03:00Z']) await heartbeat(at);
    // AND then a label changes
    await admin.patch(path, { metadata: { labels: { [`spin.${DOMAIN}/state`]: 'provisioned' } } });
    await eventually(async () => updates.length > 0, 20_000, () => JSON.stringify(proto.get('pb-node-g')));
    // THEN the three heartbeats were not decoded, only the label's event
    expect(decoded - afterFirst).toBe(1);
    // AND one update ran, for the label; the cache agrees with the JSON one
    expect(updates).toHaveLength(1);
    expect(updates[0].labels[`spin.${DOMAIN}/state`]).toBe('provisioned');
    await eventually(async () => json.get('pb-node-g')?.labels[`spin.${DOMAIN}/state`] === 'provisioned', 20_000, () => 'the JSON informer did not see the label');
    expect(proto.get('pb-node-g')).toEqual(json.get('pb-node-g'));
  } finally {
    proto.stop();
    json.stop();
  }
});

test('requests of every kind share the kept-alive connections: one after the other, they take one', async () => {
  // GIVEN a client, and the connections its requests free (its agent's own event)
  const sockets = new Set<unknown>();
  const agent = (kube as unknown as { agent: import('https').Agent }).agent;
  const freed = (socket: unknown) => sockets.add(socket);
  agent.on('free', freed);
  try {
    // WHEN it reads as JSON, as protobuf, and writes, one request after the other
    for (let i = 0; i < 3; i++) {
      await kube.get('/api/v1/namespaces/default');
      await kube.getProtobuf('/api/v1/namespaces/default');
      await kube.mergePatch('/api/v1/namespaces/default', { metadata: { labels: { 'rcm-test/round': String(i) } } });
    }
    // THEN all went over one connection
    expect(sockets.size).toBe(1);
  } finally {
    agent.off('free', freed);
  }
});

test('a write asks back only metadata: a realistic Node patch answers in a few KB; errors stay readable', async () => {
  // GIVEN a realistic node (about 14 KB of JSON)
  await makeNode('pb-node-w', 5, {});
  const patch = (accept: string, node = 'pb-node-w') => new Promise<{ code: number; body: string }>((resolve, reject) => {
    const body = JSON.stringify({ metadata: { labels: { [`spin.${DOMAIN}/state`]: accept.length > 20 ? 'partial' : 'full' } } });
    const url = new URL(cp.server);
    const req = https.request({
      hostname: url.hostname,
      port: url.port,
      method: 'PATCH',
      path: `/api/v1/nodes/${node}`,
      ca: fs.readFileSync(cp.caFile),
      headers: { 'Authorization': `Bearer ${cp.adminToken}`, 'Content-Type': 'application/merge-patch+json', 'Accept': accept, 'Content-Length': body.length },
    }, res => {
      const chunks: Buffer[] = [];
      res.on('data', c => chunks.push(c));
      res.on('end', () => resolve({ code: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
  // WHEN it is patched asking for the whole object, and asking as the controller's writes do
  const full = await patch('application/json');
  const partial = await patch(WRITE_ACCEPT);
  // THEN the write's answer is the node's metadata only, a fraction of the object
  expect(full.code).toBe(200);
  expect(partial.code).toBe(200);
  expect(JSON.parse(partial.body)).toMatchObject({ kind: 'PartialObjectMetadata', metadata: { name: 'pb-node-w', labels: { [`spin.${DOMAIN}/state`]: 'partial' } } });
  expect(partial.body.length).toBeLessThan(full.body.length / 4);
  // AND an error still answers with a JSON Status, which the client reports
  const missing = await patch(WRITE_ACCEPT, 'pb-node-missing');
  expect(missing.code).toBe(404);
  expect(JSON.parse(missing.body)).toMatchObject({ kind: 'Status', reason: 'NotFound' });
  const error = await kube.mergePatch('/api/v1/nodes/pb-node-missing', { metadata: { labels: { a: 'b' } } }).catch(e => e);
  expect(error).toBeInstanceOf(ApiError);
  expect(error).toMatchObject({ code: 404, message: expect.stringContaining('"reason":"NotFound"') });
  // AND the client's writes still do what they say
  await kube.mergePatch('/api/v1/nodes/pb-node-w', { metadata: { labels: { [`spin.${DOMAIN}/state`]: 'client' } } });
  expect((await admin.get('/api/v1/nodes/pb-node-w')).metadata.labels[`spin.${DOMAIN}/state`]).toBe('client');
});

test('a collection DELETE asks back only metadata too (a list of it), and does what it says', async () => {
  // GIVEN two Jobs with a label
  for (const name of ['pb-del-1', 'pb-del-2']) {
    await admin.request('POST', `/apis/batch/v1/namespaces/${NS}/jobs`, {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name, labels: { 'pb-del': 'yes' } },
      spec: { parallelism: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'x' }] } } },
    });
  }
  // WHEN they are deleted by a selector, as the controller removes finished installer Jobs
  await kube.deleteCollection(`/apis/batch/v1/namespaces/${NS}/jobs?labelSelector=${encodeURIComponent('pb-del=yes')}`, { propagationPolicy: 'Background' });
  // THEN the request succeeds (PartialObjectMetadata for a list is refused with 406) and they are gone
  expect((await admin.get(`/apis/batch/v1/namespaces/${NS}/jobs?labelSelector=${encodeURIComponent('pb-del=yes')}`)).items).toEqual([]);
});

test('install mode NodeAgent: Node metadata alone (labels, our annotations), a fraction of the bytes, in GETs, LISTs and watches; cordoned Nodes by a field selector', async () => {
  // GIVEN a realistic node of ours, cordoned
  await makeNode('pb-node-m', 6, { ours: true, unschedulable: true });
  // WHEN it is read as metadata only, and whole
  const metadata = await kube.getProtobuf('/api/v1/nodes/pb-node-m', PROTOBUF_METADATA);
  const whole = await kube.getProtobuf('/api/v1/nodes/pb-node-m');
  // THEN the metadata tells the same labels and annotations of ours, uid and resourceVersion as the whole Node read as JSON
  const json = await admin.get('/api/v1/nodes/pb-node-m');
  const { name, labels, annotations } = slimNode(json);
  const { uid, resourceVersion } = json.metadata;
  expect(uid).toMatch(/./);
  expect(nodeMetadataFromProto(metadata)).toEqual({ name, uid, resourceVersion, labels, annotations });
  expect(slimNodeMetadata(json)).toEqual({ name, uid, resourceVersion, labels, annotations });
  expect(Object.keys(annotations)).toEqual([`spin.${DOMAIN}/installed`]);
  // AND it is a fraction of the whole (no images, conditions, nodeInfo)
  expect(metadata.length).toBeLessThan(whole.length / 3);

  // GIVEN informers as the controller keeps them in this mode: every Node's metadata, and the cordoned ones
  const nodes = new Informer(kube, { path: '/api/v1/nodes', transform: slimNodeMetadata, decode: nodeMetadataFromProto, metadataOnly: true, pageSize: 2 });
  const cordoned = new Informer(kube, {
    path: '/api/v1/nodes', fieldSelector: 'spec.unschedulable=true', transform: (raw: any) => raw.metadata.name as string, decode: b => objectMeta(b).name, metadataOnly: true,
  });
  await Promise.all([nodes.start(), cordoned.start()]);
  try {
    // THEN the paginated list holds every node, and the cordoned list only the cordoned ones
    const all = (await admin.get('/api/v1/nodes')).items;
    expect(nodes.list().map(n => n.name).sort()).toEqual(all.map((n: any) => n.metadata.name).sort());
    expect(cordoned.list().sort()).toEqual(all.filter((n: any) => n.spec.unschedulable).map((n: any) => n.metadata.name).sort());
    expect(cordoned.get('pb-node-m')).toBe('pb-node-m');
    // WHEN the node gets a label and is uncordoned, and another node is cordoned
    await makeNode('pb-node-n', 7, {});
    await admin.patch('/api/v1/nodes/pb-node-m', { metadata: { labels: { [`spin.${DOMAIN}/state`]: 'provisioned' } }, spec: { unschedulable: null } });
    await admin.patch('/api/v1/nodes/pb-node-n', { spec: { unschedulable: true } });
    // THEN the watches deliver it: the label in the metadata, the node leaving and joining the cordoned list
    await eventually(async () => nodes.get('pb-node-m')?.labels[`spin.${DOMAIN}/state`] === 'provisioned'
      && cordoned.get('pb-node-m') === undefined && cordoned.get('pb-node-n') === 'pb-node-n' && nodes.get('pb-node-n') !== undefined,
    20_000, () => JSON.stringify({ m: nodes.get('pb-node-m'), cordoned: cordoned.list() }));
  } finally {
    nodes.stop();
    cordoned.stop();
  }
});

test('install mode NodeAgent: an agent pod\'s node and readiness read alike from protobuf and JSON; one being deleted is not ready', async () => {
  // GIVEN agent pods bound to a node: one Ready, one not, one Ready but being deleted (no kubelet here ends it)
  const agentPod = (name: string) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { 'app.kubernetes.io/component': 'node-agent' } },
    spec: { nodeName: 'pb-node-a', automountServiceAccountToken: false, containers: [{ name: 'agent', image: 'x' }] },
  });
  await admin.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts`, { metadata: { name: 'default' } }).catch(() => undefined);
  const t = '2026-11-25T10:00:00Z';
  for (const [name, ready] of [['pb-agent-ready', 'True'], ['pb-agent-starting', 'False'], ['pb-agent-leaving', 'True']]) {
    await admin.request('POST', `/api/v1/namespaces/${NS}/pods`, agentPod(name));
    await admin.request('PATCH', `/api/v1/namespaces/${NS}/pods/${name}/status`, {
      status: { phase: 'Running', startTime: t, conditions: [{ type: 'PodScheduled', status: 'True', lastTransitionTime: t }, { type: 'Ready', status: ready, lastTransitionTime: t }] },
    }, 'application/merge-patch+json');
  }
  await admin.request('DELETE', `/api/v1/namespaces/${NS}/pods/pb-agent-leaving`);
  // WHEN each is read both ways, THEN the views are equal and say what was written
  const expected: Record<string, boolean> = { 'pb-agent-ready': true, 'pb-agent-starting': false, 'pb-agent-leaving': false };
  for (const [name, ready] of Object.entries(expected)) {
    const path = `/api/v1/namespaces/${NS}/pods/${name}`;
    const fromJson = slimAgentPod(await admin.get(path));
    expect(agentPodFromProto(await kube.getProtobuf(path))).toEqual(fromJson);
    expect(fromJson).toEqual({ name, node: 'pb-node-a', ready });
  }
  expect((await admin.get(`/api/v1/namespaces/${NS}/pods/pb-agent-leaving`)).metadata.deletionTimestamp).toBeDefined();
});
