// StagedComm: device buffers staged through host buffers (staged_comm.h).
#include "dist/staged_comm.h"

#include <cstring>
#include <vector>

namespace collage {
namespace {

class StagedComm final : public Comm {
 public:
  StagedComm(Comm& host, Backend& backend) : host_(host), backend_(backend) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

  void all_reduce_sum(float* data, int64_t n) override {
    in_place(data, n, [&](float* h) { host_.all_reduce_sum(h, n); });
  }
  void all_reduce_sum(double* data, int64_t n) override {
    in_place(data, n, [&](double* h) { host_.all_reduce_sum(h, n); });
  }
  void all_reduce_sum(bf16* data, int64_t n) override {
    in_place(data, n, [&](bf16* h) { host_.all_reduce_sum(h, n); });
  }
  void all_reduce_max(float* data, int64_t n) override {
    in_place(data, n, [&](float* h) { host_.all_reduce_max(h, n); });
  }
  void reduce_scatter_sum(const float* send, float* receive, int64_t count_per_rank) override {
    reduce_scatter(send, receive, count_per_rank);
  }
  void reduce_scatter_sum(const bf16* send, bf16* receive, int64_t count_per_rank) override {
    reduce_scatter(send, receive, count_per_rank);
  }
  void all_gather(const void* send, void* receive, int64_t bytes_per_rank) override {
    const size_t bytes = size_t(bytes_per_rank);
    std::vector<char> host_send(bytes);
    std::vector<char> host_receive(bytes * static_cast<size_t>(size()));
    backend_.copy_to_host(host_send.data(), send, bytes);
    host_.all_gather(host_send.data(), host_receive.data(), bytes_per_rank);
    backend_.copy_to_device(receive, host_receive.data(), host_receive.size());
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    std::vector<char> host(static_cast<size_t>(bytes));
    backend_.copy_to_host(host.data(), data, host.size());
    host_.broadcast(host.data(), bytes, root);
    backend_.copy_to_device(data, host.data(), host.size());
  }
  void barrier() override { host_.barrier(); }

 private:
  // Copy out, run `collective` on the host copy, copy back.
  template <typename T, typename Collective>
  void in_place(T* data, int64_t n, Collective collective) {
    std::vector<T> host(static_cast<size_t>(n));
    backend_.copy_to_host(host.data(), data, host.size() * sizeof(T));
    collective(host.data());
    backend_.copy_to_device(data, host.data(), host.size() * sizeof(T));
  }
  // send may contain receive (in place, comm.h): both are read/written through host copies.
  template <typename T>
  void reduce_scatter(const T* send, T* receive, int64_t count_per_rank) {
    std::vector<T> host_send(static_cast<size_t>(count_per_rank * size()));
    std::vector<T> host_receive(static_cast<size_t>(count_per_rank));
    backend_.copy_to_host(host_send.data(), send, host_send.size() * sizeof(T));
    host_.reduce_scatter_sum(host_send.data(), host_receive.data(), count_per_rank);
    backend_.copy_to_device(receive, host_receive.data(), host_receive.size() * sizeof(T));
  }

  Comm& host_;
  Backend& backend_;
};

}  // namespace

std::unique_ptr<Comm> make_staged_comm(Comm& host, Backend& backend) {
  return std::make_unique<StagedComm>(host, backend);
}

}  // namespace collage
