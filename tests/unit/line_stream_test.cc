// LineStream (tools/common): lines round trip over a pipe, and writing to a
// pipe whose reader is gone fails without SIGPIPE, without touching the
// process-wide SIGPIPE disposition, and leaves no SIGPIPE pending.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "line_stream.h"

TEST_CASE("line stream: lines round trip over a pipe, with a timeout when none comes",
          "[unit][line_stream]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  wsutil::LineStream reader(fds[0], -1);
  wsutil::LineStream writer(-1, fds[1]);
  CHECK(writer.write_line("hello"));
  CHECK(writer.write_line("second line"));
  CHECK(reader.read_line(std::chrono::seconds(1)) == std::optional<std::string>("hello"));
  CHECK(reader.read_line(std::chrono::seconds(1)) == std::optional<std::string>("second line"));
  CHECK_FALSE(reader.read_line(std::chrono::milliseconds(20)).has_value());
  // A line already in the pipe is read even with a timeout under a millisecond.
  CHECK(writer.write_line("quick"));
  CHECK(reader.read_line(std::chrono::milliseconds(0)) == std::optional<std::string>("quick"));
  CHECK(writer.write_line("also quick"));
  CHECK(reader.read_line(std::chrono::milliseconds(1)) == std::optional<std::string>("also quick"));
}

TEST_CASE(
    "line stream: a write to a pipe with no reader fails without SIGPIPE, leaving the disposition alone",
    "[unit][line_stream]") {
  // The default disposition would kill this process if SIGPIPE were delivered.
  struct sigaction before {};
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  REQUIRE(::sigaction(SIGPIPE, &dfl, &before) == 0);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::close(fds[0]);
  wsutil::LineStream writer(-1, fds[1]);
  CHECK_FALSE(writer.write_line("nobody listens"));
  CHECK_FALSE(writer.write_line("still nobody"));
  struct sigaction now {};
  REQUIRE(::sigaction(SIGPIPE, nullptr, &now) == 0);
  CHECK(now.sa_handler == SIG_DFL);
  sigset_t pending;
  sigpending(&pending);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
  ::sigaction(SIGPIPE, &before, nullptr);
}
