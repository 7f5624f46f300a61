#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_bounds.h"
#include "core/printable.h"
#include "grammar/regex.h"

namespace flashspec::grammar {

namespace {

using json = nlohmann::ordered_json;

const std::set<std::string, std::less<>> kAnnotations = {
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions"};
const std::set<std::string, std::less<>> kKeywords = {
    "type", "enum", "const", "anyOf", "allOf", "$ref", "nullable", "properties", "required",
    "additionalProperties", "items", "minItems", "maxItems", "uniqueItems", "pattern", "format",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::vector<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

constexpr int kMaxDepth = 128;
constexpr uint64_t kMaxItems = 4096;
constexpr uint64_t kMaxLength = 10000;
// A schema's size, measured before it is compiled: values in all (objects, arrays,
// scalars) and members of one "properties" (an object's layout is built member by member).
constexpr size_t kMaxValues = 50000;
constexpr size_t kMaxProperties = 2000;

// Formats as anchored patterns, each matching only valid values (never a superset of what
// a validator such as ajv-formats accepts: days within their month, Feb 29 left out).
const std::map<std::string, std::string, std::less<>> kFormats = {
    {"date", R"(^[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))$)"},
    {"time", R"(^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$)"},
    {"date-time",
     R"(^[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$)"},
    {"uuid", R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)"},
    {"email", R"(^[a-zA-Z0-9_+-]+(\.[a-zA-Z0-9_+-]+)*@([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$)"},
    {"ipv4", R"(^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$)"},
};

Expr nothing() { return Expr::alt({}); }

// "key", quoted for messages.
std::string quoted(std::string_view key) {
  std::string out(1, '"');
  out += key;
  out += '"';
  return out;
}
Expr lit(std::string s) { return Expr::literal(std::move(s)); }

std::string pointer_segment(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

bool fits_type(const json& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, const JsonOptions& options) : root_(root), parts_(def_, options) {}

  GrammarDef run() {
    measure(root_);
    const uint32_t root = def_.rule_id("root");
    refs_["#"] = root;
    def_.define(root, compile(root_, "#", 0));
    def_.root = root;
    return def_;
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    // One line: keys, $refs and type names come from the client (control bytes escaped),
    // and a path 128 levels deep is cut.
    throw Error("json schema: at " + printable(path, 240) + ": " + printable(what, 480));
  }

  // The schema's size against the limits, without recursion, before any work on it.
  static void measure(const json& root) {
    std::vector<const json*> pending = {&root};
    size_t values = 0;
    while (!pending.empty()) {
      const json& v = *pending.back();
      pending.pop_back();
      if (++values > kMaxValues) fail("#", "more than " + std::to_string(kMaxValues) + " JSON values in the schema");
      if (v.is_object()) {
        if (const auto p = v.find("properties"); p != v.end() && p->is_object() && p->size() > kMaxProperties)
          fail("#", "an object schema with " + std::to_string(p->size()) + " properties (at most " +
                        std::to_string(kMaxProperties) + ")");
        for (const auto& member : v) pending.push_back(&member);
      } else if (v.is_array()) {
        for (const auto& item : v) pending.push_back(&item);
      }
    }
  }

  // The constraint keywords of a schema object (annotations left out).
  static std::vector<std::string> constraints(const json& s) {
    std::vector<std::string> out;
    for (const auto& [k, v] : s.items())
      if (!kAnnotations.contains(k)) out.push_back(k);
    return out;
  }

  // Keywords that must stand alone (besides `allowed`).
  static void only(const json& s, const std::string& path, std::string_view keyword,
                   std::initializer_list<std::string_view> allowed = {}) {
    for (const std::string& k : constraints(s)) {
      if (k == keyword) continue;
      bool ok = false;
      for (std::string_view a : allowed) ok = ok || k == a;
      if (!ok) fail(path, "keyword \"" + k + "\" beside \"" + std::string(keyword) + "\" is not supported");
    }
  }

  // A rule for an expression used more than once (property values in several object
  // layouts, array items repeated): copies of a reference cost two automaton nodes.
  Expr as_rule(Expr e, std::string_view hint) {
    if (e.kind == Expr::Kind::Ref || e.kind == Expr::Kind::Literal || e.kind == Expr::Kind::Empty) return e;
    const uint32_t id = def_.fresh_rule(hint);
    def_.define(id, std::move(e));
    return Expr::ref(id);
  }

  Expr compile(const json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) fail(path, "schema nested deeper than " + std::to_string(kMaxDepth));
    if (s.is_boolean()) return s.get<bool>() ? parts_.value() : nothing();
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items())
      if (!kAnnotations.contains(k) && !kKeywords.contains(k)) fail(path, "unsupported keyword \"" + k + "\"");

    if (s.contains("$ref")) {
      only(s, path, "$ref");
      if (!s["$ref"].is_string()) fail(path, "\"$ref\" must be a string");
      return reference(s["$ref"].get<std::string>(), path, depth);
    }
    if (s.contains("allOf")) {
      only(s, path, "allOf");
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) fail(path, "\"allOf\" is supported only with exactly one schema");
      return compile(all[0], path + "/allOf/0", depth + 1);
    }
    std::vector<Expr> alts;
    if (const auto nullable = s.find("nullable"); nullable != s.end()) {
      if (!nullable->is_boolean()) fail(path, "\"nullable\" must be true or false");
      if (nullable->get<bool>()) alts.push_back(parts_.null());
    }
    if (s.contains("anyOf")) {
      only(s, path, "anyOf", {"nullable"});
      const json& any = s["anyOf"];
      if (!any.is_array()) fail(path, "\"anyOf\" must be an array");
      for (size_t i = 0; i < any.size(); ++i) alts.push_back(compile(any[i], path + "/anyOf/" + std::to_string(i), depth + 1));
      return Expr::alt(std::move(alts));
    }

    // The types allowed: "type" as a string or list, or read from the other keywords.
    std::vector<std::string> types;
    bool typed = s.contains("type");
    if (typed) {
      const json& t = s["type"];
      const json list = t.is_array() ? t : json::array({t});
      for (const json& name : list) {
        if (!name.is_string() || std::find(kTypes.begin(), kTypes.end(), name.get<std::string>()) == kTypes.end())
          fail(path, "unknown type " + name.dump());
        types.push_back(name.get<std::string>());
      }
    }

    if (s.contains("const") || s.contains("enum")) {
      json values;
      if (s.contains("const")) {
        values = json::array({s["const"]});
      } else {
        values = s["enum"];
        if (!values.is_array()) fail(path, "\"enum\" must be an array");
      }
      for (const json& v : values) {
        bool ok = !typed;
        for (const std::string& t : types) ok = ok || fits_type(v, t);
        if (ok) alts.push_back(lit(v.dump()));
      }
      return Expr::alt(std::move(alts));
    }

    if (!typed) {
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
          if (s.contains(k)) return true;
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "minItems", "maxItems", "uniqueItems"})) types.push_back("array");
      if (has({"pattern", "format", "minLength", "maxLength"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
      if (types.empty()) {
        alts.push_back(parts_.value());
        return Expr::alt(std::move(alts));
      }
    }
    for (const std::string& t : types) {
      if (t == "object") alts.push_back(object(s, path, depth));
      if (t == "array") alts.push_back(array(s, path, depth));
      if (t == "string") alts.push_back(string(s, path));
      if (t == "number") alts.push_back(number(s, path, false));
      if (t == "integer") alts.push_back(number(s, path, true));
      if (t == "boolean") alts.push_back(parts_.boolean());
      if (t == "null") alts.push_back(parts_.null());
    }
    return Expr::alt(std::move(alts));
  }

  Expr reference(const std::string& ref, const std::string& path, int depth) {
    if (const auto it = refs_.find(ref); it != refs_.end()) return Expr::ref(it->second);
    if (ref.empty() || ref[0] != '#') fail(path, "$ref \"" + ref + "\": only references into this schema (#...) are supported");
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(ref.substr(1)));
    } catch (const nlohmann::json::exception&) {
      fail(path, "$ref \"" + ref + "\" points to nothing in the schema");
    }
    const size_t slash = ref.rfind('/');
    const uint32_t id = def_.fresh_rule(slash == std::string::npos ? "ref" : ref.substr(slash + 1));
    refs_[ref] = id;  // before compiling the target: it may refer to itself
    def_.define(id, compile(*target, ref, depth + 1));
    return Expr::ref(id);
  }

  static uint64_t count(const json& s, const char* key, const std::string& path, uint64_t limit) {
    const json& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(path, quoted(key) + " must be a non-negative integer");
    const uint64_t n = v.get<uint64_t>();
    if (n > limit) fail(path, quoted(key) + " above " + std::to_string(limit) + " is not supported");
    return n;
  }

  Expr object(const json& s, const std::string& path, int depth) {
    const json props = s.contains("properties") ? s["properties"] : json::object();
    if (!props.is_object()) fail(path, "\"properties\" must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path, "\"required\" must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) fail(path, "\"required\" must list property names");
        required.insert(r.get<std::string>());
      }
    }
    const Expr ws = parts_.ws();
    if (props.empty() && required.empty()) {
      if (!s.contains("additionalProperties") || s["additionalProperties"] == json(true)) return parts_.object();
      if (s["additionalProperties"] == json(false)) return Expr::seq({lit("{"), ws, lit("}")});
      const Expr value = as_rule(compile(s["additionalProperties"], path + "/additionalProperties", depth + 1), "additional");
      const Expr member = Expr::seq({parts_.string(), ws, lit(":"), ws, value, ws});
      return Expr::seq({lit("{"), ws, Expr::optional(Expr::seq({member, Expr::star(Expr::seq({lit(","), ws, member}))})), lit("}")});
    }
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean() && !s["additionalProperties"].is_object())
      fail(path, "\"additionalProperties\" must be a boolean or a schema");

    struct Member {
      Expr expr;  // "key": value, with its whitespace
      bool required;
    };
    std::vector<Member> members;
    std::set<std::string> declared;
    for (const auto& [key, schema] : props.items()) {
      const std::string sub = path + "/properties/" + pointer_segment(key);
      const Expr value = as_rule(compile(schema, sub, depth + 1), key);
      members.push_back({Expr::seq({lit(json(key).dump()), ws, lit(":"), ws, value, ws}), required.contains(key)});
      declared.insert(key);
    }
    for (const std::string& key : required)
      if (!declared.contains(key)) members.push_back({Expr::seq({lit(json(key).dump()), ws, lit(":"), ws, parts_.value(), ws}), true});

    // rest(i, first): members i.. in order, optional ones possibly left out, a comma before
    // each but the first written. A rule per (i, first) where something optional remains,
    // so the alternatives do not copy the tail.
    const size_t n = members.size();
    std::vector<size_t> next_optional(n + 1, n);
    for (size_t i = n; i-- > 0;) next_optional[i] = members[i].required ? next_optional[i + 1] : i;
    std::map<std::pair<size_t, bool>, Expr> memo;
    const std::string hint = "obj" + std::to_string(def_.rules.size());
    auto rest = [&](auto& self, size_t i, bool first) -> Expr {
      if (i == n) return Expr::empty();
      if (const auto it = memo.find({i, first}); it != memo.end()) return it->second;
      const Expr sep = first ? Expr::empty() : Expr::seq({lit(","), ws});
      Expr taken = Expr::seq({sep, members[i].expr, self(self, i + 1, false)});
      Expr e = members[i].required ? std::move(taken) : Expr::alt({std::move(taken), self(self, i + 1, first)});
      if (next_optional[i] < n) e = as_rule(std::move(e), hint + "-" + std::to_string(i) + (first ? "-first" : ""));
      memo.emplace(std::make_pair(i, first), e);
      return e;
    };
    return Expr::seq({lit("{"), ws, rest(rest, 0, true), lit("}")});
  }

  Expr array(const json& s, const std::string& path, int depth) {
    if (s.contains("uniqueItems") && s["uniqueItems"] != json(false)) fail(path, "unsupported keyword \"uniqueItems\" (true)");
    const json items = s.contains("items") ? s["items"] : json(true);
    if (items.is_array()) fail(path, "\"items\" as a list (tuples) is not supported");
    const uint64_t min = s.contains("minItems") ? count(s, "minItems", path, kMaxItems) : 0;
    const uint64_t max = s.contains("maxItems") ? count(s, "maxItems", path, kMaxItems) : kUnbounded;
    if (min > max) return nothing();
    const Expr ws = parts_.ws();
    if (max == 0) return Expr::seq({lit("["), ws, lit("]")});
    const Expr item = as_rule(compile(items, path + "/items", depth + 1), "item");
    const Expr elem = Expr::seq({item, ws});
    const Expr more = Expr::seq({lit(","), ws, elem});
    const uint32_t more_max = max == kUnbounded ? kUnbounded : uint32_t(max - 1);
    if (min == 0)
      return Expr::seq({lit("["), ws, Expr::optional(Expr::seq({elem, Expr::repeat(more, 0, more_max)})), lit("]")});
    return Expr::seq({lit("["), ws, elem, Expr::repeat(more, uint32_t(min - 1), more_max), lit("]")});
  }

  Expr string(const json& s, const std::string& path) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    auto pattern_expr = [&](const std::string& pattern) {
      try {
        RegexOptions opt;
        opt.json_string = true;
        return Expr::seq({lit("\""), compile_regex(pattern, opt), lit("\"")});
      } catch (const Error& e) {
        fail(path, e.what());
      }
    };
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(path, "\"pattern\" must be a string");
      if (lengths || s.contains("format")) fail(path, "\"pattern\" together with a length or format is not supported");
      return pattern_expr(s["pattern"].get<std::string>());
    }
    if (s.contains("format")) {
      if (lengths) fail(path, "\"format\" together with a length is not supported");
      const std::string format = s["format"].is_string() ? s["format"].get<std::string>() : s["format"].dump();
      const auto it = kFormats.find(format);
      if (it == kFormats.end()) fail(path, "unsupported format \"" + format + "\"");
      return pattern_expr(it->second);
    }
    if (lengths) {
      const uint64_t min = s.contains("minLength") ? count(s, "minLength", path, kMaxLength) : 0;
      const uint64_t max = s.contains("maxLength") ? count(s, "maxLength", path, kMaxLength) : kUnbounded;
      if (min > max) return nothing();
      return Expr::seq({lit("\""), Expr::repeat(parts_.string_char(), uint32_t(min), uint32_t(max)), lit("\"")});
    }
    return parts_.string();
  }

  Expr number(const json& s, const std::string& path, bool integer) {
    auto num = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key)) return std::nullopt;
      const json& v = s[key];
      if (v.is_boolean()) return std::nullopt;  // draft 4's exclusive flags, read below
      if (!v.is_number()) fail(path, quoted(key) + " must be a number");
      return v.get<double>();
    };
    std::optional<double> minimum = num("minimum"), maximum = num("maximum");
    std::optional<double> ex_min = num("exclusiveMinimum"), ex_max = num("exclusiveMaximum");
    // Draft 4: exclusiveMinimum: true makes minimum exclusive.
    if (s.value("exclusiveMinimum", json()) == json(true) && minimum) ex_min = minimum, minimum.reset();
    if (s.value("exclusiveMaximum", json()) == json(true) && maximum) ex_max = maximum, maximum.reset();
    const bool bounded = minimum || maximum || ex_min || ex_max;
    if (!bounded) return integer ? parts_.integer() : parts_.number();
    const double big = 9.2e18;  // beyond int64; the parts clamp to their digit limit anyway
    auto clamp = [&](double v) { return int64_t(std::clamp(v, -big, big)); };
    if (integer) {
      std::optional<int64_t> lo, hi;
      auto raise = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
      auto lower = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
      if (minimum) raise(clamp(std::ceil(*minimum)));
      if (ex_min) raise(clamp(std::floor(*ex_min)) + 1);
      if (maximum) lower(clamp(std::floor(*maximum)));
      if (ex_max) lower(clamp(std::ceil(*ex_max)) - 1);
      return parts_.integer_range(lo, hi);
    }
    if ((minimum && ex_min) || (maximum && ex_max))
      fail(path, "an inclusive and an exclusive bound on one side are not supported together");
    std::optional<JsonParts::Bound> lo, hi;
    auto bound = [&](const char* key, std::optional<double> v, bool exclusive, std::optional<JsonParts::Bound>& out) {
      if (!v) return;
      if (std::floor(*v) != *v) fail(path, quoted(key) + ": only integer bounds are supported on numbers");
      out = JsonParts::Bound{clamp(*v), exclusive};
    };
    bound("minimum", minimum, false, lo);
    bound("exclusiveMinimum", ex_min, true, lo);
    bound("maximum", maximum, false, hi);
    bound("exclusiveMaximum", ex_max, true, hi);
    return parts_.number_range(lo, hi);
  }

  const json& root_;
  GrammarDef def_;
  JsonParts parts_;
  std::map<std::string, uint32_t> refs_;  // "$ref" text -> its rule
};

// Schema text from a file or a flag: its nesting and width measured before it is parsed
// (the compiler's own limits apply to a parsed value, too late for a million-level file).
json parse_schema_text(std::string_view schema) {
  if (const std::optional<std::string> e = json_bounds_error(schema)) throw Error("json schema: " + *e);
  try {
    return json::parse(schema);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("json schema: not valid JSON: ") + e.what());
  }
}

}  // namespace

GrammarDef json_schema_to_grammar(const nlohmann::ordered_json& schema, const JsonOptions& options) {
  return SchemaCompiler(schema, options).run();
}

GrammarDef json_schema_to_grammar(std::string_view schema, const JsonOptions& options) {
  return json_schema_to_grammar(parse_schema_text(schema), options);
}

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonOptions& options) {
  const GrammarDef def = json_schema_to_grammar(schema, options);
  try {
    return Grammar::compile(def);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("no string matches") != std::string::npos) throw Error("json schema: no JSON value satisfies the schema");
    throw Error("json schema: " + what);
  }
}

std::shared_ptr<const Grammar> compile_json_schema(std::string_view schema, const JsonOptions& options) {
  return compile_json_schema(parse_schema_text(schema), options);
}

}  // namespace flashspec::grammar
