#include "core/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/printable.h"
#include "core/mapped_file.h"

namespace flashspec {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader reads little-endian fields in place");

namespace {

// Arrays may hold arrays; this many levels at most (an array of arrays is 2 levels).
constexpr int kMaxArrayDepth = 4;
// All array elements of the metadata together, at any depth. Real models hold a few
// hundred thousand (tokens, scores, types, merges); the cap bounds the memory a hostile
// file can make us allocate (each element becomes a GgufValue).
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 24;
// Smallest possible encodings, used to reject counts that cannot fit in the bytes left.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxAlignment = uint64_t(1) << 31;

std::string u128_str(unsigned __int128 v) {
  if (v == 0) return "0";
  char buf[48];
  int i = sizeof buf;
  while (v != 0) {
    buf[--i] = char('0' + int(v % 10));
    v /= 10;
  }
  return std::string(buf + i, sizeof buf - size_t(i));
}

bool valid_value_type(uint32_t t) { return t <= uint32_t(GgufValueType::FLOAT64); }

// Bytes of the smallest encoding of one value of type t (t valid).
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;  // length
    case GgufValueType::ARRAY: return 12;  // element type + count
  }
  return 1;
}

std::string describe_type(const GgufValue& v) {
  if (v.type == GgufValueType::ARRAY) {
    if (const GgufArray* a = v.as_array())
      return "array of " + std::string(gguf_type_name(a->elem_type));
  }
  return std::string(gguf_type_name(v.type));
}

// A non-owning reference to a callable returning a description for error messages (so
// that the recursive value reader is not instantiated once per lambda type).
class WhatRef {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, WhatRef>)
  WhatRef(const F& f)  // NOLINT: implicit on purpose
      : obj_(&f), fn_([](const void* o) { return std::string((*static_cast<const F*>(o))()); }) {}
  std::string operator()() const { return fn_(obj_); }

 private:
  const void* obj_;
  std::string (*fn_)(const void*);
};

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, std::string shown)
      : data_(bytes.data()), size_(bytes.size()), shown_(std::move(shown)) {}

  [[noreturn]] void fail(const std::string& msg) const { throw Error(shown_ + ": " + msg); }

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* data() const { return data_; }

  // `what` is a callable returning a description; it only runs when there is an error.
  template <class What>
  const uint8_t* take(size_t n, const What& what) {
    if (n > remaining())
      fail("truncated at byte " + std::to_string(size_) + " while reading " + what());
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  template <class T, class What>
  T read(const What& what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }

  template <class What>
  std::string_view read_string(const What& what) {
    const uint64_t len = read<uint64_t>([&] { return "the length of " + what(); });
    if (len > remaining())
      fail("string length " + std::to_string(len) + " of " + what() + " at byte " +
           std::to_string(pos_ - 8) + " runs past the end of the file (size " +
           std::to_string(size_) + ")");
    const char* p = reinterpret_cast<const char*>(data_ + pos_);
    pos_ += size_t(len);
    return {p, size_t(len)};
  }

  GgufValue read_value(GgufValueType t, int depth, WhatRef what);

 private:
  template <class T, class What>
  void read_fixed_items(GgufValueType et, uint64_t n, std::vector<GgufValue>& items,
                        const What& what);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string shown_;
  uint64_t array_elements_ = 0;
};

template <class T>
GgufValue make_scalar(GgufValueType t, T raw) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return GgufValue{t, double(raw)};
  } else if constexpr (std::is_signed_v<T>) {
    return GgufValue{t, int64_t(raw)};
  } else {
    return GgufValue{t, uint64_t(raw)};
  }
}

// Elements of a fixed-size type whose total size was already checked against the file.
template <class T, class What>
void Parser::read_fixed_items(GgufValueType et, uint64_t n, std::vector<GgufValue>& items,
                              const What& what) {
  const uint8_t* p = take(size_t(n) * sizeof(T), what);
  for (uint64_t i = 0; i < n; ++i, p += sizeof(T)) {
    T raw;
    std::memcpy(&raw, p, sizeof(T));
    items.push_back(make_scalar<T>(et, raw));
  }
}

