// Constrained output through the official SDKs against a real server
// (stories260K, temperature 1, several seeds): OpenAI response_format
// json_schema (create and stream), a forced tool call through
// chat.completions.stream, and Anthropic's messages.stream with a forced
// tool_use: every reply parses and is valid against its schema.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, skipReason } from './server.mjs';

const skip = skipReason() ?? false;
let server;
let openai;
let anthropic;

before(async () => {
  if (skip) return;
  server = await startServer('-c', '1024', '--parallel', '4', '--alias', 'stories');
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'none', maxRetries: 0 });
});
after(async () => { if (server) assert.equal(await server.stop(), 0); });

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, maxItems: 3 },
  },
  required: ['name', 'age'],
  additionalProperties: false,
};

// valid checks a parsed value against schema.
function valid(v) {
  assert.equal(typeof v, 'object');
  for (const k of Object.keys(v)) assert.ok(['name', 'age', 'tags'].includes(k), `extra property ${k}`);
  assert.equal(typeof v.name, 'string');
  assert.ok([...v.name].length <= 12, `name ${v.name}`);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, `age ${v.age}`);
  if ('tags' in v) {
    assert.ok(Array.isArray(v.tags) && v.tags.length <= 3);
    for (const t of v.tags) assert.ok(['a', 'b', 'c'].includes(t));
  }
}

const messages = [{ role: 'user', content: 'Tell me about a person.' }];
const seeds = [1, 2, 3, 4, 5];

test('openai response_format json_schema, create and stream', { skip }, async () => {
  const response_format = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } };
  for (const seed of seeds) {
    const r = await openai.chat.completions.create({ model: 'stories', messages, temperature: 1, seed, max_tokens: 400, response_format });
    assert.equal(r.choices[0].finish_reason, 'stop');
    valid(JSON.parse(r.choices[0].message.content));
    const stream = openai.chat.completions.stream({ model: 'stories', messages, temperature: 1, seed, max_tokens: 400, response_format });
    const done = await stream.finalChatCompletion();
    valid(JSON.parse(done.choices[0].message.content));
  }
});

test('openai forced tool call through chat.completions.stream', { skip }, async () => {
  const tools = [{ type: 'function', function: { name: 'add_person', parameters: schema, strict: true } }];
  for (const seed of seeds) {
    const stream = openai.chat.completions.stream({
      model: 'stories', messages, temperature: 1, seed, max_tokens: 400, tools,
      tool_choice: { type: 'function', function: { name: 'add_person' } },
    });
    const done = await stream.finalChatCompletion();
    assert.equal(done.choices[0].finish_reason, 'tool_calls');
    const calls = done.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, 'add_person');
    valid(JSON.parse(calls[0].function.arguments));
  }
});

test('anthropic messages.stream with a forced tool_use', { skip }, async () => {
  for (const seed of seeds) {
    let deltas = 0;
    const stream = anthropic.messages.stream({
      model: 'stories', max_tokens: 400, temperature: 1, // Anthropic has no seed: the server's random one
      tools: [{ name: 'add_person', input_schema: schema }],
      tool_choice: { type: 'tool', name: 'add_person' },
      messages,
    });
    stream.on('inputJson', () => { deltas++; });
    const msg = await stream.finalMessage();
    assert.equal(msg.stop_reason, 'tool_use');
    const uses = msg.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.ok(deltas > 0, 'no input_json_delta');
    valid(uses[0].input);
  }
});
