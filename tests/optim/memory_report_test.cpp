// The memory report's arithmetic and text, and the memory sizes `collage plan --memory`
// accepts.
#include "optim/memory_report.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace collage {
namespace {

TEST(MemoryReport, ParsesDecimalAndBinaryUnits) {
  EXPECT_EQ(parse_bytes("40GB"), 40e9);
  EXPECT_EQ(parse_bytes("40 gb"), 40e9);
  EXPECT_EQ(parse_bytes("80GiB"), 80.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1.5TB"), 1.5e12);
  EXPECT_EQ(parse_bytes("512MiB"), 512.0 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("12KB"), 12e3);
  EXPECT_EQ(parse_bytes("1000000"), 1e6);
  EXPECT_EQ(parse_bytes("100B"), 100.0);
  for (const char* bad : {"", "GB", "40 parsecs", "-1GB", "0", "nanGB", "40GBs"}) {
    try {
      parse_bytes(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("e.g. 40GB"), std::string::npos) << e.what();
    }
  }
}

TEST(MemoryReport, FormatsBytesInDecimalUnits) {
  EXPECT_EQ(format_bytes(1.714e9), "1.71 GB");
  EXPECT_EQ(format_bytes(840.8e6), "840.8 MB");
  EXPECT_EQ(format_bytes(12345), "12.3 KB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

TEST(MemoryReport, BytesPerParameterCountsWeightsGradientsAndStateComponents) {
  MemoryReport r;
  r.precision = Precision::collage_plus;
  r.parameters = 1000;
  r.parameter_bytes = r.gradient_bytes = 2000;
  for (const char* name : {"m", "v", "dtheta", "dv"}) r.state.push_back({name, "bf16", 2, 2000});
  r.state_bytes = 8000 + 3 * 48;  // alignment gaps: in the total, not in bytes/parameter
  r.activation_bytes = 5000;
  r.micro_batch = 2;
  r.seq_len = 16;
  EXPECT_EQ(r.bytes_per_parameter(), 12.0);
  EXPECT_EQ(r.total_bytes(), 2000u + 2000 + 8144 + 5000);

  const std::string text = format_memory_report(r);
  for (const char* line :
       {"memory per rank: 1000 parameters (0.00 M) at tensor-parallel 1, data-parallel 1; "
        "optimizer collage-plus\n",
        "  parameters (bf16)                      2.0 KB   2.00 B/parameter\n",
        "  optimizer state                        8.1 KB   8.14 B/parameter\n",
        "    δθ (bf16)                            2.0 KB   2.00 B/parameter\n",
        "    δv (bf16)                            2.0 KB   2.00 B/parameter\n",
        "  θ + g + state                         12.1 KB  12.00 B/parameter\n",
        "  activations (2 x 16 tokens)            5.0 KB\n",
        "  total                                 17.1 KB\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing:\n" << line << "in:\n" << text;
}

}  // namespace
}  // namespace collage