GgufValue Parser::read_value(GgufValueType t, int depth, WhatRef what) {
  switch (t) {
    case GgufValueType::UINT8: return make_scalar(t, read<uint8_t>(what));
    case GgufValueType::INT8: return make_scalar(t, read<int8_t>(what));
    case GgufValueType::UINT16: return make_scalar(t, read<uint16_t>(what));
    case GgufValueType::INT16: return make_scalar(t, read<int16_t>(what));
    case GgufValueType::UINT32: return make_scalar(t, read<uint32_t>(what));
    case GgufValueType::INT32: return make_scalar(t, read<int32_t>(what));
    case GgufValueType::FLOAT32: return make_scalar(t, read<float>(what));
    case GgufValueType::UINT64: return make_scalar(t, read<uint64_t>(what));
    case GgufValueType::INT64: return make_scalar(t, read<int64_t>(what));
    case GgufValueType::FLOAT64: return make_scalar(t, read<double>(what));
    case GgufValueType::BOOL: {
      const uint8_t b = read<uint8_t>(what);
      if (b > 1) fail(what() + " has invalid bool value " + std::to_string(b));
      return GgufValue{t, b != 0};
    }
    case GgufValueType::STRING: return GgufValue{t, std::string(read_string(what))};
    case GgufValueType::ARRAY: break;
  }
  // Array: element type, element count, elements.
  const uint32_t et_raw = read<uint32_t>([&] { return "the array element type of " + what(); });
  if (!valid_value_type(et_raw))
    fail(what() + " has unknown array element type " + std::to_string(et_raw));
  const auto et = GgufValueType(et_raw);
  if (et == GgufValueType::ARRAY && depth + 1 >= kMaxArrayDepth)
    fail(what() + " has arrays nested more than " + std::to_string(kMaxArrayDepth) +
         " levels deep");
  const uint64_t n = read<uint64_t>([&] { return "the array length of " + what(); });
  const uint64_t min_bytes = min_value_bytes(et);
  if (n > remaining() / min_bytes)
    fail(what() + " is an array of " + std::to_string(n) + " " +
         std::string(gguf_type_name(et)) + " elements, more than the remaining " +
         std::to_string(remaining()) + " bytes of the file can hold");
  if (n > kMaxArrayElements - array_elements_)
    fail("metadata arrays hold more than " + std::to_string(kMaxArrayElements) +
         " elements in total");
  array_elements_ += n;

  GgufValue out{t, GgufArray{et, {}}};
  auto& items = std::get<GgufArray>(out.v).items;
  items.reserve(size_t(n));
  auto elem_what = [&] { return "the array elements of " + what(); };
  switch (et) {
    case GgufValueType::UINT8: read_fixed_items<uint8_t>(et, n, items, elem_what); break;
    case GgufValueType::INT8: read_fixed_items<int8_t>(et, n, items, elem_what); break;
    case GgufValueType::UINT16: read_fixed_items<uint16_t>(et, n, items, elem_what); break;
    case GgufValueType::INT16: read_fixed_items<int16_t>(et, n, items, elem_what); break;
    case GgufValueType::UINT32: read_fixed_items<uint32_t>(et, n, items, elem_what); break;
    case GgufValueType::INT32: read_fixed_items<int32_t>(et, n, items, elem_what); break;
    case GgufValueType::FLOAT32: read_fixed_items<float>(et, n, items, elem_what); break;
    case GgufValueType::UINT64: read_fixed_items<uint64_t>(et, n, items, elem_what); break;
    case GgufValueType::INT64: read_fixed_items<int64_t>(et, n, items, elem_what); break;
    case GgufValueType::FLOAT64: read_fixed_items<double>(et, n, items, elem_what); break;
    case GgufValueType::BOOL:
    case GgufValueType::STRING:
    case GgufValueType::ARRAY:
      for (uint64_t i = 0; i < n; ++i) {
        items.push_back(read_value(et, depth + 1, [&] {
          return "element " + std::to_string(i) + " of " + what();
        }));
      }
      break;
  }
  return out;
}

}  // namespace

