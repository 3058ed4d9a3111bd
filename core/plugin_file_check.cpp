#include "core/plugin_file_check.hpp"

#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace courier {

namespace {

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr uint16_t kMachine = EM_PPC64;
#else
#error "plugin_file_check: unknown machine; add its EM_ value"
#endif
constexpr unsigned char kClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
constexpr unsigned char kData =
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;

// Reads [offset, offset + bytes) exactly.
bool read_at(int fd, uint64_t offset, void* out, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        pread(fd, static_cast<char*>(out) + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Whether [offset, offset + bytes) lies inside a file of `size` bytes.
bool inside(uint64_t offset, uint64_t bytes, uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string plugin_file_problem(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return fmt::format("cannot open the file: {}", std::strerror(errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0)
    return fmt::format("cannot stat the file: {}", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const auto size = static_cast<uint64_t>(st.st_size);

  ElfW(Ehdr) header{};
  if (size < sizeof header || !read_at(fd.get(), 0, &header, sizeof header)) {
    return fmt::format("not an ELF shared object: {} bytes, shorter than an ELF header", size);
  }
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    return "not an ELF shared object (no ELF magic at the start)";
  }
  if (header.e_ident[EI_CLASS] != kClass || header.e_ident[EI_DATA] != kData ||
      header.e_machine != kMachine) {
    return fmt::format(
        "an ELF file for another machine (class {}, byte order {}, e_machine {}; this process "
        "needs class {}, byte order {}, e_machine {})",
        header.e_ident[EI_CLASS], header.e_ident[EI_DATA], header.e_machine, kClass, kData,
        kMachine);
  }
  if (header.e_type != ET_DYN) {
    return fmt::format("not a shared object (ELF e_type {}, a shared object has {})", header.e_type,
                       ET_DYN);
  }
  if (header.e_phentsize != sizeof(ElfW(Phdr)) || header.e_phnum == 0) {
    return fmt::format("malformed ELF header: {} program headers of {} bytes", header.e_phnum,
                       header.e_phentsize);
  }
  const uint64_t ph_bytes = uint64_t{header.e_phnum} * header.e_phentsize;
  if (!inside(header.e_phoff, ph_bytes, size)) {
    return fmt::format("truncated: the program headers end at byte {} but the file has {} bytes",
                       header.e_phoff + ph_bytes, size);
  }
  std::vector<ElfW(Phdr)> segments(header.e_phnum);
  if (!read_at(fd.get(), header.e_phoff, segments.data(), ph_bytes)) {
    return "cannot read the program headers";
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const ElfW(Phdr)& s = segments[i];
    if (s.p_type != PT_LOAD && s.p_type != PT_DYNAMIC) continue;
    if (!inside(s.p_offset, s.p_filesz, size)) {
      return fmt::format("truncated: segment {} ({}) ends at byte {} but the file has {} bytes", i,
                         s.p_type == PT_LOAD ? "PT_LOAD" : "PT_DYNAMIC", s.p_offset + s.p_filesz,
                         size);
    }
  }
  // Not mapped by the loader, but a file whose section headers lie past
  // its end was cut short all the same.
  if (header.e_shoff != 0 &&
      !inside(header.e_shoff, uint64_t{header.e_shnum} * header.e_shentsize, size)) {
    return fmt::format("truncated: the section headers end at byte {} but the file has {} bytes",
                       header.e_shoff + uint64_t{header.e_shnum} * header.e_shentsize, size);
  }
  return "";
}

}  // namespace courier
