// Fuzz target: a BERT pretraining HDF5 file (BertHdf5File): open it (metadata and shape
// checks), describe its datasets as `collage inspect` does, read its first and last rows and a
// batch that repeats rows across blocks, then check every row (`collage inspect --check`) for
// files of up to 4096 rows. The row cache is kept small so that blocks are evicted and re-read.
//
// Every libhdf5 object collage opened must be closed again, whatever the file did: an open
// object left behind keeps the file open inside libhdf5 (a finding, checked after each input).
//
// libhdf5 (Debian's 1.10.8, not instrumented) parses the file's structure itself: superblock,
// object headers, B-trees, filters. On damaged metadata it can crash, allocate gigabytes or
// loop before collage has anything to check, which is why BertHdf5File opens every file in a
// probe process first (src/data/bert/hdf5_probe.h): those files must come back as collage::Error
// naming the file, like any other refusal. The probe gets 0.5 s here instead of 60, so that it
// refuses a slow file before libFuzzer's one-second timeout would call it a finding. A probe
// that dies in collage's own code (the first frame of its sanitizer report is not libhdf5's)
// is a finding, not a refusal.
//
// What libhdf5 does in this process, once the probe has opened the file, is fuzzed too: its
// leaks on error paths are not reported (tests/fuzz/bert_hdf5.lsan), and its mallocs of sizes
// read from the file fail as in a release build (allocator_may_return_null=1, bert_hdf5.asan).
// A crash, or a leak or sanitizer report in collage's own code, is a finding.
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "data/bert/bert_hdf5.h"
#include "data/bert/hdf5_probe.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  static const bool limited = (set_hdf5_probe_limits({.seconds_per_file = 0.5}), true);
  (void)limited;
  const std::string path =
      fuzz::write_file("shard.hdf5", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    BertHdf5File file(path, /*vocab_size=*/30522, /*cache_bytes=*/64 << 10);
    (void)file.datasets();
    if (file.size() == 0) return 0;
    (void)file.get(0);
    (void)file.get(file.size() - 1);
    BertBatch batch;
    batch.reset(file.seq_len(), file.max_predictions());
    const std::vector<int64_t> rows = {file.size() - 1, 0, file.size() / 2, 0};
    file.append_rows(rows, batch);
    if (batch.size != int64_t(rows.size())) std::abort();
    if (file.size() <= 4096) file.check_all_rows(/*rows_per_read=*/7);
  } catch (const Error& e) {
    // A refusal, unless the probe died inside collage's own code: the stack frame its
    // sanitizer report names is not libhdf5's.
    const std::string message = e.what();
    if (message.find("first frame: ") != std::string::npos &&
        message.find("libhdf5") == std::string::npos) {
      std::fprintf(stderr, "fuzz_bert_hdf5: the probe crashed in collage's code: %s\n",
                   message.c_str());
      std::abort();
    }
  }
  if (const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); open != 0) {
    std::fprintf(stderr, "fuzz_bert_hdf5: %zd libhdf5 object(s) left open\n", open);
    std::abort();
  }
  return 0;
}
