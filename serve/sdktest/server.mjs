// server.mjs: starts a real `flowinfer serve` for the SDK tests: the binary
// from $FLOWINFER_BIN or built with `go build`, on stories260K from the
// golden data ($FLOWINFER_MODEL or shared/golden found by walking up), on a
// free loopback port. Without the model the tests skip, except under
// CI=true, where they fail.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');

function findModel() {
  if (process.env.FLOWINFER_MODEL) return process.env.FLOWINFER_MODEL;
  for (let dir = repo; ; dir = dirname(dir)) {
    const p = join(dir, 'shared', 'golden', 'models', 'stories260K.gguf');
    if (existsSync(p)) return p;
    if (dirname(dir) === dir) return null;
  }
}

let binary;
function flowinferBinary() {
  if (process.env.FLOWINFER_BIN) return process.env.FLOWINFER_BIN;
  if (!binary) {
    binary = join(mkdtempSync(join(tmpdir(), 'flowinfer-sdk-')), 'flowinfer');
    execFileSync('go', ['build', '-o', binary, './cmd/flowinfer'], { cwd: repo, stdio: 'inherit' });
  }
  return binary;
}

// skipReason says why the tests cannot run here, or null.
export function skipReason() {
  if (findModel()) return null;
  if (process.env.CI === 'true') throw new Error('stories260K.gguf not found (set FLOWINFER_MODEL); required under CI=true');
  return 'stories260K.gguf not found (../shared/golden); set FLOWINFER_MODEL';
}

// startServer runs flowinfer serve with extra flags and resolves to
// { url, stop } once the model is loaded.
export function startServer(...flags) {
  const args = ['serve', '-m', findModel(), '--host', '127.0.0.1', '--port', '0', '--temp', '0', ...flags];
  const proc = spawn(flowinferBinary(), args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`server not ready:\n${log}`)), 30000);
    proc.stderr.on('data', (b) => {
      log += b;
      const m = /serving .* on (http:\/\/\S+) /.exec(log);
      if (m) {
        clearTimeout(timer);
        ok({
          url: m[1],
          log: () => log,
          stop: () => new Promise((done) => {
            if (proc.exitCode !== null) return done(proc.exitCode);
            proc.once('exit', (code) => done(code));
            proc.kill('SIGTERM');
          }),
        });
      }
    });
    proc.once('exit', (code) => { clearTimeout(timer); fail(new Error(`server exited (${code}):\n${log}`)); });
  });
}

// metric reads one value from /metrics.
export async function metric(url, key, name) {
  const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line ? Number(line.split(' ')[1]) : NaN;
}

// startScriptedServer runs the scripted server of the tool-calling tests
// (TestScriptedServer in serve/scripted_test.go, from the serve package's
// test binary): the model's replies are the base64 text after the last
// "script:" in the prompt, since stories260K never calls a tool by itself.
// Resolves to { url, stop } once it listens; it stops when its stdin
// closes. template: the name of a chat template in
// model/chat/testdata/templates to use instead of the model's.
export function startScriptedServer(template = '') {
  const bin = join(mkdtempSync(join(tmpdir(), 'flowinfer-sdk-')), 'serve.test');
  execFileSync('go', ['test', '-c', '-o', bin, './serve'], { cwd: repo, stdio: 'inherit' });
  const proc = spawn(bin, ['-test.run', '^TestScriptedServer$', '-test.v'], {
    cwd: join(repo, 'serve'), env: { ...process.env, FLOWINFER_SCRIPTED_SERVER: '1', FLOWINFER_SCRIPTED_TEMPLATE: template }, stdio: ['pipe', 'pipe', 'pipe'],
  });
  let log = '';
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`scripted server not ready:\n${log}`)), 300000);
    const onData = (b) => {
      log += b;
      const m = /scripted server on (http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        ok({
          url: m[1],
          log: () => log,
          stop: () => new Promise((done) => {
            if (proc.exitCode !== null) return done(proc.exitCode);
            proc.once('exit', (code) => done(code));
            proc.stdin.end();
          }),
        });
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', (b) => { log += b; });
    proc.once('exit', (code) => { clearTimeout(timer); fail(new Error(`scripted server exited (${code}):\n${log}`)); });
  });
}
