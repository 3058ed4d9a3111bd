// Checks a plugin file's ELF headers against the file itself before it is
// dlopen()ed. glibc's loader maps the segments the headers describe and
// trusts them: a file cut short (an interrupted copy, a full disk) has
// segments beyond its end, and touching those pages kills the process
// with SIGBUS inside dlopen, with no chance to reject the file.
#pragma once

#include <string>

namespace courier {

// "" when the file is a shared object for this machine whose segments and
// header tables lie inside it; otherwise why not, naming the field.
std::string plugin_file_problem(const std::string& path);

}  // namespace courier
