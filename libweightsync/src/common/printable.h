// printable(): a peer-provided string made safe to put into a log line or an
// error message (names that arrive before authentication, error text from a
// peer).
//
// Contract: returns `text` with every byte outside printable ASCII (0x20..0x7e)
// and every backslash written as "\xNN" (two lowercase hex digits), so the
// result holds no control characters (no newlines, no terminal escapes) and
// no bytes that are not ASCII. At most `max_chars` input bytes are kept; if
// `text` is longer, the result ends in "...(N bytes)", N being the length of
// `text`. Pure function, any thread; may throw std::bad_alloc only.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace weightsync::detail {

std::string printable(std::string_view text, std::size_t max_chars = 64);

}  // namespace weightsync::detail
