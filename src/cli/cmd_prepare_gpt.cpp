// Placeholder until the prepare-gpt command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace collage {

void add_prepare_gpt_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("prepare-gpt", "(not built yet)");
  cmd->callback([] { fail("'prepare-gpt' is not implemented yet"); });
}

}  // namespace collage
