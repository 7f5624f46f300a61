// Structured output through the official openai npm client: COUNT JSON Schemas made at
// run time by a seeded random generator (random nesting of the keywords the server's
// subset supports: objects, arrays with minItems/maxItems, enums, const, anyOf,
// $ref/$defs, integers and numbers with bounds, booleans, null, strings with maxLength
// and patterns), each asked for with response_format json_schema (chat, streamed or not,
// and completions), each answer validated with ajv (a real validator, not the server's):
//   node structured_output.mjs BASE_URL MODEL SEED COUNT MAX_TOKENS
// Prints one JSON object: every schema with its answer ({schema, text, finish_reason,
// valid, errors}) and the counts; exits 1 when an answer that finished with "stop" is not
// JSON that satisfies its schema. ("length" answers are cut: tests/test_serve_structured.cpp
// checks that the grammar still accepts them as a prefix.)
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';

const [baseURL, model, seedText, countText, maxTokensText] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
const count = Number(countText);
const max_tokens = Number(maxTokensText);

// mulberry32: a small seeded generator, so that a failing schema can be made again.
function makeRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = makeRandom(Number(seedText));
const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
const pick = (xs) => xs[int(0, xs.length - 1)];
const word = () => pick(['a', 'id', 'name', 'kind', 'x', 'value', 'tags', 'ok', 'note', 'size', 'when', 'next']) + int(0, 9);

// Strings stay short and arrays small, so that a model writing noise finishes more often
// within max_tokens; a cut answer is still checked (as a prefix).
const patterns = [
  () => `^[a-z]{1,${int(1, 6)}}$`,
  () => `^[A-Z]{2}-[0-9]{${int(1, 2)},3}$`,
  () => `^(yes|no|maybe)$`,
  () => `^[0-9a-f]{${int(2, 6)}}$`,
  () => `^(ab)+c?$`,
];
function leaf(kind) {
  switch (kind) {
    case 'string': return { type: 'string', maxLength: int(0, 8) };
    case 'pattern': return { type: 'string', pattern: pick(patterns)() };
    case 'integer': {
      const s = { type: 'integer' };
      if (random() < 0.7) s.minimum = int(-50, 10);
      if (random() < 0.7) s.maximum = int(11, 500);
      return s;
    }
    case 'number': {
      const lo = int(-20, 5);
      const s = { type: 'number', maximum: lo + int(1, 100) };
      if (random() < 0.5) s.exclusiveMinimum = lo; else s.minimum = lo;
      return s;
    }
    case 'boolean': return { type: 'boolean' };
    case 'null': return { type: 'null' };
    case 'enum': {
      const values = [];
      for (let i = int(1, 4); i > 0; --i) values.push(pick([word(), int(-9, 99), null, true, 'red', 'green']));
      return { enum: [...new Set(values)] };
    }
    case 'const': return { const: pick([word(), int(0, 9), false]) };
    case 'nullable': return { type: ['string', 'null'], maxLength: int(1, 6) };
  }
  throw new Error(kind);
}
const leafKinds = ['string', 'pattern', 'integer', 'number', 'boolean', 'null', 'enum', 'const', 'nullable'];

function node(depth, defs) {
  const r = random();
  if (depth <= 0 || r < 0.35) return leaf(pick(leafKinds));
  if (r < 0.6) return object(depth - 1, defs);
  if (r < 0.75) return array(depth - 1, defs);
  if (r < 0.87) return anyOf(depth - 1, defs);
  return ref(depth - 1, defs);
}
function object(depth, defs) {
  const properties = {};
  for (let i = int(1, 3); i > 0; --i) properties[word()] = node(depth, defs);
  const names = Object.keys(properties);
  const required = names.filter(() => random() < 0.7);
  const s = { type: 'object', properties, additionalProperties: false };
  if (required.length) s.required = required;
  return s;
}
function array(depth, defs) {
  const minItems = int(0, 2);
  return { type: 'array', items: node(depth, defs), minItems, maxItems: minItems + int(0, 2) };
}
function anyOf(depth, defs) {
  const branches = [];
  for (let i = int(2, 3); i > 0; --i) branches.push(node(depth, defs));
  return { anyOf: branches };
}
function ref(depth, defs) {
  const name = `D${Object.keys(defs).length}`;
  defs[name] = {};  // taken before its contents are made (they may add definitions of their own)
  defs[name] = node(depth, defs);
  return { $ref: `#/$defs/${name}` };
}

