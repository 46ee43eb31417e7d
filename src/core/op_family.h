#pragma once
// The op families `collage bench --profile` reports a step's GPU time by, and the family of a
// launch's op name (the name launch() in kernels/common.cuh and the GEMMs are given).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace collage {

enum class OpFamily : int {
  attention_forward,
  attention_backward,
  gemm,
  layernorm,
  gelu,
  cross_entropy,
  optimizer,
  other,
};
constexpr int kOpFamilies = int(OpFamily::other) + 1;

// How the profile table names each family.
constexpr std::array<const char*, kOpFamilies> kOpFamilyNames = {
    "attention forward", "attention backward", "GEMMs", "layernorm", "GELU",
    "cross-entropy",     "optimizer",          "other"};

// The family of an op name, by its prefix: "attention_forward", "attention_backward (dq)",
// "gemm", "layernorm_backward", "residual_layernorm_forward", "gelu_erf_forward",
// "cross_entropy_shard_sums", "optimizer_step (EDQ sums)"; anything else (embedding, bias
// gradient, RoPE, dropout, sums, casts, scale, gathers) is "other".
inline OpFamily op_family(std::string_view op) {
  const auto starts = [&](std::string_view prefix) {
    return op.substr(0, prefix.size()) == prefix;
  };
  if (starts("attention_forward")) return OpFamily::attention_forward;
  if (starts("attention_backward")) return OpFamily::attention_backward;
  if (starts("gemm")) return OpFamily::gemm;
  if (starts("layernorm") || starts("residual_layernorm")) return OpFamily::layernorm;
  if (starts("gelu")) return OpFamily::gelu;
  if (starts("cross_entropy")) return OpFamily::cross_entropy;
  if (starts("optimizer")) return OpFamily::optimizer;
  return OpFamily::other;
}

// One family's share of a profiled run: device milliseconds (host milliseconds of the
// emulator on cuda-emulated) and launches.
struct OpFamilyTime {
  std::string family;
  double ms = 0;
  int64_t launches = 0;
};

// A profile's running sums per family, kept by each runtime's LaunchProfile.
struct OpFamilyTotals {
  std::array<double, kOpFamilies> ms{};
  std::array<int64_t, kOpFamilies> launches{};
  std::vector<OpFamilyTime> table() const {
    std::vector<OpFamilyTime> rows;
    for (int f = 0; f < kOpFamilies; f++) rows.push_back({kOpFamilyNames[f], ms[f], launches[f]});
    return rows;
  }
};

}  // namespace collage
