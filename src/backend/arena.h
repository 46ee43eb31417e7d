#pragma once
// Arena: one device allocation carved into tensors in order (like llm.c's single
// parameter/activation blocks). Constructed without a backend it only counts bytes, so the
// same layout code can first size an arena and then fill it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/error.h"

namespace collage {

class Arena {
 public:
  static constexpr size_t kAlignment = 256;

  Arena() = default;  // counting mode
  // Any backend (BackendT<bf16> or BackendT<float>): only allocate/release are used.
  template <typename B>
  Arena(B& backend, size_t bytes, std::string name) : name_(std::move(name)), capacity_(bytes) {
    base_ = static_cast<char*>(backend.allocate(bytes));
    release_ = [&backend](void* p) { backend.release(p); };
  }
  ~Arena() {
    if (release_ && base_) release_(base_);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Next `count` elements of T; nullptr in counting mode.
  template <typename T>
  T* take(int64_t count) {
    size_t offset = (used_ + kAlignment - 1) / kAlignment * kAlignment;
    size_t end = offset + static_cast<size_t>(count) * sizeof(T);
    if (base_) {
      COLLAGE_CHECK(end <= capacity_, "arena '{}' overflow: {} > {} bytes", name_, end, capacity_);
    }
    used_ = end;
    return base_ ? reinterpret_cast<T*>(base_ + offset) : nullptr;
  }

  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  char* base() const { return base_; }

 private:
  std::function<void(void*)> release_;
  std::string name_;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace collage
