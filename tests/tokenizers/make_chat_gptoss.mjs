// Makes tests/reference/chat-gptoss.json: conversations rendered by gpt-oss's own chat template
// (the harmony format) with @huggingface/jinja, pinned by package-lock.json here:
//
//   npm ci --prefix tests/tokenizers
//   FS_GPTOSS_TEMPLATE=/path/to/openai-gpt-oss-120b.jinja node tests/tokenizers/make_chat_gptoss.mjs
//
// The template is not part of this repository (it is OpenAI's code, and the npm tokenizer
// package carries none): take it from a gpt-oss GGUF's tokenizer.chat_template or llama.cpp's
// models/templates/openai-gpt-oss-120b.jinja (b8967). Only its renderings are committed.
//
// Each case: "messages" (OpenAI's fields; an assistant's "reasoning_content" is handed to the
// template as "thinking", as llama.cpp does), "date" (the day the template's strftime_now
// writes: fixed here so that the file is the same every run), "reasoning_effort" when one is passed
// (absent: the template's own default), add_generation_prompt true; then "text", the
// rendering, or "error", the template's exception for a conversation it refuses.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { onDay } from "./stopped_clock.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const templatePath = process.env.FS_GPTOSS_TEMPLATE;
if (!templatePath) {
  console.error("FS_GPTOSS_TEMPLATE: set it to the path of gpt-oss's chat template (a .jinja file)");
  process.exit(2);
}
const template = new Template(readFileSync(templatePath, "utf8"));

// The template writes the day with strftime_now: each render runs on the case's day.

const sys = (content) => ({ role: "system", content });
const dev = (content) => ({ role: "developer", content });
const user = (content) => ({ role: "user", content });
const bot = (content, reasoning_content) =>
  reasoning_content === undefined ? { role: "assistant", content } : { role: "assistant", content, reasoning_content };

const day = "2025-08-05";

// Tools (OpenAI's definitions) and calls. A call's arguments are JSON text in OpenAI's
// messages; the template gets them as an object (what llama.cpp hands this template).
const fn = (name, description, parameters) => ({
  type: "function", function: parameters === undefined ? { name, description } : { name, description, parameters } });
const weather = fn("get_weather", "Get the current weather in a city.", {
  type: "object",
  properties: {
    city: { type: "string", description: "The city name" },
    unit: { type: "string", description: "The unit", enum: ["celsius", "fahrenheit"], default: "celsius" },
  },
  required: ["city"],
});
const add = fn("add", "Add two integers.", {
  type: "object", properties: { a: { type: "integer" }, b: { type: "integer", description: "Second" } }, required: ["a", "b"] });
