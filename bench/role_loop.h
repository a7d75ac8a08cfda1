// RoleLoop: the command loop every bench role serves its driver with (the
// roles of roles.h, fanout.h and sharded.h, and python_pull_reader.cc), so
// that one piece of code speaks the line protocol they share.
//
// The protocol: the driver writes one command per line, its first word the
// command's name and the rest its arguments; the role answers each with one
// line, "ERROR <what>" for any failure (the role stays up and serves the next
// command). The role-specific commands and answers are documented beside each
// role (roles.h, fanout.h, sharded.h, python_pull_reader.cc).
//   READY: a role set up at start (connected, bound, allocated) says so with
//     one line, "READY" or "READY <fields>" (ready_then_run()); one whose
//     setup failed says "ERROR <what>" instead (startup_error()) and exits 1
//     without serving. A role that sets up on a command (roles.h's publisher:
//     SETUP -> READY) calls run() at once and answers READY from a handler.
//   QUIT, or the end of the input (the driver is gone, or no line within 24
//     hours), ends run() with 0 and no answer.
//   An unregistered command is answered "ERROR unknown command '<name>'".
//
// Registering commands: on("NAME", handler) before run(). The handler gets
// the line after the name as a stream to read its arguments from, and returns
// the answer line, or nullopt for no answer at all. A handler that writes a
// line before its answer (WAITING, COPIED) does so with send(); when that
// fails it returns nullopt at once, and run() returns 1.
//
// Threads and ownership: run() reads, dispatches and answers on the calling
// thread, one command at a time, and the handlers run there too; nothing else
// may use the stream meanwhile. The loop borrows the stream: its owner (the
// role, or main.cc's server for a TCP connection) closes it after run().
//
// Errors: run() returns 1 when a line cannot be written (the driver is gone),
// 0 after QUIT or the end of the input: the role's exit code.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "line_stream.h"

namespace wsbench {

class RoleLoop {
 public:
  // The answer to one command, or nullopt for none; `args` holds the line after the command's name.
  using Handler = std::function<std::optional<std::string>(std::istringstream& args)>;

  explicit RoleLoop(wsutil::LineStream& io) : io_(io) {}
  RoleLoop(const RoleLoop&) = delete;
  RoleLoop& operator=(const RoleLoop&) = delete;

  // Serves `command` with `handler` (a later call for the same name replaces it). QUIT is the loop's own.
  void on(const std::string& command, Handler handler);

  // Writes a line before the current command's answer; false when the driver is gone.
  bool send(const std::string& line);

  // Serves commands until QUIT or the end of the input (0), or until a line cannot be written (1).
  int run();
  // Writes "READY" (or "READY <fields>"), then run(); 1 if the READY line cannot be written.
  int ready_then_run(const std::string& fields);

 private:
  wsutil::LineStream& io_;
  std::map<std::string, Handler> handlers_;
  bool gone_ = false;  // a write failed
};

// A role's setup failed: writes "ERROR <what>" in place of READY. Returns 1, the role's exit code.
int startup_error(wsutil::LineStream& io, const std::string& what);

}  // namespace wsbench
