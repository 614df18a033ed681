#include "worker/symbol_name.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace shoal::internal {
namespace {

std::string Demangle(const char* name) {
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || readable == nullptr) return name;
  std::string out(readable);
  free(readable);
  return out;
}

// The name of the function symbol at `offset` (an address in the file's
// own terms) in the ELF symbol table of `path`; "" when there is none.
std::string FromSymbolTable(const char* path, uintptr_t offset) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  void* map = MAP_FAILED;
  if (fstat(fd, &st) == 0 &&
      static_cast<size_t>(st.st_size) >= sizeof(ElfW(Ehdr))) {
    map = mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  close(fd);
  if (map == MAP_FAILED) return "";
  const size_t size = st.st_size;
  const auto* base = static_cast<const uint8_t*>(map);
  const auto* header = reinterpret_cast<const ElfW(Ehdr)*>(base);
  std::string found;
  // Every offset is checked against the file's size: it may be any file.
  auto fits = [size](uint64_t at, uint64_t length) {
    return at <= size && length <= size - at;
  };
  if (memcmp(header->e_ident, ELFMAG, SELFMAG) == 0 &&
      header->e_ident[EI_CLASS] ==
          (sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32) &&
      header->e_shentsize == sizeof(ElfW(Shdr)) &&
      fits(header->e_shoff, uint64_t{header->e_shnum} * sizeof(ElfW(Shdr)))) {
    const auto* sections =
        reinterpret_cast<const ElfW(Shdr)*>(base + header->e_shoff);
    for (int i = 0; i < header->e_shnum && found.empty(); ++i) {
      const ElfW(Shdr)& table = sections[i];
      if (table.sh_type != SHT_SYMTAB || table.sh_link >= header->e_shnum ||
          table.sh_entsize != sizeof(ElfW(Sym)) ||
          !fits(table.sh_offset, table.sh_size)) {
        continue;
      }
      const ElfW(Shdr)& strings = sections[table.sh_link];
      if (!fits(strings.sh_offset, strings.sh_size)) continue;
      const auto* symbols =
          reinterpret_cast<const ElfW(Sym)*>(base + table.sh_offset);
      const char* names =
          reinterpret_cast<const char*>(base + strings.sh_offset);
      for (size_t j = 0; j < table.sh_size / sizeof(ElfW(Sym)); ++j) {
        const ElfW(Sym)& symbol = symbols[j];
        if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC ||
            symbol.st_value != offset || symbol.st_name >= strings.sh_size ||
            memchr(names + symbol.st_name, '\0',
                   strings.sh_size - symbol.st_name) == nullptr) {
          continue;
        }
        found = Demangle(names + symbol.st_name);
        break;
      }
    }
  }
  munmap(map, size);
  return found;
}

}  // namespace

std::string SymbolName(const void* address) {
  Dl_info info;
  if (dladdr(address, &info) == 0) return "";
  if (info.dli_sname != nullptr && info.dli_saddr == address) {
    return Demangle(info.dli_sname);
  }
  const auto* loaded = static_cast<const ElfW(Ehdr)*>(info.dli_fbase);
  if (loaded == nullptr) return "";
  // The program itself is named as it was typed (maybe relative to a
  // folder it left): read it through /proc instead.
  const bool program = reinterpret_cast<uintptr_t>(loaded) + loaded->e_phoff ==
                       getauxval(AT_PHDR);
  const char* path = program ? "/proc/self/exe" : info.dli_fname;
  if (path == nullptr || *path == '\0') return "";
  // A position-independent file's symbols are offsets from where it was
  // loaded; a fixed-address executable's are addresses.
  uintptr_t offset = reinterpret_cast<uintptr_t>(address);
  if (loaded->e_type == ET_DYN) {
    offset -= reinterpret_cast<uintptr_t>(info.dli_fbase);
  }
  return FromSymbolTable(path, offset);
}

std::string UnqualifiedName(const std::string& symbol) {
  std::string name = symbol.substr(0, symbol.find('('));
  size_t scope = name.rfind("::");
  if (scope != std::string::npos) name = name.substr(scope + 2);
  return name;
}

}  // namespace shoal::internal
