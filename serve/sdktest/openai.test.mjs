// OpenAI SDK (openai@6) against flowinfer serve: chat and completions,
// non-stream and stream, usage, stop sequences, models, embeddings, and
// errors as the SDK's error classes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, skipReason, metric } from './server.mjs';

const skip = skipReason() ?? false;
const KEY = 'sdk-test-key';
let server;
let client;

before(async () => {
  if (skip) return;
  server = await startServer('-c', '256', '--parallel', '4', '--api-key', KEY, '--alias', 'stories');
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
});
after(async () => { if (server) assert.equal(await server.stop(), 0); });

const messages = [
  { role: 'system', content: 'You are a storyteller.' },
  { role: 'user', content: 'Tell me a story.' },
];

test('chat completion, non-stream', { skip }, async () => {
  const r = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 12 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  assert.ok(r.system_fingerprint);
});

test('chat completion, stream with usage equals non-stream', { skip }, async () => {
  const whole = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 10 });
  const stream = await client.chat.completions.create({
    model: 'stories', messages, max_tokens: 10, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let role = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) {
      assert.deepEqual(chunk.choices, []);
      usage = chunk.usage;
      continue;
    }
    const c = chunk.choices[0];
    role ??= c.delta.role;
    text += c.delta.content ?? '';
    finish = c.finish_reason ?? finish;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 10);
  // The same prompt again: served from the prefix cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(usage));
});

test('chat stream helper (finalChatCompletion)', { skip }, async () => {
  const runner = client.chat.completions.stream({ model: 'stories', messages, max_tokens: 6 });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'length');
  assert.equal(typeof final.choices[0].message.content, 'string');
});

test('completions: text, stop sequences, stream', { skip }, async () => {
  const r = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 8 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, ', there was a little girl');
  assert.equal(r.choices[0].finish_reason, 'length');

  const s = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 20, stop: ['xyz', 'girl na'] });
  assert.equal(s.choices[0].text, ', there was a little ');
  assert.equal(s.choices[0].finish_reason, 'stop');

  const stream = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 8, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, ', there was a little girl');
});

test('chat stop sequence', { skip }, async () => {
  const whole = (await client.chat.completions.create({ model: 'stories', messages, max_tokens: 12 })).choices[0].message.content;
  assert.ok(whole.length > 4, whole);
  const stop = whole.slice(2, 4);
  const r = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 12, stop });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.content, whole.slice(0, whole.indexOf(stop)));
});

test('models list', { skip }, async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['stories']);
});

test('embeddings.create: base64 (the SDK default) and float, list input, usage', { skip }, async () => {
  const texts = ['Once upon a time', 'The cat sat on the mat.', 'One day'];
  // the SDK asks for base64 when encoding_format is not given, and decodes it
  const b64 = await client.embeddings.create({ model: 'stories', input: texts });
  const flt = await client.embeddings.create({ model: 'stories', input: texts, encoding_format: 'float' });
  for (const r of [b64, flt]) {
    assert.equal(r.object, 'list');
    assert.equal(r.model, 'stories');
    assert.equal(r.data.length, texts.length);
    assert.ok(r.usage.prompt_tokens >= texts.length);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
  }
  assert.equal(b64.usage.prompt_tokens, flt.usage.prompt_tokens);
  for (let i = 0; i < texts.length; i++) {
    const a = b64.data[i];
    const b = flt.data[i];
    assert.equal(a.object, 'embedding');
    assert.equal(a.index, i);
    assert.equal(b.index, i);
    assert.ok(Array.isArray(a.embedding) && a.embedding.length > 0);
    // two requests: equal up to float32 rounding (the fast backend's
    // kernels depend on the batch shape, and the second run finds the
    // prompts cached)
    assert.equal(a.embedding.length, b.embedding.length);
    const d = Math.max(...a.embedding.map((x, k) => Math.abs(x - b.embedding[k])));
    assert.ok(d < 1e-5, `base64 and float differ by ${d}`);
    const norm = Math.hypot(...a.embedding);
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
  }
  // one input alone: the same vector, and its own token count
  const one = await client.embeddings.create({ model: 'stories', input: texts[1], encoding_format: 'float' });
  const d1 = Math.max(...one.data[0].embedding.map((x, k) => Math.abs(x - flt.data[1].embedding[k])));
  assert.ok(d1 < 1e-5, `alone and in a list differ by ${d1}`);
  assert.ok(one.usage.prompt_tokens > 0 && one.usage.prompt_tokens < flt.usage.prompt_tokens);
  await assert.rejects(client.embeddings.create({ model: 'stories', input: 'x', dimensions: 8 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
});

test('errors surface as the SDK error classes', { skip }, async () => {
  const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model: 'stories', messages, max_tokens: 2 }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key');
  await assert.rejects(client.chat.completions.create({ model: 'gpt-9', messages, max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found' && e.param === 'model');
  await assert.rejects(client.chat.completions.create({ model: 'stories', messages, n: 17 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n' && e.type === 'invalid_request_error');
  await assert.rejects(client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'tale '.repeat(300) }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  await assert.rejects(client.chat.completions.create({ model: 'stories', messages: [], stream: true }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
  await assert.rejects(client.completions.create({ model: 'stories', prompt: 'x', temperature: 'hot' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
});

test('an aborted stream frees its sequence', { skip }, async () => {
  const ac = new AbortController();
  const stream = await client.completions.create(
    { model: 'stories', prompt: 'Once upon a time', max_tokens: 250, stream: true, logit_bias: { 2: -100 } },
    { signal: ac.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) ac.abort();
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
  }
  assert.ok(n >= 3); // chunks already received may still come out
  for (let i = 0; i < 200 && await metric(server.url, KEY, 'flowinfer_running_sequences') !== 0; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(await metric(server.url, KEY, 'flowinfer_running_sequences'), 0);
  assert.equal(await metric(server.url, KEY, 'flowinfer_kv_blocks_used'), 0);
});

test('a full queue is a RateLimitError', { skip }, async () => {
  // One sequence, a queue of one, and a long generation holding it.
  const busy = await startServer('-c', '2048', '--parallel', '1', '--queue', '1', '--alias', 'stories');
  try {
    const c = new OpenAI({ baseURL: `${busy.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const ac = new AbortController();
    const long = await c.completions.create(
      { model: 'stories', prompt: 'Once upon a time', max_tokens: 2000, stream: true, logit_bias: { 2: -100 } }, { signal: ac.signal });
    const reader = long[Symbol.asyncIterator]();
    await reader.next();
    const tries = [];
    for (let i = 0; i < 8; i++) {
      tries.push(c.completions.create({ model: 'stories', prompt: 'Hi', max_tokens: 1 }).then(() => null, (e) => e));
      await new Promise((r) => setTimeout(r, 30));
    }
    ac.abort();
    const errs = (await Promise.all(tries)).filter(Boolean);
    assert.ok(errs.length > 0, 'no request was refused');
    for (const e of errs) {
      assert.ok(e instanceof OpenAI.RateLimitError, String(e));
      assert.equal(e.status, 429);
      assert.ok(Number(e.headers.get('retry-after')) > 0);
    }
  } finally {
    await busy.stop();
  }
});
