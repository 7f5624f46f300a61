// The converter's path for gpt-oss (GptOssModel.set_vocab -> _set_vocab_gpt2), followed step
// by step:
//   - get_vocab_base: ids 0 .. vocab_size-1; an id with no token is "[PAD<id>]", UNUSED; a
//     token of the model's vocabulary is NORMAL, written as tokenizer.json spells it (GPT-2's
//     byte-to-unicode characters); an added token is CONTROL when special or when it looks
//     special (<|...|>), else USER_DEFINED with "▁" written as spaces. (The converter also
//     re-encodes added tokens that are not normalized through the HF tokenizer; for a special
//     token that gives its text back, and gpt-oss's added tokens are all special.)
//   - get_vocab_base_pre: "gpt-4o", the name llama.cpp's converter gives this pre-tokenizer
//     (checked here by its Split regex rather than by the hash of a test encoding);
//   - gguf-py's SpecialVocab: the merges as "left right" strings (a space inside a part
//     written as U+0120, as byte-level vocabularies spell it), then the ids of
//     tokenizer_config.json's bos/eos/unk/sep/pad/cls/mask tokens looked up among
//     tokenizer.json's added tokens (first match), then its add_*_token flags, then its
//     chat template. gpt-oss's tokenizer_config.json names bos, eos and pad and has neither
//     flags nor a template (the harmony template ships apart from it), so none are written
//     and llama.cpp's defaults for "gpt-4o" apply: no BOS added.
#include "tests/fixture_gptoss_tokenizer.h"

#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flashspec::fixtures {

namespace {

namespace token_type {
constexpr int64_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;
}

// tokenizer.json's Split regex for o200k: what makes the converter name it "gpt-4o".
constexpr std::string_view kO200kRegex =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

GgufValue i32(int64_t v) {
  GgufValue out{GgufValueType::INT32, uint64_t(0)};
  out.v = v;
  return out;
}



// The regex of tokenizer.json's Split pre-tokenizer (alone or first in a Sequence), or "".
std::string split_regex(const nlohmann::json& tj) {
  const nlohmann::json& pre = tj.at("pre_tokenizer");
  const nlohmann::json* split = &pre;
  if (pre.value("type", "") == "Sequence") {
    const nlohmann::json& list = pre.at("pretokenizers");
    if (list.empty()) return {};
    split = &list.front();
  }
  if (split->value("type", "") != "Split") return {};
  return split->at("pattern").value("Regex", std::string());
}

}  // namespace

Metadata gptoss_tokenizer_metadata(const std::string& dir, uint64_t& n_vocab) {
  const std::string tj_path = dir + "/tokenizer.json", tc_path = dir + "/tokenizer_config.json";
  const nlohmann::json tj = read_json_file(tj_path);
  const nlohmann::json tc = read_json_file(tc_path);
  try {
    const nlohmann::json& model = tj.at("model");
    if (model.at("type") != "BPE" || split_regex(tj) != kO200kRegex)
      throw Error(tj_path + ": not an o200k byte-level BPE tokenizer (model.type BPE, Split regex o200k's)");
    const uint64_t n = kGptOssVocabSize;

    // HF's tokenizer.vocab: the model's pieces and the added tokens, by id.
    std::vector<const std::string*> text(n, nullptr);
    std::vector<const nlohmann::json*> added(n, nullptr);
    auto place = [&](const std::string& t, uint64_t id) {
      if (id >= n) throw Error(tj_path + ": token id " + std::to_string(id) + " is not below " + std::to_string(n));
      text[id] = &t;
    };
    for (const auto& [piece, idv] : model.at("vocab").items()) place(piece, idv.get<uint64_t>());
    for (const nlohmann::json& a : tj.at("added_tokens")) {
      const uint64_t id = a.at("id").get<uint64_t>();
      place(a.at("content").get_ref<const std::string&>(), id);
      added[id] = &a;
    }

    std::vector<GgufValue> tokens, types;
    tokens.reserve(n);
    types.reserve(n);
    for (uint64_t id = 0; id < n; ++id) {
      std::string t;
      int64_t type = token_type::kNormal;
      if (!text[id]) {
        t = "[PAD" + std::to_string(id) + "]";
        type = token_type::kUnused;
      } else if (added[id]) {
        t = *text[id];
        if (added[id]->value("special", false) || looks_special(t)) {
          type = token_type::kControl;
        } else {
          t = replace_all(std::move(t), "\xE2\x96\x81", " ");
          type = token_type::kUserDefined;
        }
      } else {
        t = *text[id];
      }
      tokens.push_back(str(std::move(t)));
      types.push_back(i32(type));
    }

    std::vector<GgufValue> merges;
    const nlohmann::json& mj = model.at("merges");
    merges.reserve(mj.size());
    for (const nlohmann::json& m : mj) {
      if (m.is_string()) {  // the older "left right" form, kept as it is
        merges.push_back(str(m.get<std::string>()));
        continue;
      }
      if (!m.is_array() || m.size() != 2) throw Error(tj_path + ": a merge is neither \"a b\" nor a pair");
      merges.push_back(str(replace_all(m[0].get<std::string>(), " ", "\xC4\xA0") + " " +
                           replace_all(m[1].get<std::string>(), " ", "\xC4\xA0")));
    }

    Metadata kv;
    auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
    set("tokenizer.ggml.model", str("gpt2"));
    set("tokenizer.ggml.pre", str("gpt-4o"));
    set("tokenizer.ggml.tokens", array(GgufValueType::STRING, std::move(tokens)));
    set("tokenizer.ggml.token_type", array(GgufValueType::INT32, std::move(types)));
    set("tokenizer.ggml.merges", array(GgufValueType::STRING, std::move(merges)));

    // SpecialVocab's special token types, in its order, and the keys gguf-py writes them to.
    static const std::pair<const char*, const char*> kSpecial[] = {
        {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
        {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
        {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", "tokenizer.ggml.cls_token_id"},
        {"mask", "tokenizer.ggml.mask_token_id"}};
    for (const auto& [typ, key] : kSpecial) {
      const auto it = tc.find(std::string(typ) + "_token");
      if (it == tc.end()) continue;
      std::string content;
      if (it->is_string())
        content = it->get<std::string>();
      else if (it->is_object() && it->contains("content") && it->at("content").is_string())
        content = it->at("content").get<std::string>();
      else
        continue;
      for (const nlohmann::json& a : tj.at("added_tokens"))
        if (a.at("content") == content) {
          set(key, u32(a.at("id").get<uint64_t>()));
          break;
        }
    }
    for (const char* typ : {"bos", "eos", "sep"}) {  // the flags gguf-py has keys for
      const auto it = tc.find("add_" + std::string(typ) + "_token");
      if (it != tc.end() && it->is_boolean())
        set("tokenizer.ggml.add_" + std::string(typ) + "_token", boolean(it->get<bool>()));
    }
    if (const auto it = tc.find("chat_template"); it != tc.end() && it->is_string())
      set("tokenizer.chat_template", str(it->get<std::string>()));
    n_vocab = n;
    return kv;
  } catch (const nlohmann::json::exception& e) {
    throw Error(dir + ": tokenizer.json / tokenizer_config.json are not gpt-oss's: " + e.what());
  }
}

}  // namespace flashspec::fixtures
