// Tool calling and parsed structured outputs through the official OpenAI Node SDK, against
// `pagedserve serve` with stories260K. The model knows nothing of tools: tool_choice
// "required" and a named function are enforced by the grammar engine, so every call must be
// well formed; Ajv (independent of pagedserve) checks the arguments against each tool's schema.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startServer } from './server.mjs';

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 16 }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      description: 'Adds two integers',
      parameters: {
        type: 'object',
        properties: { a: { type: 'integer', minimum: -1000, maximum: 1000 }, b: { type: 'integer', minimum: -1000, maximum: 1000 } },
        required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
];
const MESSAGES = [{ role: 'user', content: 'What is the weather in Paris, and what is 2 + 3?' }];

let server;
let client;
const ajv = new Ajv({ strict: false });
const validators = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { await server?.stop(); });

function checkCalls(calls, allowedNames) {
  assert.ok(Array.isArray(calls) && calls.length >= 1, JSON.stringify(calls));
  const ids = new Set();
  for (const call of calls) {
    assert.equal(call.type, 'function');
    assert.equal(typeof call.id, 'string');
    assert.ok(call.id.length > 0 && !ids.has(call.id), `ids must be unique: ${call.id}`);
    ids.add(call.id);
    assert.ok(allowedNames.includes(call.function.name), call.function.name);
    assert.equal(typeof call.function.arguments, 'string');
    const args = JSON.parse(call.function.arguments);
    assert.ok(validators[call.function.name](args), `${call.function.name}(${call.function.arguments})`);
  }
}

test('tool_choice required: every answer is a valid call', async () => {
  for (let seed = 0; seed < 20; ++seed) {
    const completion = await client.chat.completions.create({
      model: 'stories260K', messages: MESSAGES, tools: TOOLS, tool_choice: 'required', max_tokens: 300, seed,
    });
    const choice = completion.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    checkCalls(choice.message.tool_calls, ['get_weather', 'add']);
  }
});

test('a named function is the one called, once with parallel_tool_calls false', async () => {
  for (let seed = 0; seed < 10; ++seed) {
    const completion = await client.chat.completions.create({
      model: 'stories260K', messages: MESSAGES, tools: TOOLS, max_tokens: 300, seed,
      tool_choice: { type: 'function', function: { name: 'add' } }, parallel_tool_calls: false,
    });
    const calls = completion.choices[0].message.tool_calls;
    checkCalls(calls, ['add']);
    assert.equal(calls.length, 1);
  }
});

test('streamed tool calls reassemble to the non-streamed ones (same seed)', async () => {
  const request = { model: 'stories260K', messages: MESSAGES, tools: TOOLS, tool_choice: 'required', max_tokens: 300, seed: 11 };
  const whole = (await client.chat.completions.create(request)).choices[0];
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    for (const delta of choice.delta.tool_calls ?? []) {
      if (!calls[delta.index]) {
        assert.ok(delta.id && delta.function?.name, `the first delta of a call names it: ${JSON.stringify(delta)}`);
        calls[delta.index] = { id: delta.id, type: 'function', function: { name: delta.function.name, arguments: '' } };
      }
      calls[delta.index].function.arguments += delta.function?.arguments ?? '';
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(calls.map((c) => [c.function.name, c.function.arguments]),
                   whole.message.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  checkCalls(calls, ['get_weather', 'add']);
});

test('the SDK stream helper sees the calls too', async () => {
  const runner = client.chat.completions.stream({
    model: 'stories260K', messages: MESSAGES, tools: TOOLS, tool_choice: 'required', max_tokens: 300, seed: 5,
  });
  const final = await runner.finalChatCompletion();
  checkCalls(final.choices[0].message.tool_calls, ['get_weather', 'add']);
});

test('a tool result goes back and the conversation continues', async () => {
  const first = await client.chat.completions.create({
    model: 'stories260K', messages: MESSAGES, tools: TOOLS, tool_choice: 'required', max_tokens: 300, seed: 3,
  });
  const message = first.choices[0].message;
  const results = message.tool_calls.map((call) => ({ role: 'tool', tool_call_id: call.id, content: '{"result": 5}' }));
  const second = await client.chat.completions.create({
    model: 'stories260K', messages: [...MESSAGES, message, ...results], tools: TOOLS, max_tokens: 20, seed: 3,
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(second.choices[0].finish_reason));
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
});

test('tool_choice none and auto leave the model free', async () => {
  for (const tool_choice of ['none', 'auto']) {
    const completion = await client.chat.completions.create({
      model: 'stories260K', messages: MESSAGES, tools: TOOLS, tool_choice, max_tokens: 20, seed: 1,
    });
    const choice = completion.choices[0];
    assert.equal(typeof choice.message.content, 'string');
    assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
  }
});

test('chat.completions.parse returns a parsed object', async () => {
  const Person = z.object({ name: z.string().max(20), age: z.number().int().min(0).max(99), pets: z.array(z.enum(['cat', 'dog'])).max(3) });
  for (let seed = 0; seed < 5; ++seed) {
    const completion = await client.chat.completions.parse({
      model: 'stories260K', messages: [{ role: 'user', content: 'Describe Lily.' }],
      response_format: zodResponseFormat(Person, 'person'), max_tokens: 300, seed,
    });
    const parsed = completion.choices[0].message.parsed;
    assert.ok(parsed, JSON.stringify(completion.choices[0]));
    assert.deepEqual(Person.parse(parsed), parsed);
  }
});

test('bad tools are 400s naming the field', async () => {
  const cases = [
    [{ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, /tools\[0\]/],
    [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }, /nope/],
    [{ tool_choice: 'required' }, /tools/],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'string', multipleOf: 2 } } } } }], tool_choice: 'required' }, /multipleOf/],
  ];
  for (const [extra, pattern] of cases) {
    await assert.rejects(
      client.chat.completions.create({ model: 'stories260K', messages: MESSAGES, max_tokens: 5, ...extra }),
      (error) => error.status === 400 && pattern.test(error.message));
  }
});
