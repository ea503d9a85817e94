// The installer as the node agent runs it: in one long-running process, each install a call
// (runInstallerInProcess), no process start. Reads one JSON array of installer arguments per
// line on stdin and answers each with one JSON line on stdout: the call's wall time (ms) and
// the installer's result. Bundled and driven by bench/installer.bench.ts.
import * as readline from 'readline';
import { runInstallerInProcess } from '../src/agent/node-agent';
import { thisPlatform } from '../src/installer/process-env';
import { Logger } from '../src/shared/log';

const log = new Logger(true);
const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on('line', line => {
  queue = queue.then(async () => {
    const argv = JSON.parse(line) as string[];
    const t = process.hrtime.bigint();
    let result: unknown;
    try {
      result = await runInstallerInProcess(argv, process.env, thisPlatform(), log);
    } catch (e) {
      result = { outcome: 'failed', message: (e as Error).message };
    }
    process.stdout.write(JSON.stringify({ ms: Number(process.hrtime.bigint() - t) / 1e6, result }) + '\n');
  });
});
