// CountingComm: counts the payload of each collective, then forwards it (counting_comm.h).
#include "dist/counting_comm.h"

namespace collage {
namespace {

class CountingComm final : public Comm {
 public:
  CountingComm(Comm& inner, CommTraffic& traffic) : inner_(inner), traffic_(traffic) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }

  void all_reduce_sum(float* data, int64_t n) override {
    count(n * 4);
    inner_.all_reduce_sum(data, n);
  }
  void all_reduce_sum(double* data, int64_t n) override {
    count(n * 8);
    inner_.all_reduce_sum(data, n);
  }
  void all_reduce_sum(bf16* data, int64_t n) override {
    count(n * 2);
    inner_.all_reduce_sum(data, n);
  }
  void all_reduce_max(float* data, int64_t n) override {
    count(n * 4);
    inner_.all_reduce_max(data, n);
  }
  void reduce_scatter_sum(const float* send, float* receive, int64_t count_per_rank) override {
    count(count_per_rank * size() * 4);
    inner_.reduce_scatter_sum(send, receive, count_per_rank);
  }
  void reduce_scatter_sum(const bf16* send, bf16* receive, int64_t count_per_rank) override {
    count(count_per_rank * size() * 2);
    inner_.reduce_scatter_sum(send, receive, count_per_rank);
  }
  void all_gather(const void* send, void* receive, int64_t bytes_per_rank) override {
    count(bytes_per_rank * size());
    inner_.all_gather(send, receive, bytes_per_rank);
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    count(bytes);
    inner_.broadcast(data, bytes, root);
  }
  void barrier() override {
    count(0);
    inner_.barrier();
  }

 private:
  void count(int64_t bytes) {
    traffic_.bytes += bytes;
    traffic_.calls += 1;
  }

  Comm& inner_;
  CommTraffic& traffic_;
};

}  // namespace

std::unique_ptr<Comm> make_counting_comm(Comm& inner, CommTraffic& traffic) {
  return std::make_unique<CountingComm>(inner, traffic);
}

}  // namespace collage
