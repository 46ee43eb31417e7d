// The one-process Comm: every collective over a group of one is the identity, or a copy
// where it has separate send and receive buffers (semantics: src/dist/comm.h).
#include <cstring>

#include "core/error.h"
#include "dist/comm.h"

namespace collage {
namespace {

class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_sum(bf16*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void reduce_scatter_sum(const float* send, float* receive, int64_t count_per_rank) override {
    copy(send, receive, count_per_rank * int64_t(sizeof(float)));
  }
  void reduce_scatter_sum(const bf16* send, bf16* receive, int64_t count_per_rank) override {
    copy(send, receive, count_per_rank * int64_t(sizeof(bf16)));
  }
  void all_gather(const void* send, void* receive, int64_t bytes_per_rank) override {
    copy(send, receive, bytes_per_rank);
  }
  void broadcast(void*, int64_t, int root) override {
    COLLAGE_CHECK(root == 0, "broadcast: root {} is not a rank of a one-process group", root);
  }
  void barrier() override {}

 private:
  static void copy(const void* send, void* receive, int64_t bytes) {
    if (bytes > 0 && send != receive) std::memmove(receive, send, size_t(bytes));
  }
};

}  // namespace

std::unique_ptr<Comm> make_single_comm() { return std::make_unique<SingleComm>(); }

}  // namespace collage
