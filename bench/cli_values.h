// Option values shared by weightsync-bench's subcommands: comma-separated
// lists and byte sizes with units. Errors are CLI11 ValidationErrors naming
// the option, so the user sees which value to fix.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace wsbench {

// "a,b,,c" -> {"a", "b", "c"} (empty items dropped).
inline std::vector<std::string> split_list(const std::string& text, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "64MiB", "64M", "1GiB", "1G", "4096" -> bytes, at least `min_bytes`.
inline std::uint64_t parse_bytes(const std::string& text, const std::string& option,
                                 std::uint64_t min_bytes = 0) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    throw CLI::ValidationError(option, "not a size: '" + text + "'");
  }
  std::string unit = text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KIB") scale = 1024.0;
  if (unit == "M" || unit == "MIB") scale = 1024.0 * 1024;
  if (unit == "G" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  if (scale == 0) throw CLI::ValidationError(option, "unknown unit in '" + text + "' (use B, KiB, MiB or GiB)");
  const auto bytes = static_cast<std::uint64_t>(value * scale);
  if (bytes < min_bytes) {
    throw CLI::ValidationError(option, "sizes must be at least " + std::to_string(min_bytes) + " bytes, not '" +
                                           text + "'");
  }
  return bytes;
}

}  // namespace wsbench
