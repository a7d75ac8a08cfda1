// printable(): peer-provided strings made safe for logs and messages.
#include <catch2/catch.hpp>

#include <string>

#include "common/printable.h"

using weightsync::detail::printable;

TEST_CASE("printable: plain ASCII passes through unchanged", "[printable][hardening]") {
  CHECK(printable("gen-3 (host a.b:7)") == "gen-3 (host a.b:7)");
  CHECK(printable("") == "");
  CHECK(printable(" ~") == " ~");
}

TEST_CASE("printable: control bytes, DEL, backslash and non-ASCII bytes become hex escapes",
          "[printable][hardening]") {
  CHECK(printable("a\nb") == "a\\x0ab");
  CHECK(printable("\x1b[31mred") == "\\x1b[31mred");
  CHECK(printable(std::string("x\0y", 3)) == "x\\x00y");
  CHECK(printable("\x7f") == "\\x7f");
  CHECK(printable("\xc3\xa9t\xc3\xa9") == "\\xc3\\xa9t\\xc3\\xa9");  // UTF-8 too: ASCII only out
  CHECK(printable("a\\x41") == "a\\x5cx41");                         // an escape cannot be forged
  for (int c = 0; c < 256; ++c) {
    const std::string out = printable(std::string(1, static_cast<char>(c)));
    for (char o : out) CHECK((o >= 0x20 && o <= 0x7e));
  }
}

TEST_CASE("printable: long text is cut at max_chars input bytes with its full length",
          "[printable][hardening]") {
  const std::string long_name(100, 'a');
  CHECK(printable(long_name) == std::string(64, 'a') + "...(100 bytes)");
  CHECK(printable(std::string(64, 'b')) == std::string(64, 'b'));  // exactly the limit: not cut
  CHECK(printable("abcdef", 3) == "abc...(6 bytes)");
  CHECK(printable("abc", 0) == "...(3 bytes)");
  CHECK(printable("\n\n\n\n", 2) == "\\x0a\\x0a...(4 bytes)");
}
