// Tool calling through the official SDKs: openai@6's chat.completions.stream
// helper and runTools (streamed and not), @anthropic-ai/sdk's messages.stream
// with tool_use and input_json_delta, and a tool_result turn. stories260K
// never calls a tool, so the server's replies are scripted
// (startScriptedServer): each request's prompt carries the reply to play
// back, written as a Qwen2.5 model writes calls (<tool_call> blocks, the
// format of the ChatML template the server uses for this model). Everything
// else (the prompt with the tools, parsing, ids, the wire formats) is the
// real server's.
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
  server = await startScriptedServer();
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { if (server) assert.equal(await server.stop(), 0); });

// script asks the server to reply with text.
const script = (text) => `script:${Buffer.from(text).toString('base64')}`;
const call = (name, args) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

const weatherParams = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
const addParams = { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] };
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Get the weather', parameters: weatherParams } },
  { type: 'function', function: { name: 'add', description: 'Add two numbers', parameters: addParams } },
];
const twoCalls = `Let me check.\n${call('get_weather', { city: 'Paris' })}\n${call('add', { a: 2, b: 3.5 })}`;

test('openai chat.completions.stream accumulates tool calls', { skip }, async () => {
  const stream = openai.chat.completions.stream({
    model, tools, messages: [{ role: 'user', content: `Weather in Paris, and 2+3.5? ${script(twoCalls)}` }],
  });
  const done = [];
  stream.on('tool_calls.function.arguments.done', (e) => done.push([e.name, e.arguments]));
  let content = '';
  stream.on('content', (delta) => { content += delta; });
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, 'Let me check.');
  assert.equal(content, 'Let me check.');
  const calls = choice.message.tool_calls;
  assert.equal(calls.length, 2);
  assert.match(calls[0].id, /^call_/);
  assert.notEqual(calls[0].id, calls[1].id);
  assert.deepEqual(calls.map((c) => [c.type, c.function.name, JSON.parse(c.function.arguments)]),
    [['function', 'get_weather', { city: 'Paris' }], ['function', 'add', { a: 2, b: 3.5 }]]);
  assert.deepEqual(done, [['get_weather', '{"city":"Paris"}'], ['add', '{"a":2,"b":3.5}']]);
});

test('openai create, non-stream: tool_calls, null content', { skip }, async () => {
  const r = await openai.chat.completions.create({
    model, tools, tool_choice: 'auto', messages: [{ role: 'user', content: `Weather? ${script(call('get_weather', { city: 'Rome' }))}` }],
  });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.content, null);
  assert.equal(r.choices[0].message.tool_calls[0].function.arguments, '{"city":"Rome"}');
});

for (const stream of [false, true]) {
  test(`openai runTools${stream ? ', streamed' : ''}: call, result, answer`, { skip }, async () => {
    let called = null;
    const runner = openai.chat.completions.runTools({
      model,
      stream,
      messages: [{ role: 'user', content: `What is 2+3.5? ${script(call('add', { a: 2, b: 3.5 }))}` }],
      tools: [{
        type: 'function',
        function: {
          name: 'add',
          description: 'Add two numbers',
          parameters: addParams,
          parse: JSON.parse,
          function: ({ a, b }) => {
            called = [a, b];
            // the tool's result scripts the model's next reply
            return `${a + b} ${script(`The sum is ${a + b}.`)}`;
          },
        },
      }],
    });
    assert.equal(await runner.finalContent(), 'The sum is 5.5.');
    assert.deepEqual(called, [2, 3.5]);
    const msgs = runner.messages;
    assert.equal(msgs.filter((m) => m.role === 'tool').length, 1);
  });
}

test('anthropic messages.stream: tool_use blocks with input_json_delta, then a tool_result turn', { skip }, async () => {
  const antTools = [
    { name: 'get_weather', description: 'Get the weather', input_schema: weatherParams },
    { name: 'add', description: 'Add two numbers', input_schema: addParams },
  ];
  const messages = [{ role: 'user', content: `Weather in Paris, and 2+3.5? ${script(twoCalls)}` }];
  const stream = anthropic.messages.stream({ model, max_tokens: 200, tools: antTools, messages });
  const snapshots = [];
  stream.on('inputJson', (partial, snapshot) => snapshots.push(snapshot));
  const msg = await stream.finalMessage();
  assert.equal(msg.stop_reason, 'tool_use');
  assert.equal(msg.content.length, 3);
  assert.equal(msg.content[0].type, 'text');
  assert.equal(msg.content[0].text, 'Let me check.');
  const uses = msg.content.slice(1);
  assert.deepEqual(uses.map((b) => [b.type, b.name, b.input]),
    [['tool_use', 'get_weather', { city: 'Paris' }], ['tool_use', 'add', { a: 2, b: 3.5 }]]);
  for (const b of uses) assert.match(b.id, /^toolu_/);
  assert.deepEqual(snapshots, [{ city: 'Paris' }, { a: 2, b: 3.5 }]);

  const reply = await anthropic.messages.create({
    model, max_tokens: 50, tools: antTools,
    messages: [...messages, { role: 'assistant', content: msg.content }, {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: uses[0].id, content: 'sunny' },
        { type: 'tool_result', tool_use_id: uses[1].id, content: [{ type: 'text', text: `5.5 ${script('Sunny, and 5.5.')}` }] },
      ],
    }],
  });
  assert.equal(reply.stop_reason, 'end_turn');
  assert.deepEqual(reply.content.map((b) => [b.type, b.text]), [['text', 'Sunny, and 5.5.']]);
});
