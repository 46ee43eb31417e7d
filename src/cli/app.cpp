// The `collage` root command: subcommand dispatch, --version, and the one place where an
// Error becomes a message on stderr and a non-zero exit.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cli/commands.h"
#include "collage_version.h"
#include "config/config_fields.h"
#include "core/error.h"
#include "core/error_lines.h"

namespace collage {
namespace {

// A command line CLI11 rejected, said the way every other error is, with a hint.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc,
                                 char** argv) {
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands({})) names.push_back(command->get_name());
  const std::string list = fmt::format("commands: {}", fmt::join(names, ", "));
  if (argc < 2) return fmt::format("no command given ({}; collage --help)", list);
  const std::string first = argv[1];
  if (!first.starts_with("-") && std::find(names.begin(), names.end(), first) == names.end())
    return fmt::format("unknown command '{}'{} ({})", first, did_you_mean(first, names), list);
  const std::string command =
      std::find(names.begin(), names.end(), first) != names.end() ? " " + first : "";
  return fmt::format("{} (collage{} --help)", e.what(), command);
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{
      "collage: pretrain GPT, BERT and RoBERTa models with bf16-only training state and the "
      "Collage optimizer.\n\nTypical use:\n"
      "  collage prepare-gpt --input corpus.jsonl --output-prefix data/my_text\n"
      "  collage inspect data/my_text\n"
      "  collage train configs/demo/gpt-demo.yaml --set training.max_steps=100\n"
      "Run `collage <command> --help` for each command's options.\n\n"
      "Exit status: 0 success; 1 an error (the message names the file, key or step); 2 a "
      "command line that does not parse, or an internal error; 75 `train` stopped by SIGTERM, "
      "SIGUSR1 or SIGINT after writing a checkpoint (resume with --resume)."};
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
  add_eval_command(app);
  add_generate_command(app);
  add_export_command(app);
  add_import_command(app);
  // Every command documents its exit statuses; those with a status of their own (train's 75)
  // or a narrower message say so themselves, the rest share this one.
  for (CLI::App* command : app.get_subcommands({})) {
    if (command->get_description().find("Exit status") == std::string::npos)
      command->description(command->get_description() +
                           "\nExit status: 0 done, 1 an error (the message names the file, key "
                           "or value), 2 a command line that does not parse or an internal "
                           "error.");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error("collage: error: ", describe_parse_error(app, e, argc, argv));
    return 2;
  } catch (const ExitStatus& e) {
    return e.status;
  } catch (const Error& e) {
    print_error("collage: error: ", e.what());
    return 1;
  } catch (const std::exception& e) {
    print_error("collage: internal error: ", e.what());
    return 2;
  }
  return 0;
}

}  // namespace collage
