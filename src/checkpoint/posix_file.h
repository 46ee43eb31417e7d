#pragma once
// Whole reads and writes through POSIX descriptors, for the files the tools write and read
// (safetensors, the export's config and tokenizer files): short reads and writes and EINTR are
// retried, every failure is an Error naming the file, and a file written with
// write_file_synced is on disk (fsynced) when the call returns.
#include <cstddef>
#include <cstdint>
#include <string>

namespace collage {

// An open file descriptor, closed when destroyed; move-only. -1 is "none".
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// open(path, O_RDONLY); Error "PATH: cannot open: REASON".
FileDescriptor open_for_reading(const std::string& path);
// open(path, O_WRONLY | O_CREAT | O_TRUNC), mode 0644; Error "PATH: cannot create: REASON".
FileDescriptor create_for_writing(const std::string& path);

// Size of the open file in bytes (fstat).
uint64_t file_size(int fd, const std::string& path);

// Writes all `size` bytes at the current position.
void write_all(int fd, const std::string& path, const void* data, size_t size);

// Reads `size` bytes from byte `offset` (pread: the position is untouched, so threads may share
// the descriptor); an end of file before them is an Error.
void pread_all(int fd, const std::string& path, void* data, size_t size, uint64_t offset);

// fsyncs and closes `fd` (released from its owner): Error if either fails, since a failed close
// after writes can mean lost data.
void sync_and_close(FileDescriptor fd, const std::string& path);

// Writes `data` to `path` (created or truncated) and fsyncs it. Not atomic by itself: callers
// write under a temporary name or directory and rename.
void write_file_synced(const std::string& path, const std::string& data);
// The whole of a (small) file: a tokenizer file, a config.json. Error naming `path`.
std::string read_file(const std::string& path);

}  // namespace collage
