#include "core/host_memory.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

namespace flashspec {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::optional<uint64_t> parse_u64(const std::string& s) {
  try {
    return uint64_t(std::stoull(s));
  } catch (...) {
    return std::nullopt;
  }
}

// The value of `key` in "key value" lines (memory.stat, /proc/meminfo with its "kB").
std::optional<uint64_t> field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  uint64_t v;
  std::string rest;
  while (in >> k >> v) {
    if (k == key) return v;
    std::getline(in, rest);
  }
  return std::nullopt;
}

// "/sys/fs/cgroup/memory" + path (v1) or "/sys/fs/cgroup" + path (v2) of this process's
// memory group, from /proc/self/cgroup.
std::string memory_group_dir(bool& v2) {
  std::istringstream in(slurp("/proc/self/cgroup"));
  std::string line, unified;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers == "memory" || controllers.find("memory,") == 0 || controllers.find(",memory") != std::string::npos) {
      v2 = false;
      return "/sys/fs/cgroup/memory" + path;
    }
    if (controllers.empty()) unified = path;
  }
  v2 = true;
  return unified.empty() ? std::string() : "/sys/fs/cgroup" + unified;
}

}  // namespace

std::optional<uint64_t> cgroup_headroom(const std::string& limit, const std::string& usage, const std::string& stat) {
  const auto lim = parse_u64(limit), use = parse_u64(usage);
  // "max" (v2) fails to parse: no limit; v1 says "no limit" with a value near 2^63.
  if (!lim || !use || *lim >= (uint64_t(1) << 62)) return std::nullopt;
  // v1 names the group's file cache total_cache, v2 file.
  uint64_t cache = field(stat, "total_cache").value_or(field(stat, "file").value_or(0));
  const uint64_t held = *use > cache ? *use - cache : 0;
  return *lim > held ? *lim - held : 0;
}

HostMemory probe_host_memory() {
  HostMemory m;
  if (auto kb = field(slurp("/proc/meminfo"), "MemAvailable:")) m.mem_available = *kb * 1024;
  bool v2 = false;
  const std::string dir = memory_group_dir(v2);
  if (!dir.empty())
    m.cgroup_headroom = v2 ? cgroup_headroom(slurp(dir + "/memory.max"), slurp(dir + "/memory.current"),
                                             slurp(dir + "/memory.stat"))
                           : cgroup_headroom(slurp(dir + "/memory.limit_in_bytes"),
                                             slurp(dir + "/memory.usage_in_bytes"), slurp(dir + "/memory.stat"));
  return m;
}

uint64_t HostMemory::available() const {
  return std::min(mem_available.value_or(std::numeric_limits<uint64_t>::max()),
                  cgroup_headroom.value_or(std::numeric_limits<uint64_t>::max()));
}

}  // namespace flashspec
