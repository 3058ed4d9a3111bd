#include "core/plugin_library.hpp"

#include <dlfcn.h>

#include "core/plugin_file_check.hpp"

namespace courier {

std::shared_ptr<PluginLibrary> PluginLibrary::open(const std::string& path, std::string& error) {
  // A file dlopen would crash on (cut short, not ELF) is rejected first.
  error = plugin_file_problem(path);
  if (!error.empty()) return nullptr;
  dlerror();  // forget any message left by an earlier call
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* message = dlerror();
    error = message != nullptr ? message : "dlopen failed without a message";
    // The loader starts its message with the path, which callers print already.
    std::string prefix = path + ": ";
    if (error.starts_with(prefix)) error.erase(0, prefix.size());
    return nullptr;
  }
  // The constructor is private, so make_shared cannot reach it.
  return std::shared_ptr<PluginLibrary>(new PluginLibrary(handle, path));
}

PluginLibrary::~PluginLibrary() { dlclose(handle_); }

void* PluginLibrary::symbol(const char* name) const { return dlsym(handle_, name); }

}  // namespace courier
