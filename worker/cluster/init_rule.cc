#include "worker/cluster/init_rule.h"

#include <faiss/utils/random.h>

#include <unordered_map>

namespace mlcd::worker::cluster {

std::vector<int64_t> FaissInitialRows(int64_t nx, int k, int64_t faiss_seed) {
  std::vector<int64_t> head(static_cast<size_t>(k));
  std::unordered_map<int64_t, int64_t> moved;  // position -> value, where it differs from identity
  moved.reserve(static_cast<size_t>(k) * 2);
  auto value_at = [&](int64_t pos) {
    auto it = moved.find(pos);
    return it == moved.end() ? pos : it->second;
  };
  faiss::RandomGenerator rng(faiss_seed + 1);
  for (int64_t i = 0; i < k; ++i) {
    if (i + 1 >= nx) {  // FAISS's loop stops at i + 1 < n: the last position keeps its value
      head[i] = value_at(i);
      break;
    }
    const int64_t j = i + rng.rand_int(static_cast<int>(nx - i));
    const int64_t vi = value_at(i), vj = value_at(j);
    head[i] = vj;
    moved[j] = vi;
  }
  return head;
}

}  // namespace mlcd::worker::cluster
