// rope_forward / rope_backward of the cuda backend (kernels/rope.cu) under the host SIMT
// emulator against the cpu backend: elementwise with the cpu's own cos/sin table
// (src/numerics/rope_table.h), so bit-identical, forward, in place and backward, including
// odd HS/2, T = 1, several heads, a long sequence (angles of ~1000 rad, where a table built in
// fp32 would differ) and a change of shape or base between calls (the device table is
// rebuilt only then).
#include "cuda_test_util.h"

namespace collage::test {
namespace {

struct Shape {
  int B, T, NH, HS;
  float base;
};
// In this order on one backend pair: each change of T, HS or base re-uploads the table, and
// the repeat of the first shape after others checks that the table follows the shape.
const Shape kShapes[] = {{2, 13, 3, 6, 10000.0f},  {1, 1, 1, 10, 10000.0f},
                         {2, 13, 1, 14, 10000.0f}, {1, 13, 3, 64, 10000.0f},
                         {2, 13, 3, 6, 10000.0f},  {2, 13, 3, 6, 500.0f},
                         {1, 1000, 1, 6, 10000.0f}};

size_t qkv_size(const Shape& s) { return size_t(s.B) * s.T * 3 * s.NH * s.HS; }

TEST(CudaRope, ForwardAndBackwardBitIdenticalToCpu) {
  BackendPair pair;
  Rng rng(7);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                      << " HS=" << s.HS << " base=" << s.base);
    const auto qkv = random_values<bf16>(rng, qkv_size(s), 2.0);
    const auto dout = random_values<bf16>(rng, qkv_size(s));
    const auto dqkv0 = random_values<bf16>(rng, qkv_size(s));

    Mirrored<bf16> in(pair, qkv), out(pair, qkv_size(s));
    pair.cpu->rope_forward(out.cpu(), in.cpu(), s.B, s.T, s.NH, s.HS, s.base);
    pair.emulated->rope_forward(out.emulated(), in.emulated(), s.B, s.T, s.NH, s.HS, s.base);
    expect_same_bits(out.from_emulated(), out.from_cpu(), "rope_forward out");

    // In place (out = qkv), as the model may call it.
    pair.cpu->rope_forward(in.cpu(), in.cpu(), s.B, s.T, s.NH, s.HS, s.base);
    pair.emulated->rope_forward(in.emulated(), in.emulated(), s.B, s.T, s.NH, s.HS, s.base);
    expect_same_bits(in.from_emulated(), in.from_cpu(), "rope_forward in place");
    expect_same_bits(in.from_emulated(), out.from_cpu(), "rope_forward in place vs out");

    // Backward writes over a dqkv that holds other values (which neither backend may read).
    Mirrored<bf16> dy(pair, dout), dx(pair, dqkv0);
    pair.cpu->rope_backward(dx.cpu(), dy.cpu(), s.B, s.T, s.NH, s.HS, s.base);
    pair.emulated->rope_backward(dx.emulated(), dy.emulated(), s.B, s.T, s.NH, s.HS, s.base);
    const auto got = dx.from_emulated();
    expect_same_bits(got, dx.from_cpu(), "rope_backward dqkv");
    EXPECT_FALSE(same_bits(got, dqkv0)) << "rope_backward wrote nothing";
  }
}

TEST(CudaRope, RejectsOddHeadSize) {
  BackendPair pair;
  Mirrored<bf16> qkv(pair, size_t(3 * 5)), out(pair, size_t(3 * 5));
  EXPECT_THROW(pair.emulated->rope_forward(out.emulated(), qkv.emulated(), 1, 1, 1, 5, 10000.0f),
               Error);
}

}  // namespace
}  // namespace collage::test
