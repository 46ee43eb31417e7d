// EDQ figures from sums, and the parameter groups they are reported for.
#include "optim/edq.h"

#include <cmath>

namespace collage {

EdqFigures edq_figures(const EdqSums& sums) {
  EdqFigures f;
  if (sums.u_squared > 0) {
    f.edq = sums.dot / std::sqrt(sums.u_squared);
    f.edq_ratio = sums.dot / sums.u_squared;
  }
  if (sums.updated > 0) f.lost_frac = double(sums.lost) / double(sums.updated);
  return f;
}

std::string edq_group_of(const std::string& parameter_name) {
  const std::string first = parameter_name.substr(0, parameter_name.find('.'));
  if (first == "wte" || first == "wpe") return "embeddings";
  if (first == "ln_f" || first == "lm_head") return "head";
  if (first == "h") {
    const size_t end = parameter_name.find('.', 2);  // "h.12.attn..." -> "h.12"
    return parameter_name.substr(0, end);
  }
  return first;
}

EdqGroups edq_groups_of(const std::vector<std::string>& parameter_names) {
  EdqGroups groups;
  for (const std::string& name : parameter_names) {
    const std::string group = edq_group_of(name);
    int k = 0;
    while (k < int(groups.names.size()) && groups.names[k] != group) k++;
    if (k == int(groups.names.size())) groups.names.push_back(group);
    groups.index.push_back(k);
  }
  return groups;
}

}  // namespace collage