std::string_view gguf_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "uint8";
    case GgufValueType::INT8: return "int8";
    case GgufValueType::UINT16: return "uint16";
    case GgufValueType::INT16: return "int16";
    case GgufValueType::UINT32: return "uint32";
    case GgufValueType::INT32: return "int32";
    case GgufValueType::FLOAT32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "uint64";
    case GgufValueType::INT64: return "int64";
    case GgufValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

// ---- GgufValue ----

std::optional<uint64_t> GgufValue::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v)) {
    if (*i >= 0) return uint64_t(*i);
  }
  return std::nullopt;
}

std::optional<int64_t> GgufValue::as_int() const {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(*u);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return double(*i);
  return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&v); }
const GgufArray* GgufValue::as_array() const { return std::get_if<GgufArray>(&v); }

int64_t GgufTensorInfo::elements() const {
  if (dims.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // checked against overflow when the file was parsed
  return n;
}

// ---- GgufFile ----

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  auto map = std::make_unique<MappedFile>(MappedFile::open(path));
  GgufFile f;
  f.path_ = path;
  f.bytes_ = map->bytes();
  f.map_ = std::move(map);
  f.parse_all();
  return f;
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.path_ = std::move(name);
  f.bytes_ = bytes;
  f.parse_all();
  return f;
}

namespace {

// The header's counts, each checked against the bytes left for what it counts.
struct GgufCounts {
  uint64_t n_tensors, n_kv;
};

// The magic, the version (into `version`) and the counts.
GgufCounts read_header(Parser& p, uint32_t& version) {
  static constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
  const size_t have = std::min<size_t>(4, p.size());
  if (have > 0 && std::memcmp(p.data(), kMagic, have) != 0) p.fail("not a GGUF file (bad magic)");
  p.take(4, [] { return std::string("the magic"); });
  version = p.read<uint32_t>([] { return std::string("the version"); });
  if (version != 2 && version != 3) {
    std::string msg = "unsupported GGUF version " + std::to_string(version);
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) msg += " (a big-endian file? only little-endian GGUF is supported)";
    p.fail(msg);
  }
  const uint64_t n_tensors = p.read<uint64_t>([] { return std::string("the tensor count"); });
  const uint64_t n_kv = p.read<uint64_t>([] { return std::string("the metadata count"); });
  if (n_kv > p.remaining() / kMinKvBytes)
    p.fail("metadata count " + std::to_string(n_kv) + " is too large for the remaining " +
           std::to_string(p.remaining()) + " bytes of the file");
  if (n_tensors > p.remaining() / kMinTensorInfoBytes)
    p.fail("tensor count " + std::to_string(n_tensors) + " is too large for the remaining " +
           std::to_string(p.remaining()) + " bytes of the file");
  return {n_tensors, n_kv};
}

// The n_kv metadata entries, in file order into kv and by key into index (a key twice
// fails).
void read_metadata(Parser& p, uint64_t n_kv, std::vector<std::pair<std::string, GgufValue>>& kv,
                   std::unordered_map<std::string, size_t>& index) {
  kv.reserve(size_t(n_kv));
  index.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string_view key =
        p.read_string([&] { return "the key of metadata entry " + std::to_string(i); });
    const uint32_t type = p.read<uint32_t>([&] { return "the value type of key " + in_quotes(key); });
    if (!valid_value_type(type))
      p.fail("key " + in_quotes(key) + " has unknown value type " + std::to_string(type));
    GgufValue value =
        p.read_value(GgufValueType(type), 0, [&] { return "the value of key " + in_quotes(key); });
    auto [it, inserted] = index.try_emplace(std::string(key), kv.size());
    if (!inserted) p.fail("duplicate metadata key " + in_quotes(key));
    kv.emplace_back(it->first, std::move(value));
  }
}

