// Formatting for messages, logs and tables a person reads: numbers, and text that came from
// data (file and member names, job messages) made safe to print.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mlcd {

// `v` with exactly `digits` digits after the point ("%.*f"): Fixed(83.456, 2) == "83.46".
std::string Fixed(double v, int digits = 2);

// A byte count in binary units: "512 B", "1.5 KiB", "30.7 MiB", "2.00 GiB".
std::string FormatBytes(uint64_t bytes);

// A Unix time in milliseconds as ISO 8601 UTC to the second ("2026-11-25T16:40:00Z"); "-" for
// unix_ms <= 0 (never set).
std::string FormatUtcTime(int64_t unix_ms);

// What EscapeControlChars does with '\n' and '\t'.
enum class LineBreaks {
  kEscape,  // a log line, a table cell: one line, always
  kKeep,    // a multi-line message (e.g. a spec's list of problems) printed as it is
};

// `text` made safe for a terminal or a log line (ESC, BEL and backspace in a tar
// member's name reached `mlcdctl list` and the logs raw): every control character becomes
// visible, C0 ones and DEL as "\xNN" ("\n", "\r", "\t" for those three), C1 ones (U+0080 to
// U+009F, which terminals also obey) as "\u00NN", and bytes that are not UTF-8 as "\xNN".
// Printable ASCII and valid UTF-8 stay as they are (a backslash too: this is for reading,
// not for parsing back).
std::string EscapeControlChars(std::string_view text, LineBreaks line_breaks = LineBreaks::kEscape);

// True when `text` holds a C0 control character, DEL, or a C1 control (UTF-8 encoded): what
// names and keys from data must not hold.
bool HasControlChars(std::string_view text);

}  // namespace mlcd
