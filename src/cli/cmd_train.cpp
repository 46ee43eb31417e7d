// Placeholder until the train command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace collage {

void add_train_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("train", "(not built yet)");
  cmd->callback([] { fail("'train' is not implemented yet"); });
}

}  // namespace collage