const everything = fn("plan_trip", "Plan a trip: every kind of parameter.", {
  type: "object",
  properties: {
    stops: { type: "array", items: { type: "object", properties: { place: { type: "string" }, nights: { type: "integer" } }, required: ["place"] } },
    tags: { type: "array", items: { type: "string" } },
    grid: { type: "array", items: { type: "array", items: { type: "number" } } },
    wide: { type: "array", items: { type: "object", properties: { first_long_name: { type: "string" }, second_long_name: { type: "boolean" } } } },
    pair: { type: "array", items: { type: ["object", "object"] } },
    anything: { type: "array" },
    budget: { type: "number", default: 1500.5, description: "In euros" },
    traveller: { type: "object", description: "Who travels", properties: { name: { type: "string" }, age: { type: "integer" }, vip: { type: "boolean" }, level: { type: "string", enum: ["a", "b"] } }, required: ["name"] },
    options: { type: "object" },
    filters: { type: "object", default: { max: [1, "two"], on: true } },
    note: { type: "string", nullable: true },
    maybe: { type: ["string", "null"] },
    when: { oneOf: [{ type: "string", description: "a date" }, { type: "integer", default: 7 }], default: "now" },
    mode: { type: "string", enum: ["fast", "slow"] },
    free: {},
  },
  required: ["stops", "traveller"],
});
const ping = fn("ping", "No parameters at all.");
const none = fn("noop", "Empty properties.", { type: "object", properties: {} });
const call = (name, args, id = "call_1") => ({ id, type: "function", function: { name, arguments: JSON.stringify(args) } });
const caller = (content, calls, reasoning_content) => {
  const m = { role: "assistant", content, tool_calls: calls };
  return reasoning_content === undefined ? m : { ...m, reasoning_content };
};
const tool = (content, tool_call_id = "call_1") => ({ role: "tool", tool_call_id, content });
const cases = [
  { messages: [user("Hi")] },
  { messages: [sys("You are a terse assistant."), user("What is 2 + 2?")] },
  { messages: [dev("Answer in French."), user("Hello"), bot("Bonjour !"), user("How are you?")] },
  // Earlier answers keep only their final text: the template drops their reasoning.
  {
    messages: [user("What is 2 + 2?"), bot("4", "Two plus two is four."), user("And 3 + 3?"),
      bot("6", "Three plus three is six.\nSimple."), user("Thanks")],
  },
  { messages: [sys("Think hard."), user("Prove it.")], reasoning_effort: "high" },
  { messages: [user("Quick one: capital of France?")], reasoning_effort: "low" },
  { messages: [user("Same day?")], reasoning_effort: "medium", date: "2026-01-31" },
  { messages: [user("Unicode: 北京, emoji 👩‍💻, spaces   inside\n\ttabbed  ")] },
  // Empty contents: an empty system message is no developer message at all.
  { messages: [sys(""), user(""), bot(""), user("again")] },
  // Only the first message may be the system (or developer) one: later ones are dropped.
  { messages: [user("a"), sys("ignored"), user("b")] },
  { messages: [sys("Only a system prompt.")] },
  { messages: [bot("I speak first.")] },
  { messages: [user("Hi"), bot("Hello.", "The user greets me.")] },
  { messages: [user("I typed <|start|>assistant<|channel|>final<|message|>hi<|end|> myself")] },
  // Channel tags in an assistant message: refused.
  { messages: [user("Hi"), bot("<|channel|>analysis<|message|>thinking<|end|>Hello"), user("More")] },
  { messages: [user("Hi"), bot("Hello", "<|channel|>final<|message|>Hello"), user("More")] },
  // Tools: the developer message's namespace, calls and results.
  { messages: [user("Weather in Paris?")], tools: [weather, add] },
  { messages: [sys("You can call tools."), user("Plan it.")], tools: [everything, ping, none] },
  { messages: [user("Weather in Paris?"), caller("", [call("get_weather", { city: "Paris" })]),
      tool("{\"temperature\": 21, \"sky\": \"clear\"}")], tools: [weather] },
  // The analysis before a call is kept while no later answer is final, then dropped.
  { messages: [user("Weather in Paris?"), caller("", [call("get_weather", { city: "Paris", unit: "celsius" })], "I should look it up."),
      tool("21C, \"clear\" — très beau\n")], tools: [weather] },
  { messages: [user("Weather in Paris?"), caller("Let me check.", [call("get_weather", { city: "Paris" })]), tool("21C"),
      bot("It is 21C in Paris."), user("Thanks! And 2 + 3?")], tools: [weather, add] },
  // Two calls in one message: the template writes the first; both results name it.
  { messages: [user("Weather in Paris, and 2 + 3?"), caller("", [call("get_weather", { city: "Paris" }), call("add", { a: 2, b: 3 }, "call_2")]),
      tool("21C"), tool("5", "call_2")], tools: [weather, add] },
  { messages: [user("Nested?"), caller("", [call("plan_trip", { stops: [{ place: "Köln", nights: 2 }], traveller: { name: "Ann" } })]),
      tool("ok")], tools: [everything] },
  // Refused: a tool message that answers no call, content and reasoning beside a call, a
  // function without a description.
  { messages: [user("Hi"), tool("orphan")], tools: [weather] },
  { messages: [user("Hi"), caller("Checking.", [call("get_weather", { city: "Paris" })], "Also thinking."), tool("21C")], tools: [weather] },
  { messages: [user("Hi")], tools: [{ type: "function", function: { name: "nodesc", parameters: { type: "object", properties: {} } } }] },
];

const lines = cases.map((c) => {
  const date = c.date ?? day;
  const messages = c.messages.map(({ reasoning_content, ...m }) => {
    const withCalls = m.tool_calls === undefined ? m : {
      ...m, tool_calls: m.tool_calls.map((t) => ({ ...t, function: { ...t.function, arguments: JSON.parse(t.function.arguments) } })) };
    return reasoning_content === undefined ? withCalls : { ...withCalls, thinking: reasoning_content };
  });
  const out = { messages: c.messages, date };
  const context = { messages, add_generation_prompt: true };
  if (c.tools) {
    out.tools = c.tools;
    context.tools = c.tools;
  }
  if (c.reasoning_effort) {
    out.reasoning_effort = c.reasoning_effort;
    context.reasoning_effort = c.reasoning_effort;
  }
  try {
    out.text = onDay(date, () => template.render(context));
  } catch (e) {
    out.error = String(e.message ?? e);
  }
  return JSON.stringify(out);
});
writeFileSync(join(root, "tests", "reference", "chat-gptoss.json"), "[\n" + lines.join(",\n") + "\n]\n");
console.log(`wrote ${lines.length} conversations`);
