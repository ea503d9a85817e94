import { FlagError, FlagSpec, keyValues, parseFlags, wholeNumber } from '../../src/shared/flags';

// The flag parser both programs share: flags over RCM_* variables, flags win.

const SPECS: FlagSpec[] = [
  { name: 'handler', arg: 'NAME', help: '' },
  { name: 'runtime-option', arg: 'KEY=VALUE', repeat: true, help: '' },
  { name: 'json-logs', help: '' },
  { name: 'help', help: '' },
];

test('flags win over the environment; a repeated flag replaces the environment\'s list', () => {
  const env = { RCM_HANDLER: 'from-env', RCM_RUNTIME_OPTION: 'A=1\n  B=2  \n\n' };
  expect(parseFlags(SPECS, [], env)).toEqual({ single: { handler: 'from-env' }, repeated: { 'runtime-option': ['A=1', 'B=2'] }, positional: [] });
  expect(parseFlags(SPECS, ['install', '--handler', 'spin', '--runtime-option=C=3', '--runtime-option', 'D=4', '--json-logs'], env)).toEqual({
    single: { 'handler': 'spin', 'json-logs': 'true' },
    repeated: { 'runtime-option': ['C=3', 'D=4'] },
    positional: ['install'],
  });
});

test('--help, unknown flags and missing values', () => {
  expect(parseFlags(SPECS, ['--handler=x', '--help'], {})).toBe('help');
  expect(() => parseFlags(SPECS, ['--bogus'], {})).toThrow(new FlagError('unknown flag --bogus (see --help)'));
  expect(() => parseFlags(SPECS, ['--handler'], {})).toThrow('--handler needs a value (NAME)');
});

test('whole numbers and KEY=VALUE entries', () => {
  expect(wholeNumber(undefined, 'workers', 4)).toBe(4);
  expect(wholeNumber('0', 'retries', 3, 0)).toBe(0);
  for (const bad of ['0', '-1', '1.5', '1e1', ' 2', 'x']) expect(() => wholeNumber(bad, 'workers', 4)).toThrow(`--workers: "${bad}" is not a whole number >= 1`);
  expect(keyValues(['A=1', 'B=x=y'], 'installer-env')).toEqual({ A: '1', B: 'x=y' });
  expect(() => keyValues(['=1'], 'installer-env')).toThrow('--installer-env: "=1" is not KEY=VALUE');
});
