// Hooks for the fault tests; unset, they do nothing.

/**
 * A test hook (fault tests kill the installer at named steps): with RCM_TEST_PAUSE_AT=STEP
 * the installer says so on stderr and waits at STEP until SIGTERM. Unset, it does nothing.
 */
export async function pauseForTests(step: string): Promise<void> {
  if (process.env.RCM_TEST_PAUSE_AT !== step) return;
  process.stderr.write(`paused at ${step}\n`);
  await new Promise<void>(resolve => {
    const keepAlive = setInterval(() => undefined, 60_000);
    process.once('SIGTERM', () => {
      clearInterval(keepAlive);
      resolve();
    });
  });
}

