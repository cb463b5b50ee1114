// Structured outputs end to end: stories260K (a model that knows nothing of JSON) answers 100
// requests per schema through response_format json_schema, and every answer must parse and
// validate against its schema by Ajv, a validator independent of pagedserve's grammar engine.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

const SCHEMAS = {
  nested_object: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 24 },
      address: {
        type: 'object',
        properties: { city: { type: 'string', minLength: 1, maxLength: 20 },
                      zip: { type: 'string', pattern: '^[0-9]{5}$' } },
        required: ['city', 'zip'],
        additionalProperties: false,
      },
    },
    required: ['name', 'address'],
    additionalProperties: false,
  },
  array_of_strings: {
    type: 'object',
    properties: { tags: { type: 'array', items: { type: 'string', maxLength: 12 }, minItems: 1, maxItems: 4 } },
    required: ['tags'],
    additionalProperties: false,
  },
  enums: {
    type: 'object',
    properties: { color: { enum: ['red', 'green', 'blue'] }, size: { type: 'string', enum: ['S', 'M', 'L', 'XL'] },
                  ok: { type: 'boolean' } },
    required: ['color', 'size', 'ok'],
    additionalProperties: false,
  },
  numbers: {
    type: 'object',
    properties: { age: { type: 'integer', minimum: 0, maximum: 120 }, score: { type: 'number' },
                  count: { type: 'integer', minimum: -5, maximum: 5 } },
    required: ['age', 'score', 'count'],
    additionalProperties: false,
  },
  string_patterns: {
    type: 'object',
    properties: { code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{3}$' },
                  date: { type: 'string', format: 'date' },
                  word: { type: 'string', pattern: '^[a-z]{1,10}$' } },
    required: ['code', 'date', 'word'],
    additionalProperties: false,
  },
  any_of: {
    type: 'object',
    properties: { value: { anyOf: [{ type: 'integer', minimum: 0, maximum: 999 }, { type: 'string', maxLength: 8 }, { type: 'null' }] } },
    required: ['value'],
    additionalProperties: false,
  },
  refs_and_arrays: {
    $defs: { point: { type: 'object', properties: { x: { type: 'integer', minimum: -99, maximum: 99 },
                                                     y: { type: 'integer', minimum: -99, maximum: 99 } },
                      required: ['x', 'y'], additionalProperties: false } },
    type: 'object',
    properties: { path: { type: 'array', items: { $ref: '#/$defs/point' }, minItems: 2, maxItems: 3 } },
    required: ['path'],
    additionalProperties: false,
  },
};

const REQUESTS_PER_SCHEMA = Number(process.env.REQUESTS_PER_SCHEMA ?? 100);
let server;
let client;
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { await server?.stop(); });

async function inBatches(count, width, fn) {
  const results = [];
  for (let start = 0; start < count; start += width) {
    const batch = [];
    for (let i = start; i < Math.min(count, start + width); ++i) batch.push(fn(i));
    results.push(...(await Promise.all(batch)));
  }
  return results;
}

for (const [name, schema] of Object.entries(SCHEMAS)) {
  test(`${REQUESTS_PER_SCHEMA} of ${REQUESTS_PER_SCHEMA} chat answers validate: ${name}`, async () => {
    const validate = ajv.compile(schema);
    const answers = await inBatches(REQUESTS_PER_SCHEMA, 25, (i) =>
      client.chat.completions.create({
        model: 'stories260K',
        messages: [{ role: 'user', content: `Tell me a story number ${i}.` }],
        response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
        max_tokens: 400,
        seed: i,
      }));
    const failures = [];
    for (const answer of answers) {
      const text = answer.choices[0].message.content;
      let value;
      try {
        value = JSON.parse(text);
      } catch (e) {
        failures.push(`does not parse (${answer.choices[0].finish_reason}): ${text}`);
        continue;
      }
      if (!validate(value)) failures.push(`invalid: ${text}: ${ajv.errorsText(validate.errors)}`);
    }
    assert.deepEqual(failures, [], `${failures.length} of ${answers.length} failed`);
  });
}

test('completions with guided_json, json_object, regex and choice', async () => {
  const post = async (body) => {
    const response = await fetch(`${server.baseURL}/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 300, ...body }),
    });
    assert.equal(response.status, 200, await response.clone().text());
    return (await response.json()).choices.map((c) => c.text);
  };
  const schema = SCHEMAS.enums;
  for (const text of await post({ guided_json: schema, n: 4, seed: 7 })) {
    assert.ok(ajv.validate(schema, JSON.parse(text)), text);
  }
  for (const text of await post({ response_format: { type: 'json_object' }, seed: 3 })) {
    const value = JSON.parse(text);
    assert.equal(typeof value, 'object');
    assert.ok(value !== null && !Array.isArray(value), text);
  }
  for (const text of await post({ guided_regex: '[0-9]{3}-[a-z]{2,4}', n: 5, seed: 1 })) {
    assert.match(text, /^[0-9]{3}-[a-z]{2,4}$/);
  }
  for (const text of await post({ guided_choice: ['yes', 'no', 'maybe so'], n: 5, seed: 2 })) {
    assert.ok(['yes', 'no', 'maybe so'].includes(text), text);
  }
  for (const text of await post({ grammar: 'root ::= "(" [a-c]+ ")"', seed: 4 })) {
    assert.match(text, /^\([a-c]+\)$/);
  }
});

test('a bad schema, regex or grammar is a 400 naming the problem', async () => {
  const post = (body) => fetch(`${server.baseURL}/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories260K', prompt: 'Hi', max_tokens: 5, ...body }),
  });
  const cases = [
    [{ guided_json: { type: 'object', properties: { a: { type: 'string', multipleOf: 3 } } } }, /multipleOf/],
    [{ guided_regex: '(ab' }, /regex/],
    [{ grammar: 'root ::= foo' }, /foo/],
    [{ guided_json: { type: 'array', minItems: 3, maxItems: 1 } }, /minItems/],
    [{ guided_json: { type: 'object' }, guided_regex: 'a' }, /only one/],
  ];
  for (const [body, pattern] of cases) {
    const response = await post(body);
    const text = await response.text();
    assert.equal(response.status, 400, text);
    assert.match(JSON.parse(text).error.message, pattern, text);
  }
  const huge = { type: 'object', properties: {} };
  for (let i = 0; i < 3000; ++i) huge.properties[`property_number_${i}`] = { type: 'string', description: 'x'.repeat(20) };
  const response = await post({ guided_json: huge });
  assert.equal(response.status, 400, await response.text());
});
