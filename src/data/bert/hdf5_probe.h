#pragma once
// Opening BERT HDF5 files in a throwaway process first (docs/DATA.md §8).
//
// libhdf5 parses a file's own structure (superblock, object headers, the root group's heap)
// trusting the sizes it finds there. On a damaged file Debian's libhdf5 1.10.8 can crash,
// allocate gigabytes or run for minutes inside H5Fopen, H5Lexists or H5Dopen2, before collage
// has anything to check (tests/fuzz/README.md says what fuzzing found). A crash there
// would take a rank, and with it a whole job, down without naming the file.
//
// So each file is first opened by a probe: this same executable started again (posix_spawn of
// /proc/self/exe: nothing of this process, its MPI, NCCL or CUDA state, is forked) with
// COLLAGE_HDF5_PROBE in its environment. A function that runs before main() sees it, limits
// its own memory, opens each listed file as BertHdf5File does (metadata only: H5Fopen, the six
// datasets, their types, shapes and storage) and writes one line per file. Then, per file:
//   - the probe opened it: the caller opens it too (libhdf5 does the same on the same bytes);
//   - collage refused it: the caller throws the probe's message (what opening it here says);
//   - the probe crashed, ran out of its memory or exceeded its time: the caller throws an
//     Error naming the file and what happened.
// One probe serves a whole shard set (BertShardSet opens every shard at startup).
//
// Limits: the probe's address space may grow 1 GiB past what it started with (a failed malloc
// then makes libhdf5 report an error), and each file gets 60 s (a named pipe, a hung file
// system, or libhdf5 looping). Built with AddressSanitizer, whose heap lives in address space
// reserved at start-up, the probe is held to 1 GiB + 256 MiB resident instead (the sanitizer
// ends it at that).
#include <cstdint>
#include <string>
#include <vector>

namespace collage {

struct Hdf5ProbeLimits {
  double seconds_per_file = 60;
  int64_t extra_memory_bytes = int64_t{1} << 30;
};

// The limits of the probes this process starts from now on.
void set_hdf5_probe_limits(const Hdf5ProbeLimits& limits);

// Opens each of `paths` in one probe process; returns when every file opened there, else
// throws collage::Error for the first that did not (files after it are not tried).
void probe_bert_hdf5_files(const std::vector<std::string>& paths);

// Probe processes this process has started (for tests).
int64_t hdf5_probes_started();

}  // namespace collage
