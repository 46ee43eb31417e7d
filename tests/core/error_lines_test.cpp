// core/error_lines.h: a message becomes whole lines, each prefixed and tagged, and the rank tag
// comes from the launcher's environment only when there are several ranks.
#include "core/error_lines.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace collage {
namespace {

TEST(ErrorLines, EveryLineIsPrefixedAndTagged) {
  EXPECT_EQ(error_lines("collage: error: ", "rank 2 of 3: ", "bad value"),
            "collage: error: rank 2 of 3: bad value\n");
  EXPECT_EQ(error_lines("p: ", "", "first\nsecond"), "p: first\np: second\n");
  EXPECT_EQ(error_lines("p: ", "t ", "ends with a newline\n"), "p: t ends with a newline\n");
  EXPECT_EQ(error_lines("p: ", "", ""), "p: \n");
}

// Sets (or clears, for nullptr) the launcher's variables for one test and restores them.
class LauncherEnvironment {
 public:
  LauncherEnvironment(const char* rank, const char* size, const char* pmi_rank = nullptr,
                      const char* pmi_size = nullptr) {
    set("OMPI_COMM_WORLD_RANK", rank), set("OMPI_COMM_WORLD_SIZE", size);
    set("PMI_RANK", pmi_rank), set("PMI_SIZE", pmi_size);
  }
  ~LauncherEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value.has_value())
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }

 private:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(ErrorLines, RankTagComesFromTheLauncher) {
  {
    const LauncherEnvironment open_mpi("2", "3");
    EXPECT_EQ(launcher_rank_tag(), "rank 2 of 3: ");
  }
  {
    const LauncherEnvironment mpich(nullptr, nullptr, "0", "4");
    EXPECT_EQ(launcher_rank_tag(), "rank 0 of 4: ");
  }
  {
    const LauncherEnvironment one_rank("0", "1");
    EXPECT_EQ(launcher_rank_tag(), "");
  }
  {
    const LauncherEnvironment none(nullptr, nullptr);
    EXPECT_EQ(launcher_rank_tag(), "");
  }
  {
    const LauncherEnvironment garbage("two", "3");
    EXPECT_EQ(launcher_rank_tag(), "");
  }
}

}  // namespace
}  // namespace collage
