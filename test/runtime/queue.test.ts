import { WorkQueue } from '../../src/runtime/queue';
import { TokenBucket } from '../../src/shared/kube/kube';

// The work queue and the client-side rate limit, on jest's fake clock.

beforeEach(() => jest.useFakeTimers({ now: 0 }));
afterEach(() => jest.useRealTimers());

test('events within the minimum interval after a reconcile are batched into one more', async () => {
  // GIVEN a queue that reconciles a key at most once per second
  const queue = new WorkQueue(200, 60_000, () => 1000);
  queue.add('spin');
  expect(await queue.next()).toBe('spin');
  queue.done('spin');
  // WHEN three events arrive right after
  queue.add('spin');
  queue.add('spin');
  queue.add('spin');
  // THEN nothing is due before the interval, and then exactly one reconcile
  expect(queue.depth).toBe(0);
  jest.advanceTimersByTime(999);
  expect(queue.depth).toBe(0);
  jest.advanceTimersByTime(1);
  expect(queue.depth).toBe(1);
  expect(await queue.next()).toBe('spin');
  expect(queue.depth).toBe(0);
  queue.stop();
});

test('other keys are not held back by one key\'s interval', async () => {
  const queue = new WorkQueue(200, 60_000, () => 1000);
  queue.add('a');
  expect(await queue.next()).toBe('a');
  queue.done('a');
  queue.add('a');
  queue.add('b');
  expect(await queue.next()).toBe('b');
  queue.stop();
});

test('the token bucket lets a burst through, then paces requests at qps', async () => {
  const bucket = new TokenBucket(10, 3);
  const granted: number[] = [];
  for (let i = 0; i < 5; i++) void bucket.take().then(() => granted.push(Date.now()));
  await jest.advanceTimersByTimeAsync(0);
  expect(granted).toEqual([0, 0, 0]);
  await jest.advanceTimersByTimeAsync(100);
  expect(granted).toEqual([0, 0, 0, 100]);
  await jest.advanceTimersByTimeAsync(100);
  expect(granted).toEqual([0, 0, 0, 100, 200]);
});
