// The shared-memory files a dead rank leaves in /dev/shm.
//
// A rank killed by a signal cannot remove what it created there: libfabric's
// shm provider keeps a 16 MiB region per endpoint, named by nic-ofi
// `courier-<pid>-<nonce>`, and nic-ce a segment `courier-ce-<pid>-<address>`.
// Both carry the creating process's id, so once courier-run has seen a rank
// exit (and before it reaps it, while no other process can hold that id),
// whatever still bears the rank's id is garbage.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace courier::run {

// Whether `file` (a name in /dev/shm) belongs to process `pid`:
// "courier-<pid>-..." or "courier-ce-<pid>-...", the id matched exactly
// (courier-12-x is not process 123's, nor courier-123-x process 12's).
bool is_shm_file_of(std::string_view file, pid_t pid);

struct RemovedFiles {
  std::vector<std::string> removed;  // full paths
  std::vector<std::string> failed;   // "PATH: reason"
};

// Removes the files of process `pid` from `dir` (/dev/shm). A directory that
// cannot be read is one entry in `failed`.
RemovedFiles remove_shm_files_of(pid_t pid, const std::string& dir = "/dev/shm");

}  // namespace courier::run
