// A tool round trip through `flashspec serve` with the official openai npm client, as an
// agent framework runs one: ask with tools, run the calls the answer makes, send their
// results back, get the final answer; streamed (calls assembled from delta.tool_calls) and
// not, under tool_choice "auto", "required" and a named function.
//   node tool_round_trip.mjs BASE_URL MODEL
// Prints one JSON object per mode (tests/test_serve_tools.cpp checks them).
import OpenAI from 'openai';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather', description: 'Weather in a city',
      parameters: {
        type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city', 'unit'], additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add', description: 'Adds two integers',
      parameters: {
        type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
];
// What our "tools" answer.
const run = (call) => {
  const args = JSON.parse(call.function.arguments);
  return call.function.name === 'add' ? String(args.a + args.b) : `${args.city}: 21 ${args.unit}`;
};

async function streamed(request) {
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const calls = [];
  let content = '';
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.finish_reason) finish = choice.finish_reason;
    if (choice.delta.content) content += choice.delta.content;
    for (const d of choice.delta.tool_calls ?? []) {
      calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      const c = calls[d.index];
      if (d.id) c.id = d.id;
      if (d.function?.name) c.function.name += d.function.name;
      if (d.function?.arguments) c.function.arguments += d.function.arguments;
    }
  }
  return { message: { role: 'assistant', content: content || null, tool_calls: calls.length ? calls : undefined }, finish };
}

async function once(request, stream) {
  if (stream) return streamed(request);
  const r = await client.chat.completions.create(request);
  return { message: r.choices[0].message, finish: r.choices[0].finish_reason };
}

const out = [];
const choices = { auto: 'auto', required: 'required', named: { type: 'function', function: { name: 'add' } } };
for (const [mode, tool_choice] of Object.entries(choices)) {
  for (const stream of [false, true]) {
    const messages = [{ role: 'user', content: 'Add 2 and 40, then tell me the weather in Oslo.' }];
    // One call per answer: a random-weight model would otherwise go on calling until max_tokens.
    const first = await once({ model, messages, tools, tool_choice, parallel_tool_calls: false, max_tokens: 128, temperature: 0 }, stream);
    const result = { mode, stream, finish: first.finish, calls: (first.message.tool_calls ?? []).map((c) => c.function) };
    if (first.message.tool_calls?.length) {
      messages.push({ role: 'assistant', content: first.message.content, tool_calls: first.message.tool_calls });
      for (const c of first.message.tool_calls) messages.push({ role: 'tool', tool_call_id: c.id, content: run(c) });
      const final = await once({ model, messages, tools, max_tokens: 16, temperature: 0 }, stream);
      result.final_finish = final.finish;
      result.final_content = final.message.content;
    }
    out.push(result);
  }
}
console.log(JSON.stringify(out));
