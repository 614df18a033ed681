#include "common/files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shoal {

void PrefaultForWrite(void* p, uint64_t size) {
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, Linux 5.14
  const uintptr_t page = 4096;
  uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + size) & ~(page - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateWrite);
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

absl::Status WriteFile(const std::string& path, const std::string& contents,
                       int mode) {
  static std::atomic<uint64_t> writes{0};
  std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", writes++);
  // Made afresh, so that it has `mode` less the process's umask: never more
  // open than asked, nor than the process allows. (One left by a killed
  // process of the same pid is replaced.)
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  int fd = open(tmp.c_str(), flags, mode);
  if (fd < 0 && errno == EEXIST && unlink(tmp.c_str()) == 0) {
    fd = open(tmp.c_str(), flags, mode);
  }
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(
          absl::StrCat("cannot write ", path, ": ", strerror(err)));
    }
    done += n;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, int mode) {
  std::string partial;
  for (const auto& part : absl::StrSplit(path, '/')) {
    partial += std::string(part) + "/";
    if (part.empty()) continue;
    if (mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create ", partial, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

namespace {

// Ends the SHA-256 digest `ctx` (begun by StartSha256) and frees it; the
// digest in hex.
std::string FinishSha256(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kDigits[digest[i] >> 4]);
    out.push_back(kDigits[digest[i] & 15]);
  }
  return out;
}

EVP_MD_CTX* StartSha256() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  return ctx;
}

}  // namespace

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  EVP_MD_CTX* ctx = StartSha256();
  std::string buf(1 << 20, '\0');
  ssize_t n;
  while ((n = read(fd, buf.data(), buf.size())) > 0) {
    EVP_DigestUpdate(ctx, buf.data(), n);
  }
  close(fd);
  std::string digest = FinishSha256(ctx);
  if (n < 0) return absl::InternalError(absl::StrCat("cannot read ", path));
  return digest;
}

std::string Sha256Hex(std::string_view bytes) {
  EVP_MD_CTX* ctx = StartSha256();
  EVP_DigestUpdate(ctx, bytes.data(), bytes.size());
  return FinishSha256(ctx);
}

std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  std::string path(buf);
  const std::string kDeleted = " (deleted)";
  if (absl::EndsWith(path, kDeleted))
    path.resize(path.size() - kDeleted.size());
  return path;
}

}  // namespace shoal
