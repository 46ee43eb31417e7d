#pragma once
// The collage command line (app.cpp), apart from the subcommands' CLI11 declarations in
// commands.h, so that main.cpp compiles without CLI11.

namespace collage {

// Parses argv, runs the subcommand, and returns the process's exit code: 0, 1 for an error
// (one message), 2 for a command line it cannot parse.
int run_cli(int argc, char** argv);

}  // namespace collage
