// The Responses API (/v1/responses) through the official openai SDK against
// a real server (stories260K): responses.create and responses.stream
// (finalResponse) with text.format json_schema at temperature 1 over
// several seeds, a forced function call (tool_choice required) streamed
// and not, its output items sent back as input with the call's output,
// store: false, and the 400s for previous_response_id and store: true.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, skipReason } from './server.mjs';

const skip = skipReason() ?? false;
let server;
let openai;

before(async () => {
  if (skip) return;
  server = await startServer('-c', '1024', '--parallel', '4', '--alias', 'stories');
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
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

// messageText returns the text of a response's one message item.
function messageText(r) {
  const msgs = r.output.filter((o) => o.type === 'message');
  assert.equal(msgs.length, 1, JSON.stringify(r.output));
  assert.equal(msgs[0].role, 'assistant');
  assert.match(msgs[0].id, /^msg_/);
  assert.equal(msgs[0].content[0].type, 'output_text');
  return msgs[0].content.map((c) => c.text).join('');
}

const input = 'Tell me about a person.';
const seeds = [1, 2, 3, 4, 5];
const text = { format: { type: 'json_schema', name: 'person', strict: true, schema } };

test('responses.create and responses.stream with text.format json_schema', { skip }, async () => {
  for (const seed of seeds) {
    const r = await openai.responses.create({ model: 'stories', input, temperature: 1, seed, max_output_tokens: 400, text });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, 'completed');
    assert.equal(r.text.format.type, 'json_schema');
    assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    valid(JSON.parse(messageText(r)));
    assert.equal(r.output_text, messageText(r)); // the SDK's convenience

    const stream = openai.responses.stream({ model: 'stories', input, temperature: 1, seed, max_output_tokens: 400, text });
    let deltas = '';
    stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
    const done = await stream.finalResponse();
    assert.equal(done.status, 'completed');
    const t = messageText(done);
    assert.equal(deltas, t);
    valid(JSON.parse(t));
  }
});

test('forced function call (tool_choice required), create and stream', { skip }, async () => {
  const tools = [{ type: 'function', name: 'add_person', description: 'Add a person', parameters: schema, strict: true }];
  for (const seed of seeds) {
    const req = { model: 'stories', input, temperature: 1, seed, max_output_tokens: 400, tools, tool_choice: 'required', parallel_tool_calls: false };
    const r = await openai.responses.create(req);
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, 1, JSON.stringify(r.output));
    assert.equal(calls[0].name, 'add_person');
    assert.match(calls[0].call_id, /^call_/);
    assert.match(calls[0].id, /^fc_/);
    valid(JSON.parse(calls[0].arguments));
    if (seed === seeds[0]) {
      // the output items go back as input, with the call's output
      const next = await openai.responses.create({
        model: 'stories', temperature: 0, max_output_tokens: 8, tools: [{ ...tools[0], strict: false }],
        input: [{ role: 'user', content: input }, ...r.output, { type: 'function_call_output', call_id: calls[0].call_id, output: '{"ok":true}' }],
      });
      assert.ok(next.output.length > 0, JSON.stringify(next));
    }

    const stream = openai.responses.stream(req);
    let argDeltas = 0;
    stream.on('response.function_call_arguments.delta', () => { argDeltas++; });
    const done = await stream.finalResponse();
    const scalls = done.output.filter((o) => o.type === 'function_call');
    assert.equal(scalls.length, 1, JSON.stringify(done.output));
    assert.ok(argDeltas > 0, 'no function_call_arguments.delta');
    assert.equal(scalls[0].status, 'completed');
    valid(JSON.parse(scalls[0].arguments));
    valid(scalls[0].parsed_arguments); // strict: parsed by the SDK
  }
});

test('store: false, input items, and what is refused', { skip }, async () => {
  const r = await openai.responses.create({
    model: 'stories', store: false, instructions: 'Tell a story.', max_output_tokens: 8, temperature: 0,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }],
  });
  assert.equal(r.store, false);
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.ok(messageText(r).length > 0);

  await assert.rejects(openai.responses.create({ model: 'stories', input: 'x', previous_response_id: 'resp_1' }),
    (e) => e.status === 400 && e.param === 'previous_response_id');
  await assert.rejects(openai.responses.create({ model: 'stories', input: 'x', store: true }),
    (e) => e.status === 400 && e.param === 'store');
});
