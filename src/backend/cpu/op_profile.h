#pragma once
// `collage bench --profile` on the cpu backend: the host time of every op, summed by op family
// (core/op_family.h). The cpu runs each op to completion inside its call, so a steady_clock
// pair around the call is the op's time, all threads included. Off (the default), an op pays
// one branch. A family here is a Backend op's: a matmul's bias and bias gradient count as GEMMs
// (the cuda tables count the bias-gradient kernel as "other").
#include <chrono>
#include <vector>

#include "core/op_family.h"

namespace collage::cpu {

class OpProfile {
 public:
  // Times one op from construction to the end of its scope:
  //   const auto timed = profile_.time(OpFamily::gemm);
  class Timed {
   public:
    Timed(OpProfile* profile, OpFamily family) : profile_(profile), family_(family) {
      if (profile_) start_ = std::chrono::steady_clock::now();
    }
    ~Timed() {
      if (!profile_) return;
      const std::chrono::duration<double, std::milli> elapsed =
          std::chrono::steady_clock::now() - start_;
      profile_->totals_.ms[int(family_)] += elapsed.count();
      profile_->totals_.launches[int(family_)] += 1;
    }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    OpProfile* profile_;  // null: not profiling
    OpFamily family_;
    std::chrono::steady_clock::time_point start_;
  };

  [[nodiscard]] Timed time(OpFamily family) { return Timed(on_ ? this : nullptr, family); }

  void start() {
    totals_ = {};
    on_ = true;
  }
  // Each family's ms and op count since start(); profiling stops.
  std::vector<OpFamilyTime> stop() {
    on_ = false;
    return totals_.table();
  }

 private:
  bool on_ = false;
  OpFamilyTotals totals_;
};

}  // namespace collage::cpu
