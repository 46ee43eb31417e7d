#pragma once
// The merge table of a byte-level BPE and the merge loop, on token ids.
//
// encoder.py's loop is: find the adjacent pair with the lowest rank, merge every occurrence
// of it from left to right, repeat. apply() gets the same result in O(n log n) with a
// priority queue ordered by (rank, position): it needs every merge's inputs to be single
// bytes or outputs of EARLIER merges (true of any merge list BPE training writes, checked
// when the table is loaded), so a merge never creates a pair that outranks the one being
// merged, and the queue pops all occurrences of a rank, left to right, before any other.
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace collage {

class BpeMerges {
 public:
  // Adds the next merge (its rank is the number of merges added before it).
  void add(int32_t left, int32_t right, int32_t merged);
  int32_t size() const { return num_merges_; }
  bool contains(int32_t left, int32_t right) const;

  // ids: one token per byte of a word on entry, the word's BPE tokens on return.
  void apply(std::vector<int32_t>& ids) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;  // id of left+right
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  std::unordered_map<uint64_t, Merge> table_;  // (left, right) -> merge
  int32_t num_merges_ = 0;
};

}  // namespace collage