// general.alignment's value (null: absent, 32), checked.
uint64_t read_alignment(const Parser& p, const GgufValue* a) {
  if (!a) return 32;
  const auto v = a->as_uint();
  if (!v)
    p.fail("key 'general.alignment' has type " + describe_type(*a) +
           ", expected an unsigned integer");
  if (*v == 0 || (*v & (*v - 1)) != 0)
    p.fail("general.alignment " + std::to_string(*v) + " is not a nonzero power of two");
  if (*v > kMaxAlignment)
    p.fail("general.alignment " + std::to_string(*v) + " is too large (at most " +
           std::to_string(kMaxAlignment) + ")");
  return *v;
}

// Tensor `shown`'s n_dims dimensions into dims, each positive; returns their product
// (failing where it overflows).
int64_t read_dims(Parser& p, const std::string& shown, uint32_t n_dims, std::vector<int64_t>& dims) {
  dims.reserve(n_dims);
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t raw = p.read<uint64_t>([&] {
      return "dimension " + std::to_string(d) + " of tensor " + shown;
    });
    if (raw == 0 || raw > uint64_t(std::numeric_limits<int64_t>::max()))
      p.fail("tensor " + shown + " dimension " + std::to_string(d) + " is " +
             std::to_string(int64_t(raw)) + " (must be positive)");
    const int64_t dim = int64_t(raw);
    if (__builtin_mul_overflow(elements, dim, &elements))
      p.fail("tensor " + shown + " element count overflows");
    dims.push_back(dim);
  }
  return elements;
}

// Tensor info i: name, dimensions, type and data offset (a multiple of `alignment`),
// with its byte size; checked, but not against the file's size or the other tensors.
GgufTensorInfo read_tensor_info(Parser& p, uint64_t i, uint64_t alignment) {
  const std::string_view name =
      p.read_string([&] { return "the name of tensor " + std::to_string(i); });
  const std::string shown = in_quotes(name);
  const uint32_t n_dims =
      p.read<uint32_t>([&] { return "the dimension count of tensor " + shown; });
  if (n_dims < 1 || n_dims > kMaxDims)
    p.fail("tensor " + shown + " has " + std::to_string(n_dims) + " dimensions (must be 1 to " +
           std::to_string(kMaxDims) + ")");
  GgufTensorInfo t;
  t.name = std::string(name);
  const int64_t elements = read_dims(p, shown, n_dims, t.dims);
  const uint32_t type = p.read<uint32_t>([&] { return "the type of tensor " + shown; });
  const std::optional<TypeTraits> tr = type_traits(type);
  if (!tr) p.fail("tensor " + shown + " has unsupported type " + std::to_string(type));
  t.type = GgmlType(type);
  t.offset = p.read<uint64_t>([&] { return "the data offset of tensor " + shown; });
  if (t.dims[0] % tr->block_elems != 0)
    p.fail("tensor " + shown + " row length " + std::to_string(t.dims[0]) +
           " is not a multiple of the " + std::string(tr->name) + " block size " +
           std::to_string(tr->block_elems));
  const std::optional<int64_t> row = row_bytes_checked(t.type, t.dims[0]);
  int64_t nbytes = 0;
  if (!row || __builtin_mul_overflow(*row, elements / t.dims[0], &nbytes))
    p.fail("tensor " + shown + " byte size overflows");
  t.nbytes = uint64_t(nbytes);
  if (t.offset % alignment != 0)
    p.fail("tensor " + shown + " data offset " + std::to_string(t.offset) +
           " is not a multiple of the alignment " + std::to_string(alignment));
  return t;
}

// Each tensor's file_offset: its offset past the data section's start, which must keep
// its bytes inside the file.
void place_tensor_data(const Parser& p, std::vector<GgufTensorInfo>& tensors, uint64_t data_offset,
                       unsigned __int128 file_size) {
  for (GgufTensorInfo& t : tensors) {
    const unsigned __int128 a = (unsigned __int128)data_offset + t.offset;
    const unsigned __int128 b = a + t.nbytes;
    if (b > file_size)
      p.fail("tensor " + in_quotes(t.name) + " data [" + u128_str(a) + ", " + u128_str(b) +
             ") lies outside the file (size " + u128_str(file_size) + ")");
    t.file_offset = uint64_t(a);
  }
}

