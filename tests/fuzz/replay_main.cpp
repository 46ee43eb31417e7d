// The normal test suite's side of fuzzing: a fuzz target built without libFuzzer, replaying
// every file of the directories it is given (the checked-in seeds and the regression inputs
// of fixed findings) through LLVMFuzzerTestOneInput. A crash or an escaping exception fails
// the ctest that runs it (Fuzz.Replay.TARGET).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; i++) {
    if (!std::filesystem::is_directory(argv[i])) continue;  // a target without regressions yet
    for (const auto& entry : std::filesystem::directory_iterator(argv[i])) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
      std::printf("replay %s (%zu bytes)\n", entry.path().c_str(), bytes.size());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      replayed++;
    }
  }
  std::printf("%d input(s) replayed\n", replayed);
  return replayed > 0 ? 0 : 1;  // no input at all: the paths are wrong
}
