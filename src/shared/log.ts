/** Logs on stderr: human-readable, or one JSON object per line with --json-logs. */
export class Logger {
  constructor(private readonly json: boolean) {}

  info(message: string, fields: Record<string, unknown> = {}): void {
    this.write('info', message, fields);
  }

  warn(message: string, fields: Record<string, unknown> = {}): void {
    this.write('warn', message, fields);
  }

  error(message: string, fields: Record<string, unknown> = {}): void {
    this.write('error', message, fields);
  }

  private write(level: string, message: string, fields: Record<string, unknown>): void {
    if (this.json) {
      process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level, msg: message, ...fields }) + '\n');
    } else {
      const extra = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ');
      process.stderr.write(`${level.toUpperCase().padEnd(5)} ${message}${extra ? ' ' + extra : ''}\n`);
    }
  }
}
