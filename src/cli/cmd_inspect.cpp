// Placeholder until the inspect command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace collage {

void add_inspect_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("inspect", "(not built yet)");
  cmd->callback([] { fail("'inspect' is not implemented yet"); });
}

}  // namespace collage
