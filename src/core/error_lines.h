#pragma once
// Error messages on stderr that stay whole when several ranks print at once. mpirun forwards
// each rank's stderr in the chunks the rank wrote, so a line written in pieces
// (std::cerr << a << b << "\n") can run into another rank's: "…size 3collage: error: rank 2…".
// Here a message goes out in one write(2), each of its lines prefixed and, when the process is
// one rank of several that mpirun started, tagged with that rank.
#include <string>
#include <string_view>

namespace collage {

// "rank R of N: " when mpirun started this process as one of N > 1 ranks (Open MPI's
// OMPI_COMM_WORLD_RANK/SIZE, or MPICH's and Intel MPI's PMI_RANK/PMI_SIZE); "" otherwise.
std::string launcher_rank_tag();

// prefix + tag + line + "\n" for every line of message (one line when message is empty).
std::string error_lines(std::string_view prefix, std::string_view tag, std::string_view message);

// Writes text to stderr with one write(2) (more only if the system writes part of it).
void write_to_stderr(std::string_view text);

// write_to_stderr(error_lines(prefix, launcher_rank_tag(), message)).
void print_error(std::string_view prefix, std::string_view message);

}  // namespace collage
