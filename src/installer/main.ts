import * as fs from 'fs';
import * as path from 'path';
import { ExitCode, InstallerError } from './errors';
import { InstallResult, Installer } from './install';
import { helpText, InstallerOptions, parseOptions } from './options';
import { forgetCompileCache, thisPlatform } from './process-env';
import { Logger } from '../shared/log';


function writeResult(file: string, result: InstallResult, log: Logger): void {
  try {
    if (!fs.existsSync(path.dirname(file))) return;
    // The termination message is capped (4096 bytes per container): keep it compact.
    let text = JSON.stringify(result);
    if (text.length > 4000) text = JSON.stringify({ ...result, state: undefined, changed: result.changed.slice(0, 5) });
    fs.writeFileSync(file, text);
  } catch (e) {
    log.warn('could not write the result file', { file, error: (e as Error).message });
  }
}

async function main(): Promise<number> {
  forgetCompileCache();
  let options: InstallerOptions | 'help';
  const jsonLogs = process.argv.includes('--json-logs') || process.env.RCM_JSON_LOGS === 'true';
  let log = new Logger(jsonLogs);
  try {
    options = parseOptions(process.argv.slice(2), process.env, thisPlatform());
  } catch (e) {
    const err = e as InstallerError;
    log.error(err.message);
    process.stderr.write('\n' + helpText() + '\n');
    return err.exitCode ?? ExitCode.BAD_INPUT;
  }
  if (options === 'help') {
    process.stdout.write(helpText() + '\n');
    return ExitCode.SUCCESS;
  }
  log = new Logger(options.jsonLogs);
  log.info(`${options.command} starting`, { handler: options.handler, hostRoot: options.hostRoot });
  try {
    const result = await new Installer(options, log).run();
    log.info(result.message, { outcome: result.outcome, changed: result.changed, timings: result.timings });
    writeResult(options.resultFile, result, log);
    if (options.command === 'status') process.stdout.write(JSON.stringify(result, null, 2) + '\n');
    return ExitCode.SUCCESS;
  } catch (e) {
    const err = e instanceof InstallerError ? e : new InstallerError(ExitCode.UNEXPECTED, 'InternalError', (e as Error).stack ?? String(e));
    log.error(err.message, { reason: err.reason, exitCode: err.exitCode });
    writeResult(options.resultFile, {
      outcome: 'failed',
      exitCode: err.exitCode,
      reason: err.reason,
      message: err.message.split('\n')[0],
      handler: options.handler,
      changed: [],
      paths: {},
      timings: {},
    }, log);
    return err.exitCode;
  }
}

void main().then(code => process.exit(code));
