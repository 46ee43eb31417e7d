// EDQ figures from sums (docs/PRECISION.md §7's definitions, worked by hand), the per-layer
// groups by parameter name, and the cumulative ratio over a run.
#include "optim/edq.h"

#include <gtest/gtest.h>

#include <cmath>

namespace collage {
namespace {

TEST(Edq, FiguresFollowTheDefinitions) {
  // Δ = (1, 0, 0.5), u = (1, 2, 1): ⟨Δ,u⟩ = 1.5, ‖u‖² = 6, one of three updates lost.
  const EdqSums sums{1.5, 6.0, 3, 1};
  const EdqFigures f = edq_figures(sums);
  EXPECT_DOUBLE_EQ(f.edq, 1.5 / std::sqrt(6.0));
  EXPECT_DOUBLE_EQ(f.edq_ratio, 0.25);
  EXPECT_DOUBLE_EQ(f.lost_frac, 1.0 / 3.0);
  // Δ = u exactly: ratio 1, edq = ‖u‖, nothing lost.
  const EdqFigures exact = edq_figures({4.0, 4.0, 2, 0});
  EXPECT_EQ(exact.edq, 2.0);
  EXPECT_EQ(exact.edq_ratio, 1.0);
  EXPECT_EQ(exact.lost_frac, 0.0);
  // No update at all: nothing intended, nothing lost (and no NaN in the metrics).
  const EdqFigures none = edq_figures({});
  EXPECT_EQ(none.edq, 0.0);
  EXPECT_EQ(none.edq_ratio, 1.0);
  EXPECT_EQ(none.lost_frac, 0.0);
}

TEST(Edq, GroupsAreEmbeddingsEachLayerAndTheHead) {
  EXPECT_EQ(edq_group_of("wte.weight"), "embeddings");
  EXPECT_EQ(edq_group_of("wpe.weight"), "embeddings");
  EXPECT_EQ(edq_group_of("h.0.ln_1.weight"), "h.0");
  EXPECT_EQ(edq_group_of("h.12.mlp.fc2.bias"), "h.12");
  EXPECT_EQ(edq_group_of("ln_f.bias"), "head");
  EXPECT_EQ(edq_group_of("lm_head.weight"), "head");
  EXPECT_EQ(edq_group_of("pooler.dense.weight"), "pooler");

  const EdqGroups groups =
      edq_groups_of({"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.qkv.weight",
                     "h.1.ln_1.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"});
  EXPECT_EQ(groups.names, (std::vector<std::string>{"embeddings", "h.0", "h.1", "head"}));
  EXPECT_EQ(groups.index, (std::vector<int>{0, 0, 1, 1, 2, 3, 3, 3}));
}

TEST(Edq, CumulativeRatioIsTheRatioOfSums) {
  EdqCumulative run;
  EXPECT_EQ(run.ratio(), 1.0);
  run.add({1.0, 1.0, 5, 0});    // step ratio 1
  run.add({1.0, 3.0, 5, 0});    // step ratio 1/3
  EXPECT_EQ(run.ratio(), 0.5);  // (1 + 1) / (1 + 3), not the mean of the ratios (2/3)
  run.add({0.0, 4.0, 5, 5});    // everything lost
  EXPECT_EQ(run.ratio(), 0.25);
}

}  // namespace
}  // namespace collage
