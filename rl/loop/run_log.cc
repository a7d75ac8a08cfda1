#include "loop/run_log.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

namespace loop {

double wall_clock_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

zorplex::Result<std::unique_ptr<JsonlFile>> JsonlFile::open(const std::string& path, bool append) {
  std::FILE* file = std::fopen(path.c_str(), append ? "a" : "w");
  if (file == nullptr) return zorplex::Error{"cannot open " + path + " for writing: " + std::strerror(errno)};
  return std::unique_ptr<JsonlFile>(new JsonlFile(path, file));
}

JsonlFile::~JsonlFile() {
  std::fclose(file_);
}

void JsonlFile::write(const nlohmann::json& record) {
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  if (!ok && !failed_) {
    failed_ = true;
    std::fprintf(stderr, "warning: cannot write to %s (%s); further records are lost\n", path_.c_str(),
                 std::strerror(errno));
  }
}

void Timeline::span(const std::string& event, double start, double end, nlohmann::json extra) {
  if (file_ == nullptr) return;
  extra["process"] = process_;
  extra["event"] = event;
  extra["start"] = start;
  extra["end"] = end;
  file_->write(extra);
}

}  // namespace loop
