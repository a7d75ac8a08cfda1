// loop/run_log.h: a run's records as JSON lines (metrics per step, timeline
// events per process), one object per line.
//
// Contract
// - JsonlFile::open() creates or appends to a file; write() appends one
//   compact JSON object and a newline and flushes, so a process killed at any
//   moment leaves only whole lines behind (a reader skips a torn last line).
//   A write failure (disk full) is reported once on stderr and then ignored:
//   metrics never stop training.
// - Timeline::span() records one event {"process", "event", "start", "end",
//   ...extra} with wall-clock times (seconds since the Unix epoch), so the
//   timelines of several processes line up on one plot.
// - Threads: one thread per object.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "zorplex/result.h"

namespace loop {

// Seconds since the Unix epoch (system clock), to line up processes.
double wall_clock_seconds();

class JsonlFile {
 public:
  static zorplex::Result<std::unique_ptr<JsonlFile>> open(const std::string& path, bool append);
  ~JsonlFile();
  JsonlFile(const JsonlFile&) = delete;
  JsonlFile& operator=(const JsonlFile&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  JsonlFile(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
  bool failed_ = false;
};

class Timeline {
 public:
  // file may be null: then nothing is recorded.
  Timeline(JsonlFile* file, std::string process) : file_(file), process_(std::move(process)) {}
  void span(const std::string& event, double start, double end,
            nlohmann::json extra = nlohmann::json::object());

 private:
  JsonlFile* file_;
  std::string process_;
};

}  // namespace loop
