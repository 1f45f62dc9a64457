// Number formatting for messages and tables a person reads.
#pragma once

#include <string>

namespace mlcd {

// `v` with exactly `digits` digits after the point ("%.*f"): Fixed(83.456, 2) == "83.46".
std::string Fixed(double v, int digits = 2);

}  // namespace mlcd
