// Whole reads and writes through POSIX descriptors: see posix_file.h.
#include "checkpoint/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace collage {

namespace {
// One system call moves at most this much: Linux caps a read or write near 2 GiB anyway.
constexpr size_t kMaxChunk = size_t{1} << 30;
}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int FileDescriptor::release() { return std::exchange(fd_, -1); }

FileDescriptor open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  return FileDescriptor(fd);
}

FileDescriptor create_for_writing(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", path, std::strerror(errno));
  return FileDescriptor(fd);
}

uint64_t file_size(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  return uint64_t(st.st_size);
}

void write_all(int fd, const std::string& path, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min(size, kMaxChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: write failed: {}", path, std::strerror(errno));
    p += n, size -= size_t(n);
  }
}

void pread_all(int fd, const std::string& path, void* data, size_t size, uint64_t offset) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, std::min(size, kMaxChunk), off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: read failed at byte {}: {}", path, offset, std::strerror(errno));
    if (n == 0) fail("{}: unexpected end of file at byte {} (truncated?)", path, offset);
    p += n, size -= size_t(n), offset += uint64_t(n);
  }
}

void sync_and_close(FileDescriptor fd, const std::string& path) {
  if (::fsync(fd.get()) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
  if (::close(fd.release()) != 0) fail("{}: close failed: {}", path, std::strerror(errno));
}

void write_file_synced(const std::string& path, const std::string& data) {
  FileDescriptor fd = create_for_writing(path);
  write_all(fd.get(), path, data.data(), data.size());
  sync_and_close(std::move(fd), path);
}

std::string read_file(const std::string& path) {
  const FileDescriptor fd = open_for_reading(path);
  std::string data(file_size(fd.get(), path), '\0');
  pread_all(fd.get(), path, data.data(), data.size(), 0);
  return data;
}

}  // namespace collage
