// RoleLoop (role_loop.h): the bench roles' READY / command / QUIT loop.
#include "role_loop.h"

#include <chrono>
#include <utility>

#include "role_support.h"

namespace wsbench {

void RoleLoop::on(const std::string& command, Handler handler) {
  handlers_[command] = std::move(handler);
}

bool RoleLoop::send(const std::string& line) {
  if (!io_.write_line(line)) gone_ = true;
  return !gone_;
}

int RoleLoop::run() {
  for (;;) {
    auto line = io_.read_line(std::chrono::hours(24));
    if (!line) return 0;  // the driver is gone
    std::istringstream args(*line);
    std::string command;
    args >> command;
    if (command == "QUIT") return 0;
    const auto handler = handlers_.find(command);
    const std::optional<std::string> answer =
        handler != handlers_.end() ? handler->second(args) : error_line("unknown command '" + command + "'");
    if (gone_) return 1;
    if (answer && !send(*answer)) return 1;
  }
}

int RoleLoop::ready_then_run(const std::string& fields) {
  if (!send(fields.empty() ? "READY" : "READY " + fields)) return 1;
  return run();
}

int startup_error(wsutil::LineStream& io, const std::string& what) {
  io.write_line(error_line(what));
  return 1;
}

}  // namespace wsbench
