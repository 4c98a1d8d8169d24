// Anthropic SDK against flowinfer serve: messages non-stream and stream
// (the SDK's event parser and MessageStream), stop sequences,
// count_tokens, and errors as the SDK's error classes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, skipReason } from './server.mjs';

const skip = skipReason() ?? false;
const KEY = 'sdk-test-key';
let server;
let client;

before(async () => {
  if (skip) return;
  server = await startServer('-c', '256', '--parallel', '4', '--api-key', KEY, '--alias', 'stories');
  client = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0 });
});
after(async () => { if (server) assert.equal(await server.stop(), 0); });

const request = (extra = {}) => ({
  model: 'stories',
  max_tokens: 10,
  system: 'You are a storyteller.',
  messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me a story.' }] }],
  ...extra,
});

test('messages, non-stream', { skip }, async () => {
  const m = await client.messages.create(request());
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, 'text');
  assert.equal(typeof m.content[0].text, 'string');
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.stop_sequence, null);
  assert.equal(m.usage.output_tokens, 10);
  assert.ok(m.usage.input_tokens + m.usage.cache_read_input_tokens > 0);
});

test('messages, stream: events and final message', { skip }, async () => {
  const whole = await client.messages.create(request());
  const events = [];
  let text = '';
  const stream = client.messages.stream(request());
  stream.on('streamEvent', (e) => { if (events.at(-1) !== e.type) events.push(e.type); });
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.deepEqual(events, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  assert.equal(text, whole.content[0].text);
  assert.equal(final.content[0].text, whole.content[0].text);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 10);

  // Raw events with stream: true (the SDK drops ping events itself).
  const raw = await client.messages.create(request({ stream: true }));
  const types = [];
  let rawText = '';
  for await (const e of raw) {
    if (types.at(-1) !== e.type) types.push(e.type);
    if (e.type === 'content_block_delta') rawText += e.delta.text;
  }
  assert.deepEqual(types, events);
  assert.equal(rawText, text);
});

test('stop sequences', { skip }, async () => {
  const whole = (await client.messages.create(request())).content[0].text;
  assert.ok(whole.length > 4, whole);
  const stop = whole.slice(2, 4);
  const m = await client.messages.create(request({ stop_sequences: [stop] }));
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content[0].text, whole.slice(0, whole.indexOf(stop)));
  const final = await client.messages.stream(request({ stop_sequences: [stop] })).finalMessage();
  assert.equal(final.stop_reason, 'stop_sequence');
  assert.equal(final.content[0].text, m.content[0].text);
});

test('count_tokens', { skip }, async () => {
  const { max_tokens, ...req } = request();
  const c = await client.messages.countTokens(req);
  const m = await client.messages.create(request());
  assert.equal(c.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('errors surface as the SDK error classes', { skip }, async () => {
  const bad = new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create(request()),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 && e.error?.error?.type === 'authentication_error');
  await assert.rejects(client.messages.create(request({ model: 'claude-9' })),
    (e) => e instanceof Anthropic.NotFoundError && e.status === 404);
  const { max_tokens, ...noMax } = request();
  await assert.rejects(client.messages.create(noMax),
    (e) => e instanceof Anthropic.BadRequestError && /max_tokens/.test(e.message));
  await assert.rejects(client.messages.create(request({ messages: [{ role: 'user', content: 'tale '.repeat(300) }] })),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error');
  await assert.rejects(client.messages.stream(request({ temperature: 'hot' })).finalMessage(),
    (e) => e instanceof Anthropic.BadRequestError);
});
