#pragma once
// Runs the real `collage` executable for the CLI tests, from the source directory (so the
// default asset paths resolve), capturing stdout and stderr together.
#include <sys/wait.h>

#include <cstdio>
#include <string>

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// environment: assignments to set for the run only, e.g. "COLLAGE_CPU_OPTIMIZER=baseline".
inline CommandResult run_collage(const std::string& args, const std::string& environment = "") {
  const std::string command = "cd '" COLLAGE_SOURCE_DIR "' && " +
                              (environment.empty() ? "" : "env " + environment + " ") +
                              "'" COLLAGE_BINARY "' " + args + " 2>&1";
  CommandResult run;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}
