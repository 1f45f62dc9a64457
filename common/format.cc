#include "common/format.h"

#include <cstdio>

namespace mlcd {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace mlcd
