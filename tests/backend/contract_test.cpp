// The Backend contract (src/backend/backend_contract.h, docs/ARCHITECTURE.md, "The Backend
// contract"): every op refuses bad arguments alike on the cpu backend and on the cuda backend
// (here its kernels on the host emulator), with one message that names the op and the bad value.
// Every op of backend.h has a case below: an op added without one fails EveryOpHasACase.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "dist/backend_choice.h"

namespace collage {
namespace {

// One device buffer, zeroed, that every pointer argument of a case points into: the calls are
// refused before any memory is touched.
struct Memory {
  bf16* s;
  float* f;
  int32_t* i;
};

struct Case {
  std::string op;        // the Backend method the call exercises
  std::string expected;  // the whole message
  std::function<void(Backend&, const Memory&)> call;
};

std::vector<Case> cases() {
  return {
      {"embedding_forward", "embedding_forward: B = -1 must be >= 0",
       [](Backend& b, const Memory& m) {
         b.embedding_forward(m.s, m.i, m.s, nullptr, -1, 4, 8, 0, 16);
       }},
      {"embedding_forward", "embedding_forward: wte is null",
       [](Backend& b, const Memory& m) {
         b.embedding_forward(m.s, m.i, nullptr, nullptr, 2, 4, 8, 0, 16);
       }},
      {"embedding_backward",
       "embedding_backward: owned vocabulary [5, 2) must be a range of at most 2^31 - 1 rows from "
       "0 up",
       [](Backend& b, const Memory& m) {
         b.embedding_backward(m.s, m.s, m.s, m.i, 2, 4, 8, 5, 2);
       }},
      {"embedding_backward", "embedding_backward: tokens is null",
       [](Backend& b, const Memory& m) {
         b.embedding_backward(m.s, nullptr, m.s, nullptr, 2, 4, 8, 0, 16);
       }},
      {"layernorm_forward", "layernorm_forward: C = 0 must be >= 1",
       [](Backend& b, const Memory& m) {
         b.layernorm_forward(m.s, m.f, m.f, m.s, m.s, m.s, 4, 0, 1e-5f);
       }},
      {"layernorm_forward", "layernorm_forward: eps = -1 must be >= 0",
       [](Backend& b, const Memory& m) {
         b.layernorm_forward(m.s, m.f, m.f, m.s, m.s, m.s, 4, 8, -1.0f);
       }},
      {"residual_layernorm_forward", "residual_layernorm_forward: b is null",
       [](Backend& b, const Memory& m) {
         b.residual_layernorm_forward(m.s, m.s, m.f, m.f, m.s, nullptr, m.s, m.s, 4, 8, 1e-5f);
       }},
      {"layernorm_backward", "layernorm_backward: mean is null",
       [](Backend& b, const Memory& m) {
         b.layernorm_backward(m.s, nullptr, nullptr, m.s, m.s, m.s, nullptr, m.f, 4, 8);
       }},
      {"matmul_forward", "matmul_forward: OC = -1 must be >= 0",
       [](Backend& b, const Memory& m) { b.matmul_forward(m.s, m.s, m.s, nullptr, 4, 8, -1); }},
      {"matmul_backward", "matmul_backward: dout is null",
       [](Backend& b, const Memory& m) {
         b.matmul_backward(nullptr, m.s, nullptr, nullptr, m.s, m.s, 4, 8, 8);
       }},
      {"gelu_forward", "gelu_forward: n = -1 must be >= 0",
       [](Backend& b, const Memory& m) { b.gelu_forward(m.s, m.s, -1); }},
      {"gelu_backward", "gelu_backward: an input is null (n = 4)",
       [](Backend& b, const Memory& m) { b.gelu_backward(m.s, m.s, nullptr, 4); }},
      {"gelu_backward_bias", "gelu_backward_bias: dbias is formed from dinp, which is null",
       [](Backend& b, const Memory& m) {
         b.gelu_backward_bias(nullptr, m.s, m.s, m.s, 4, 8, false);
       }},
      {"add", "add: a tensor is null (n = 4)",
       [](Backend& b, const Memory& m) { b.add(m.s, m.s, nullptr, 4); }},
      {"accumulate", "accumulate: n = -3 must be >= 0",
       [](Backend& b, const Memory& m) { b.accumulate(m.s, m.s, -3); }},
      {"gelu_erf_forward", "gelu_erf_forward: a tensor is null (n = 4)",
       [](Backend& b, const Memory& m) { b.gelu_erf_forward(nullptr, m.s, 4); }},
      {"gelu_erf_backward", "gelu_erf_backward: an input is null (n = 4)",
       [](Backend& b, const Memory& m) { b.gelu_erf_backward(m.s, nullptr, m.s, 4); }},
      {"tanh_forward", "tanh_forward: n = -1 must be >= 0",
       [](Backend& b, const Memory& m) { b.tanh_forward(m.s, m.s, -1); }},
      {"tanh_backward", "tanh_backward: n = -2 must be >= 0",
       [](Backend& b, const Memory& m) { b.tanh_backward(nullptr, m.s, m.s, -2); }},
      {"dropout_forward", "dropout_forward: dropout probability p = 1 must be in [0, 1)",
       [](Backend& b, const Memory& m) { b.dropout_forward(m.s, m.s, 4, 1.0f, 0, 0); }},
      // A null gradient is not computed, but its arguments are still checked.
      {"dropout_backward", "dropout_backward: dropout probability p = -0.5 must be in [0, 1)",
       [](Backend& b, const Memory& m) { b.dropout_backward(nullptr, m.s, 4, -0.5f, 0, 0); }},
      {"attention_forward_dropout",
       "attention_forward_dropout: dropout probability p = 1.5 must be in [0, 1)",
       [](Backend& b, const Memory& m) {
         b.attention_forward_dropout(m.s, m.f, m.s, nullptr, true, 1, 4, 2, 8, 1.5f, 0, 0);
       }},
      {"attention_backward_dropout", "attention_backward_dropout: lse is null",
       [](Backend& b, const Memory& m) {
         b.attention_backward_dropout(m.s, m.s, m.s, m.s, nullptr, nullptr, true, 1, 4, 2, 8, 0.1f,
                                      0, 0);
       }},
      {"gather_rows", "gather_rows: C = 0 must be >= 1",
       [](Backend& b, const Memory& m) { b.gather_rows(m.s, m.s, m.i, 2, 0); }},
      {"scatter_add_rows", "scatter_add_rows: count = -1 must be in [0, 2^31)",
       [](Backend& b, const Memory& m) { b.scatter_add_rows(m.s, m.s, m.i, -1, 8); }},
      {"rope_forward", "rope_forward: head size 5 is odd; rotate-half needs pairs",
       [](Backend& b, const Memory& m) { b.rope_forward(m.s, m.s, 1, 1, 1, 5, 10000.0f); }},
      {"rope_backward", "rope_backward: base = 0 must be > 0",
       [](Backend& b, const Memory& m) { b.rope_backward(m.s, m.s, 1, 2, 1, 4, 0.0f); }},
      {"attention_forward", "attention_forward: T = 0 must be >= 1",
       [](Backend& b, const Memory& m) {
         b.attention_forward(m.s, m.f, m.s, nullptr, true, 1, 0, 2, 8);
       }},
      {"attention_backward", "attention_backward: out is null",
       [](Backend& b, const Memory& m) {
         b.attention_backward(m.s, m.s, nullptr, m.s, m.f, nullptr, true, 1, 4, 2, 8);
       }},
      {"attention_backward", "attention_backward: dqkv_sums is formed from dqkv, which is null",
       [](Backend& b, const Memory& m) {
         b.attention_backward(nullptr, m.s, m.s, m.s, m.f, nullptr, true, 1, 4, 2, 8, m.s);
       }},
      {"cross_entropy_forward", "cross_entropy_forward: padded vocabulary Vp = 7 must be >= V = 8",
       [](Backend& b, const Memory& m) { b.cross_entropy_forward(m.f, m.s, m.i, 4, 8, 7); }},
      {"cross_entropy_backward", "cross_entropy_backward: V = 0 must be >= 1",
       [](Backend& b, const Memory& m) { b.cross_entropy_backward(m.s, m.s, m.i, 4, 0, 8, 1.0f); }},
      {"cross_entropy_shard_max", "cross_entropy_shard_max: vocab_begin = -1 must be >= 0",
       [](Backend& b, const Memory& m) { b.cross_entropy_shard_max(m.f, m.s, 4, 8, 8, -1); }},
      {"cross_entropy_shard_sums", "cross_entropy_shard_sums: row_max is null",
       [](Backend& b, const Memory& m) {
         b.cross_entropy_shard_sums(m.f, m.s, m.i, nullptr, 4, 8, 8, 0);
       }},
      {"cross_entropy_shard_loss", "cross_entropy_shard_loss: N = -1 must be in [0, 2^31)",
       [](Backend& b, const Memory& m) {
         b.cross_entropy_shard_loss(m.f, m.f, m.f, m.f, m.i, -1);
       }},
      {"cross_entropy_shard_backward", "cross_entropy_shard_backward: Vl = -1 must be >= 0",
       [](Backend& b, const Memory& m) {
         b.cross_entropy_shard_backward(m.s, m.s, m.i, m.f, 4, 8, -1, 0, 1.0f);
       }},
      {"sum", "sum: n = -1 must be >= 0", [](Backend& b, const Memory& m) { b.sum(m.f, -1); }},
      {"sum_squares", "sum_squares: a tensor is null (n = 4)",
       [](Backend& b, const Memory&) { b.sum_squares(nullptr, 4); }},
      {"scale", "scale: n = -2 must be >= 0",
       [](Backend& b, const Memory& m) { b.scale(m.s, 2.0f, -2); }},
      {"optimizer_step", "optimizer_step (bf16): state[1] is not set (2 state tensors)",
       [](Backend& b, const Memory& m) {
         OptimizerStep step;
         step.precision = Precision::bf16;
         step.param = m.s, step.grad = m.s, step.n = 4;
         step.state[0] = m.s;
         b.optimizer_step(step);
       }},
      {"optimizer_step", "optimizer_step (fp32-master): step counter t = 0 must be >= 1",
       [](Backend& b, const Memory& m) {
         OptimizerStep step;
         step.param = m.s, step.grad = m.s, step.n = 4;
         for (void*& state : step.state) state = m.s;
         step.t = 0;
         b.optimizer_step(step);
       }},
      {"optimizer_step", "optimizer_step (bf16): grad_scale = 0 must be finite and > 0",
       [](Backend& b, const Memory& m) {
         OptimizerStep step;
         step.precision = Precision::bf16;
         step.param = m.s, step.grad = m.s, step.n = 4;
         step.state[0] = step.state[1] = m.s;
         step.grad_scale = 0.0f;
         b.optimizer_step(step);
       }},
      {"optimizer_steps",
       "optimizer_steps: two of the 2 steps update overlapping weights (4 bytes in common); each "
       "tensor may be stepped once per call",
       [](Backend& b, const Memory& m) {
         OptimizerStep steps[2];
         for (int k = 0; k < 2; k++) {
           steps[k].precision = Precision::bf16;
           steps[k].param = m.s + 2 * k, steps[k].grad = m.s, steps[k].n = 4;
           steps[k].state[0] = steps[k].state[1] = m.s;
         }
         b.optimizer_steps(steps);
       }},
  };
}

// The message `call` throws on `backend`, or "" when it does not throw.
std::string refusal(Backend& backend, const Case& c) {
  void* memory = backend.allocate(1 << 16);
  const Memory m{static_cast<bf16*>(memory), static_cast<float*>(memory),
                 static_cast<int32_t*>(memory)};
  std::string message;
  try {
    c.call(backend, m);
  } catch (const Error& e) {
    message = e.what();
  }
  backend.synchronize();
  backend.release(memory);
  return message;
}

TEST(Contract, CpuAndCudaRefuseAlike) {
  auto cpu = make_cpu_backend(1);
  auto emulated = make_cuda_emulated_backend();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.op);
    EXPECT_EQ(refusal(*cpu, c), c.expected);
    EXPECT_EQ(refusal(*emulated, c), c.expected);
  }
}

