// Fuzz target: a BERT pretraining HDF5 file (BertHdf5File): open it (metadata and shape
// checks), describe its datasets as `collage inspect` does, read its first and last rows and a
// batch that repeats rows across blocks, then check every row (`collage inspect --check`) for
// files of up to 4096 rows. The row cache is kept small so that blocks are evicted and re-read.
//
// Every libhdf5 object collage opened must be closed again, whatever the file did: an open
// object left behind keeps the file open inside libhdf5 (a finding, checked after each input).
//
// libhdf5 (Debian's 1.10.8, not instrumented) parses the file's structure itself: superblock,
// object headers, B-trees, filters. Two things it does on damaged files are its own, and
// scripts/fuzz.sh runs this target so that they are not reported (tests/fuzz/README.md):
// leaks on its error paths (tests/fuzz/bert_hdf5.lsan) and malloc requests of sizes read
// from the file, which fail in a release build and which libhdf5 then reports as an error
// (allocator_may_return_null=1 gives it the same failure under AddressSanitizer). A crash, or
// a leak or sanitizer report in collage's own code, is still a finding.
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "data/bert_hdf5.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  const std::string path =
      fuzz::write_file("shard.hdf5", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::refusals_allowed([&] {
    BertHdf5File file(path, /*vocab_size=*/30522, /*cache_bytes=*/64 << 10);
    (void)file.datasets();
    if (file.size() == 0) return;
    (void)file.get(0);
    (void)file.get(file.size() - 1);
    BertBatch batch;
    batch.reset(file.seq_len(), file.max_predictions());
    const std::vector<int64_t> rows = {file.size() - 1, 0, file.size() / 2, 0};
    file.append_rows(rows, batch);
    if (batch.size != int64_t(rows.size())) std::abort();
    if (file.size() <= 4096) file.check_all_rows(/*rows_per_read=*/7);
  });
  if (const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); open != 0) {
    std::fprintf(stderr, "fuzz_bert_hdf5: %zd libhdf5 object(s) left open\n", open);
    std::abort();
  }
  return 0;
}
