// This host as the run lock records it (pipeline/run_lock.h), for the tests that write or
// read lock files: its name and its boot id.
#pragma once

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

namespace shardq::test {

inline std::string this_host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

inline std::string this_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id(std::istreambuf_iterator<char>(in), {});
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

} // namespace shardq::test
