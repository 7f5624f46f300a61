// Drives `flashspec serve` with the official openai npm client, as an application would:
//   node openai_client.mjs BASE_URL MODEL API_KEY QUESTION MAX_TOKENS SLOW_BASE_URL
// Prints one JSON object with what the client saw (tests/test_server_client.cpp checks it).
// SLOW_BASE_URL: a server whose passes take long enough (a throttled weight stream) that a
// stream abandoned after two chunks is still generating when the client hangs up.
import OpenAI from 'openai';

const [baseURL, model, apiKey, question, maxTokens, slowURL] = process.argv.slice(2);
// No retries: a 429 or 5xx must show up in the test, not be hidden by the client.
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
const messages = [{ role: 'user', content: question }];
const max_tokens = Number(maxTokens);
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
out.retrieved = (await client.models.retrieve(model)).id;
// Another service's model name: answered by the one model served (as llama-server does).
out.any_model = (await client.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 2 })).model;

const chat = await client.chat.completions.create({ model, messages, max_tokens, temperature: 0 });
out.chat = {
  content: chat.choices[0].message.content,
  role: chat.choices[0].message.role,
  finish_reason: chat.choices[0].finish_reason,
  usage: chat.usage,
  tokens: chat.flashspec.tokens,
};

const stream = await client.chat.completions.create({
  model, messages, max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let content = '';
let chunks = 0;
let finish = null;
let usage = null;
for await (const chunk of stream) {
  chunks += 1;
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (!choice) continue;  // the include_usage chunk has no choices
  content += choice.delta?.content ?? '';
  if (choice.finish_reason) finish = choice.finish_reason;
}
out.stream = { content, chunks, finish_reason: finish, usage };

const completion = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens, temperature: 0 });
out.completion = { text: completion.choices[0].text, finish_reason: completion.choices[0].finish_reason };

// Errors arrive as the client's typed exceptions, with our message and status.
async function error_of(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return { status: e.status ?? null, name: e.constructor.name, message: e.message, code: e.code ?? null };
  }
}
out.errors = {
  unknown_model: await error_of(() => client.models.retrieve('gpt-4o')),
  bad_temperature: await error_of(() => client.chat.completions.create({ model, messages, max_tokens, temperature: -1 })),
  wrong_key: await error_of(() =>
    new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'sk-wrong', maxRetries: 0 }).chat.completions.create({ model, messages, max_tokens })),
};

// A streamed answer abandoned after its first content chunk (AbortController).
const controller = new AbortController();
const slow = new OpenAI({ baseURL: `${slowURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
const abandoned = await slow.chat.completions.create(
  { model, messages, max_tokens: 60, temperature: 0, stream: true }, { signal: controller.signal });
let seen = 0;
try {
  for await (const chunk of abandoned) {
    if (chunk.choices[0]?.delta?.content) seen += 1;
    if (seen === 2) controller.abort();
  }
} catch (e) {
  if (e.constructor.name !== 'APIUserAbortError') throw e;
}
out.abandoned = { content_chunks_seen: seen };

console.log(JSON.stringify(out));
