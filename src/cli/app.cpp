// The `collage` root command: subcommand dispatch, --version, and the one place where an
// Error becomes a message on stderr and a non-zero exit.
#include <spdlog/spdlog.h>

#include <iostream>

#include "cli/commands.h"
#include "collage_version.h"
#include "core/error.h"

namespace collage {

int run_cli(int argc, char** argv) {
  CLI::App app{
      "collage: pretrain GPT, BERT and RoBERTa models with bf16-only training state and the "
      "Collage optimizer.\n\nTypical use:\n"
      "  collage prepare-gpt --input corpus.jsonl --output-prefix data/my_text\n"
      "  collage inspect data/my_text\n"
      "  collage train configs/demo/gpt-demo.yaml --set training.max_steps=100\n"
      "Run `collage <command> --help` for each command's options."};
  app.set_version_flag("--version",
                       std::string("collage ") + COLLAGE_VERSION + " (" + COLLAGE_GIT + ")");
  app.require_subcommand(1);
  add_train_command(app);
  add_prepare_gpt_command(app);
  add_prepare_bert_command(app);
  add_inspect_command(app);
  add_bench_command(app);
  add_plan_command(app);
  add_tokenize_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ExitStatus& e) {
    return e.status;
  } catch (const Error& e) {
    std::cerr << "collage: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "collage: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace collage
