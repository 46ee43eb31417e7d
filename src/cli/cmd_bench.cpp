// Placeholder until the bench command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace collage {

void add_bench_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("bench", "(not built yet)");
  cmd->callback([] { fail("'bench' is not implemented yet"); });
}

}  // namespace collage