// No two tensors' bytes may overlap: a tensor whose bytes do not match its shape and
// type (a block format's row size misjudged, data cut short) shows as one reaching into
// the next, which would otherwise be read as garbage.
void check_no_overlap(const Parser& p, const std::vector<GgufTensorInfo>& tensors) {
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* x, const GgufTensorInfo* y) { return x->offset < y->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& next = *by_offset[i];
    if (prev.nbytes > 0 && prev.offset + prev.nbytes > next.offset)
      p.fail("tensor " + in_quotes(prev.name) + " (" + std::to_string(prev.nbytes) + " bytes for its shape and type) overlaps tensor " +
             in_quotes(next.name) + ": its data is not the size its shape says");
  }
}

}  // namespace

void GgufFile::parse_all() {
  Parser p(bytes_, printable(path_));
  const GgufCounts counts = read_header(p, version_);
  read_metadata(p, counts.n_kv, kv_, kv_index_);
  alignment_ = read_alignment(p, find("general.alignment"));

  // Tensor infos. The count was checked against the bytes left after the header; the
  // metadata used some of those, so reserve only what can still fit (a short file then
  // fails below as truncated, naming the field).
  const uint64_t n_tensors = counts.n_tensors;
  const uint64_t fit = std::min<uint64_t>(n_tensors, p.remaining() / kMinTensorInfoBytes);
  tensors_.reserve(size_t(fit));
  tensor_index_.reserve(size_t(fit));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t = read_tensor_info(p, i, alignment_);
    auto [it, inserted] = tensor_index_.try_emplace(t.name, tensors_.size());
    if (!inserted) p.fail("duplicate tensor name " + in_quotes(t.name));
    tensors_.push_back(std::move(t));
  }

  // Data section: after the tensor infos, rounded up to the alignment.
  const uint64_t end_of_infos = p.pos();
  data_offset_ = (end_of_infos + (alignment_ - 1)) / alignment_ * alignment_;
  place_tensor_data(p, tensors_, data_offset_, bytes_.size());
  check_no_overlap(p, tensors_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const GgufValue& v,
                             std::string_view expected) {
  throw Error(printable(path) + ": key " + in_quotes(key) + " has type " + describe_type(v) +
              ", expected " + std::string(expected));
}
[[noreturn]] void missing_key(const std::string& path, std::string_view key) {
  throw Error(printable(path) + ": missing required key " + in_quotes(key));
}
}  // namespace

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto u = v->as_uint()) return u;
  if (const auto* i = std::get_if<int64_t>(&v->v))
    throw Error(printable(path_) + ": key " + in_quotes(key) + " has negative value " +
                std::to_string(*i) + ", expected an unsigned integer");
  wrong_type(path_, key, *v, "an unsigned integer");
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto d = v->as_float()) return d;
  wrong_type(path_, key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (const bool* b = std::get_if<bool>(&v->v)) return *b;
  wrong_type(path_, key, *v, "a bool");
}

const std::string* GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (const std::string* s = v->as_string()) return s;
  wrong_type(path_, key, *v, "a string");
}

const GgufArray* GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (const GgufArray* a = v->as_array()) return a;
  wrong_type(path_, key, *v, "an array");
}

uint64_t GgufFile::require_uint(std::string_view key) const {
  if (auto v = get_uint(key)) return *v;
  missing_key(path_, key);
}

double GgufFile::require_float(std::string_view key) const {
  if (auto v = get_float(key)) return *v;
  missing_key(path_, key);
}

const std::string& GgufFile::require_string(std::string_view key) const {
  if (const std::string* v = get_string(key)) return *v;
  missing_key(path_, key);
}

const GgufArray& GgufFile::require_array(std::string_view key) const {
  if (const GgufArray* v = get_array(key)) return *v;
  missing_key(path_, key);
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::require_tensor(std::string_view name) const {
  if (const GgufTensorInfo* t = find_tensor(name)) return *t;
  throw Error(printable(path_) + ": missing required tensor " + in_quotes(name));
}

void GgufFile::check_unchanged() const {
  if (map_) map_->check_unchanged();
}

}  // namespace flashspec
