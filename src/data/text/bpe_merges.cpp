// BPE merge loop (see bpe_merges.h for why the priority queue equals encoder.py's loop).
#include "data/text/bpe_merges.h"

#include <functional>
#include <queue>

namespace collage {

void BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
  table_.emplace(key(left, right), Merge{num_merges_, merged});
  ++num_merges_;
}

bool BpeMerges::contains(int32_t left, int32_t right) const {
  return table_.count(key(left, right)) != 0;
}

void BpeMerges::apply(std::vector<int32_t>& ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;

  // The word as a doubly linked list over byte positions. A position that was merged into
  // its left neighbour is dead (id -1); position 0 is never merged away.
  struct Symbol {
    int32_t id, prev, next;  // prev/next: neighbouring live positions, -1 at the ends
  };
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};

  // A mergeable adjacent pair as it was when queued; stale once either side has changed.
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair_starting_at = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = table_.find(key(symbols[left].id, symbols[right].id));
    if (it == table_.end()) return;
    queue.push(
        {it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair_starting_at(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.id != c.left_id || left.next != c.right || right.id != c.right_id) continue;
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    // The merged token forms new pairs with both neighbours.
    if (left.prev >= 0) push_pair_starting_at(left.prev);
    push_pair_starting_at(c.left);
  }

  ids.clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace collage
