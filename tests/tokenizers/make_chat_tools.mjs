// Makes tests/reference/chat-tools-<name>.json: conversations with tools, tool calls and
// tool results rendered by a family's own chat template with @huggingface/jinja (pinned by
// package-lock.json here), which flashspec's fixed formats write the same way
// (core/chat_template_tools.cpp):
//
//   npm ci --prefix tests/tokenizers
//   node tests/tokenizers/make_chat_tools.mjs qwen3 ../shared/models/tiny-qwen3.gguf
//   node tests/tokenizers/make_chat_tools.mjs llama31 path/to/Llama-3.1-8B-Instruct.jinja
//
// The template comes from a GGUF's tokenizer.chat_template or a .jinja file. tiny-qwen3's is
// Qwen3's own. Llama 3.1's is not part of this repository (it is Meta's; tiny-llama3 carries
// the short Llama 3 template, without tools): take it from a Llama 3.1 GGUF or llama.cpp's
// models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja (b8967). Only renderings are
// committed. Template defaults hold (Llama 3.1: tools in the first user message, its fixed
// date), add_generation_prompt true. Tool-call arguments are given as objects to Llama 3.1's
// template (the server parses OpenAI's argument strings for it: its `tojson` expects an
// object) and as OpenAI's JSON strings to Qwen's (which writes a string as it is).
//
// Each case: "tools", "messages", "enable_thinking" when set, then "text" (the rendering) or
// "error" (the template's exception for a conversation it refuses).
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const [name, templatePath] = process.argv.slice(2);
if (!name || !templatePath) {
  console.error("usage: node make_chat_tools.mjs NAME TEMPLATE(.jinja|.gguf)");
  process.exit(2);
}

// tokenizer.chat_template of a GGUF: the key, its type (8, string), its length, its bytes.
function ggufTemplate(path) {
  const buf = readFileSync(path);
  const key = Buffer.from("tokenizer.chat_template");
  const at = buf.indexOf(key);
  if (at < 0) throw new Error(`${path}: no tokenizer.chat_template`);
  const p = at + key.length;
  if (buf.readUInt32LE(p) !== 8) throw new Error(`${path}: tokenizer.chat_template is not a string`);
  const len = Number(buf.readBigUInt64LE(p + 4));
  return buf.subarray(p + 12, p + 12 + len).toString("utf8");
}
const source = templatePath.endsWith(".gguf") ? ggufTemplate(templatePath) : readFileSync(templatePath, "utf8");
const template = new Template(source);
const llama = source.includes("<|start_header_id|>");
const bos = llama ? "<|begin_of_text|>" : "";

const fn = (name, description, parameters) => ({ type: "function", function: { name, description, parameters } });
const weather = fn("get_weather", "Current weather in a city", {
  type: "object",
  properties: { city: { type: "string", description: "The city, e.g. Paris" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
  required: ["city"],
});
const add = fn("add", "Adds two integers", {
  type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"], additionalProperties: false,
});
const call = (id, name, args) => ({ id, type: "function", function: { name, arguments: llama ? args : JSON.stringify(args) } });
const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const bot = (content, tool_calls, reasoning_content) => {
  const m = { role: "assistant", content: content ?? "" };
  if (tool_calls) m.tool_calls = tool_calls;
  if (reasoning_content !== undefined) m.reasoning_content = reasoning_content;
  return m;
};
const tool = (tool_call_id, content) => ({ role: "tool", tool_call_id, content });

const cases = [
  { tools: [weather, add], messages: [user("What is the weather in Paris?")] },
  { tools: [weather], messages: [sys("  You are terse.  "), user("  Weather in Oslo?  ")] },
  {
    tools: [weather, add],
    messages: [user("Add 2 and 3."), bot("", [call("call_1", "add", { a: 2, b: 3 })]), tool("call_1", "5")],
  },
  {
    tools: [weather],
    messages: [sys("Be brief."), user("Weather in Rome?"), bot(null, [call("c9", "get_weather", { city: "Rome", unit: "celsius" })]),
      tool("c9", '{"temperature": 21, "sky": "clear"}'), bot("21 degrees and clear."), user("And tomorrow?")],
  },
  { tools: [add], messages: [user("Unicode: 北京 👩‍💻\n\ttabbed")] },
  // The template takes one call per message, and needs a first user message for the tools.
  { tools: [add], messages: [user("Two sums"), bot("", [call("a", "add", { a: 1, b: 2 }), call("b", "add", { a: 3, b: 4 })])] },
  { tools: [add], messages: [sys("Only a system prompt.")] },
  // Several results in a row, calls after text, a conversation without tools that has calls.
  {
    tools: [weather],
    messages: [user("Weather in Paris and Oslo?"), bot("Checking both.", [call("p", "get_weather", { city: "Paris" }),
      call("o", "get_weather", { city: "Oslo" })]), tool("p", "18C"), tool("o", "4C")],
  },
  { tools: [], messages: [user("2+2?"), bot("", [call("x", "add", { a: 2, b: 2 })]), tool("x", "4")] },
  // Reasoning models: thinking off, and reasoning kept for the answer in progress.
  { tools: [add], enable_thinking: false, messages: [user("Add 5 and 6.")] },
  {
    tools: [add],
    messages: [user("Add 5 and 6."), bot("", [call("s", "add", { a: 5, b: 6 })], "I should call add."), tool("s", "11")],
  },
  {
    tools: [add],
    messages: [user("Add 1 and 1."), bot("<think>\nEasy.\n</think>\n\n", [call("t", "add", { a: 1, b: 1 })]), tool("t", "2"),
      bot("It is 2."), user("Thanks")],
  },
];

const lines = cases.map((c) => {
  const out = { tools: c.tools, messages: c.messages };
  const context = { messages: c.messages, add_generation_prompt: true, bos_token: bos };
  if (c.tools.length) context.tools = c.tools;
  if (c.enable_thinking !== undefined) out.enable_thinking = context.enable_thinking = c.enable_thinking;
  try {
    out.text = template.render(context);
  } catch (e) {
    out.error = String(e.message ?? e);
  }
  return JSON.stringify(out);
});
writeFileSync(join(root, "tests", "reference", `chat-tools-${name}.json`), "[\n" + lines.join(",\n") + "\n]\n");
console.log(`wrote ${lines.length} conversations`);
