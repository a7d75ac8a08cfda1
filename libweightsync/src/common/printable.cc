// printable(): escaping of peer-provided strings for logs and messages.
#include "common/printable.h"

namespace weightsync::detail {
namespace {

bool needs_escape(unsigned char c) {
  return c < 0x20 || c > 0x7e || c == '\\';
}

void append_escaped(unsigned char c, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\x");
  out->push_back(kHex[c >> 4]);
  out->push_back(kHex[c & 0x0f]);
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_chars) {
  const std::size_t kept = text.size() < max_chars ? text.size() : max_chars;
  std::string out;
  out.reserve(kept + 16);
  for (std::size_t i = 0; i < kept; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (needs_escape(c)) {
      append_escaped(c, &out);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (kept < text.size()) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace weightsync::detail
