#pragma once
// How much more anonymous memory this process can take without pushing the machine (or
// its memory cgroup) into reclaiming what it cannot: the kernel's MemAvailable, and under
// a cgroup limit (v1 memory.limit_in_bytes or v2 memory.max) the limit less what the group
// uses apart from its file cache, which the kernel drops under pressure.
#include <cstdint>
#include <optional>
#include <string>

namespace flashspec {

struct HostMemory {
  std::optional<uint64_t> mem_available;    // /proc/meminfo MemAvailable
  std::optional<uint64_t> cgroup_headroom;  // limit - (usage - file cache); none without a limit
  // The smaller of the two known figures; with neither known the largest uint64_t:
  // nothing is refused for want of a number.
  uint64_t available() const;
};

// Reads /proc and /sys; an unknown figure is left out.
HostMemory probe_host_memory();

// The cgroup headroom from a group's files, given their text (tests feed it fixtures):
// `limit` and `usage` as in memory.limit_in_bytes / memory.usage_in_bytes (v2:
// memory.max, "max" for none / memory.current), `stat` as memory.stat.
std::optional<uint64_t> cgroup_headroom(const std::string& limit, const std::string& usage, const std::string& stat);

}  // namespace flashspec
