// One dlopen()ed plugin file. Every plugin struct points into the library's
// memory, so each NicPlugin/GpuPlugin shares ownership of its library and the
// file is dlclose()d only when the last of them is gone.
#pragma once

#include <memory>
#include <string>

namespace courier {

class PluginLibrary {
 public:
  // Opens `path` with RTLD_NOW (an unresolved symbol fails here, with the
  // loader's message, instead of at the first call), RTLD_LOCAL (one
  // plugin's symbols never satisfy another's) and RTLD_NODELETE: closing the
  // handle releases our reference but leaves the code mapped, because a
  // plugin's dependencies (libfabric providers, a GPU driver) may leave
  // threads, atexit handlers or thread-local destructors behind that would
  // otherwise run in unmapped code at exit. Returns nullptr and sets `error`
  // to the reason (plugin_file_problem's, else the loader's message) when
  // the file cannot be loaded.
  static std::shared_ptr<PluginLibrary> open(const std::string& path, std::string& error);

  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  // The address of an exported symbol, or nullptr when the file has none.
  void* symbol(const char* name) const;
  const std::string& path() const { return path_; }

 private:
  PluginLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  void* handle_;
  std::string path_;
};

}  // namespace courier
