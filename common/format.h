// Number formatting for messages and tables a person reads.
#pragma once

#include <cstdint>
#include <string>

namespace mlcd {

// `v` with exactly `digits` digits after the point ("%.*f"): Fixed(83.456, 2) == "83.46".
std::string Fixed(double v, int digits = 2);

// A byte count in binary units: "512 B", "1.5 KiB", "30.7 MiB", "2.00 GiB".
std::string FormatBytes(uint64_t bytes);

// A Unix time in milliseconds as ISO 8601 UTC to the second ("2026-11-25T16:40:00Z"); "-" for
// unix_ms <= 0 (never set).
std::string FormatUtcTime(int64_t unix_ms);

}  // namespace mlcd
