#include "tools/courier-run/shm_files.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace courier::run {

bool is_shm_file_of(std::string_view file, pid_t pid) {
  for (std::string_view prefix : {"courier-", "courier-ce-"}) {
    const std::string owner = std::string(prefix) + std::to_string(pid) + "-";
    if (file.size() > owner.size() && file.substr(0, owner.size()) == owner) return true;
  }
  return false;
}

RemovedFiles remove_shm_files_of(pid_t pid, const std::string& dir) {
  RemovedFiles result;
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(dir.c_str()), ::closedir);
  if (!listing) {
    result.failed.push_back(dir + ": " + std::strerror(errno));
    return result;
  }
  // Names are collected first: unlinking while readdir() walks the
  // directory may make it skip entries.
  std::vector<std::string> mine;
  while (const dirent* entry = ::readdir(listing.get())) {
    if (is_shm_file_of(entry->d_name, pid)) mine.emplace_back(entry->d_name);
  }
  for (const std::string& name : mine) {
    const std::string path = dir + "/" + name;
    if (::unlink(path.c_str()) == 0) {
      result.removed.push_back(path);
    } else if (errno != ENOENT) {  // gone already: someone else cleaned up
      result.failed.push_back(path + ": " + std::strerror(errno));
    }
  }
  return result;
}

}  // namespace courier::run
