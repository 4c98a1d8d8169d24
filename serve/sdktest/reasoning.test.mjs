// Reasoning through the official SDKs: openai@6's chat completions (the
// reasoning_content field llama-server adds, streamed and not) and
// responses.stream (reasoning items, response.reasoning_text.delta), and
// @anthropic-ai/sdk's messages.stream (thinking blocks, thinking_delta).
// The scripted server (startScriptedServer) renders prompts with
// Qwen3.5's chat template, which opens <think> in the prompt, and plays
// back the reply written in the prompt, as a Qwen3.5 model writes it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startScriptedServer, skipReason } from './server.mjs';

const skip = skipReason() ?? false;
const model = 'stories260K';
let server;
let openai;
let anthropic;

before(async () => {
  if (skip) return;
  server = await startScriptedServer('Qwen3.5-4B');
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { if (server) assert.equal(await server.stop(), 0); });

const script = (text) => `script:${Buffer.from(text).toString('base64')}`;
const thought = 'The capital of France\nis Paris.';
const ask = `Capital of France? ${script(`${thought}\n</think>\n\nParis.`)}`;

test('openai chat.completions: reasoning_content beside the content', { skip }, async () => {
  const res = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: ask }] });
  assert.equal(res.choices[0].message.reasoning_content, thought);
  assert.equal(res.choices[0].message.content, 'Paris.');
});

test('openai chat.completions.stream: reasoning_content deltas, then content', { skip }, async () => {
  const stream = openai.chat.completions.stream({ model, messages: [{ role: 'user', content: ask }] });
  let reasoning = '';
  let content = '';
  stream.on('chunk', (c) => { reasoning += c.choices[0]?.delta?.reasoning_content ?? ''; });
  stream.on('content', (d) => { content += d; });
  const final = await stream.finalChatCompletion();
  assert.equal(reasoning, thought);
  assert.equal(content, 'Paris.');
  assert.equal(final.choices[0].message.content, 'Paris.');
});

test('anthropic messages.stream: a thinking block, then the text', { skip }, async () => {
  const stream = anthropic.messages.stream({
    model, max_tokens: 200, thinking: { type: 'adaptive' }, messages: [{ role: 'user', content: ask }],
  });
  let thinking = '';
  stream.on('thinking', (delta) => { thinking += delta; });
  const msg = await stream.finalMessage();
  assert.equal(thinking, thought);
  assert.deepEqual(msg.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(msg.content[0].thinking, thought);
  assert.equal(msg.content[1].text, 'Paris.');
});

test('anthropic messages.create: thinking block first; thinking disabled switches it off', { skip }, async () => {
  const msg = await anthropic.messages.create({ model, max_tokens: 200, messages: [{ role: 'user', content: ask }] });
  assert.deepEqual(msg.content.map((b) => b.type), ['thinking', 'text']);
  const off = await anthropic.messages.create({
    model, max_tokens: 200, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: `Capital? ${script('Paris.')}` }],
  });
  assert.deepEqual(off.content, [{ type: 'text', text: 'Paris.' }]);
  await assert.rejects(anthropic.messages.create({
    model, max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: ask }],
  }), (e) => e.status === 400 && /thinking\.budget_tokens/.test(e.message));
});

test('openai responses.stream: a reasoning item, then the message', { skip }, async () => {
  const stream = openai.responses.stream({ model, input: ask });
  let reasoning = '';
  stream.on('response.reasoning_text.delta', (e) => { reasoning += e.delta; });
  const res = await stream.finalResponse();
  assert.equal(reasoning, thought);
  assert.deepEqual(res.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(res.output[0].content[0].text, thought);
  assert.equal(res.output_text, 'Paris.');
  assert.ok(res.usage.output_tokens_details.reasoning_tokens > 0);
});