// Each schema's root is one of these in turn, so that every keyword is met at least once
// in any run of 10 or more; what is inside it is random.
const roots = ['object', 'array', 'enum', 'anyOf', 'ref', 'integer', 'number', 'boolean+null', 'pattern', 'nested'];
function schemaFor(i) {
  const defs = {};
  const root = roots[i % roots.length];
  let s;
  switch (root) {
    case 'object': s = object(3, defs); break;
    case 'array': s = array(3, defs); break;
    case 'enum': s = object(0, defs); s.properties.choice = leaf('enum'); (s.required ??= []).push('choice'); break;
    case 'anyOf': s = anyOf(3, defs); break;
    case 'ref': s = ref(3, defs); break;
    case 'integer': s = { type: 'object', properties: { n: leaf('integer'), more: node(1, defs) }, required: ['n'], additionalProperties: false }; break;
    case 'number': s = { type: 'object', properties: { x: leaf('number'), y: leaf('number') }, required: ['x', 'y'], additionalProperties: false }; break;
    case 'boolean+null': s = { type: 'object', properties: { ok: leaf('boolean'), none: leaf('null'), maybe: leaf('nullable') }, required: ['ok', 'none'], additionalProperties: false }; break;
    case 'pattern': s = { type: 'object', properties: { code: leaf('pattern'), other: node(1, defs) }, required: ['code'], additionalProperties: false }; break;
    case 'nested': s = { type: 'object', properties: { inner: object(1, defs) }, required: ['inner'], additionalProperties: false }; break;
  }
  if (Object.keys(defs).length) s = { $defs: defs, ...s };
  return { root, schema: s };
}

const ajv = new Ajv2020({ strict: false, allErrors: true });
const out = { schemas: [], counts: { stop: 0, length: 0, valid: 0, invalid: 0 } };
for (let i = 0; i < count; ++i) {
  const { root, schema } = schemaFor(i);
  const validate = ajv.compile(schema);
  const mode = ['chat', 'chat-stream', 'completion', 'chat-sampled'][i % 4];
  const temperature = mode === 'chat' ? 0 : 1;
  const response_format = { type: 'json_schema', json_schema: { name: `schema_${i}`, schema, strict: true } };
  const common = { model, max_tokens, temperature, seed: 1000 + i, response_format };
  const messages = [{ role: 'user', content: 'Reply in JSON.' }];
  let text = '';
  let finish = null;
  if (mode === 'chat-stream') {
    const stream = await client.chat.completions.create({ ...common, messages, stream: true });
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  } else if (mode === 'completion') {
    const r = await client.completions.create({ ...common, prompt: 'Reply in JSON:' });
    text = r.choices[0].text;
    finish = r.choices[0].finish_reason;
  } else {
    const r = await client.chat.completions.create({ ...common, messages });
    text = r.choices[0].message.content;
    finish = r.choices[0].finish_reason;
  }
  const entry = { i, root, mode, schema, text, finish_reason: finish, valid: null, errors: null };
  if (finish === 'stop') {
    out.counts.stop += 1;
    try {
      entry.valid = validate(JSON.parse(text));
      if (!entry.valid) entry.errors = ajv.errorsText(validate.errors);
    } catch (e) {
      entry.valid = false;
      entry.errors = `not JSON: ${e.message}`;
    }
    out.counts[entry.valid ? 'valid' : 'invalid'] += 1;
  } else {
    out.counts.length += 1;
  }
  out.schemas.push(entry);
}
console.log(JSON.stringify(out));
process.exit(out.counts.invalid === 0 ? 0 : 1);