// A null gradient is "not needed": its other tensors may then be null too, on both backends.
TEST(Contract, NullGradientNeedsNothing) {
  auto cpu = make_cpu_backend(1);
  auto emulated = make_cuda_emulated_backend();
  for (Backend* backend : {cpu.get(), emulated.get()}) {
    SCOPED_TRACE(backend->name());
    EXPECT_NO_THROW(backend->gelu_backward(nullptr, nullptr, nullptr, 4));
    EXPECT_NO_THROW(backend->gelu_backward_bias(nullptr, nullptr, nullptr, nullptr, 4, 8, true));
    EXPECT_NO_THROW(backend->dropout_backward(nullptr, nullptr, 4, 0.5f, 0, 0));
    EXPECT_NO_THROW(backend->scatter_add_rows(nullptr, nullptr, nullptr, 4, 8));
    EXPECT_NO_THROW(backend->layernorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, nullptr, 4, 8));
    backend->synchronize();
  }
}

// The ops of backend.h: its `virtual ... do_<op>(` declarations.
std::set<std::string> backend_ops() {
  std::ifstream file(std::string(COLLAGE_SOURCE_DIR) + "/src/backend/backend.h");
  std::stringstream text;
  text << file.rdbuf();
  const std::string header = text.str();
  const std::regex declaration(R"(virtual\s+\w+\s+do_(\w+)\()");
  std::set<std::string> ops;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), declaration);
       it != std::sregex_iterator(); ++it)
    ops.insert((*it)[1]);
  return ops;
}

TEST(Contract, EveryOpHasACase) {
  const std::set<std::string> ops = backend_ops();
  ASSERT_GE(ops.size(), 30u) << "backend.h's do_ declarations not found";
  std::set<std::string> covered;
  for (const Case& c : cases()) covered.insert(c.op);
  for (const std::string& op : ops)
    EXPECT_TRUE(covered.count(op)) << op << " has no case in contract_test.cpp";
  for (const std::string& op : covered)
    EXPECT_TRUE(ops.count(op)) << op << " is not an op of backend.h";
}

}  // namespace
}  // namespace collage
