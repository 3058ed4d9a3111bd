// Helpers shared by the registry tests: where the test plugins are, a Logger
// whose output the test can read, and a fake environment.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"
#include "core/log.hpp"
#include "courier/error.hpp"

namespace courier::test {

// Set by tests/unit/registry/CMakeLists.txt.
inline const std::string kTestPluginDir = COURIER_TEST_PLUGIN_DIR;
inline const std::string kOverrideDir = COURIER_TEST_OVERRIDE_DIR;
inline const std::string kRealPluginDir = COURIER_REAL_PLUGIN_DIR;

// The spelling the registry uses for a path (absolute, no symbolic links).
inline std::string canonical(const std::string& path) {
  return std::filesystem::weakly_canonical(std::filesystem::absolute(path)).string();
}
inline std::string test_plugin(std::string_view file) {
  return canonical(kTestPluginDir + "/" + std::string(file));
}
inline std::string override_plugin(std::string_view file) {
  return canonical(kOverrideDir + "/" + std::string(file));
}
inline std::string real_plugin(std::string_view file) {
  return canonical(kRealPluginDir + "/" + std::string(file));
}

// A Logger writing into memory, so a test can check what was reported.
class CapturedLog {
 public:
  explicit CapturedLog(LogLevel level = LogLevel::info)
      : file_(open_memstream(&buffer_, &size_)), log_(level, file_) {}
  ~CapturedLog() {
    std::fclose(file_);
    std::free(buffer_);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  Logger& logger() { return log_; }

  std::string text() {
    std::fflush(file_);
    return std::string(buffer_, size_);
  }

  std::vector<std::string> lines_containing(std::string_view needle) {
    std::vector<std::string> found;
    std::string all = text();
    size_t start = 0;
    while (start < all.size()) {
      size_t end = all.find('\n', start);
      if (end == std::string::npos) end = all.size();
      std::string line = all.substr(start, end - start);
      if (line.find(needle) != std::string::npos) found.push_back(line);
      start = end + 1;
    }
    return found;
  }

 private:
  char* buffer_ = nullptr;
  size_t size_ = 0;
  std::FILE* file_;
  Logger log_;
};

// An environment the test controls; set() may run while plugins read it.
class FakeEnv {
 public:
  void set(const std::string& name, const std::string& value) {
    std::lock_guard lock(state_->mutex);
    state_->values[name] = value;
  }
  EnvLookup lookup() const {
    return [state = state_](std::string_view name) -> std::optional<std::string> {
      std::lock_guard lock(state->mutex);
      auto found = state->values.find(std::string(name));
      if (found == state->values.end()) return std::nullopt;
      return found->second;
    };
  }

 private:
  struct State {
    std::mutex mutex;
    std::map<std::string, std::string> values;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// The message of the courier::Error that `action` throws ("" if none).
template <class Action>
std::string error_from(Action&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace courier::test
