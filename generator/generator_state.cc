// generator/generator_state.cc: see generator_state.h.
#include "generator/generator_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace generator {
namespace {

constexpr const char* kFormat = "weightsync generator state";
constexpr int kFormatVersion = 1;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ",") + name;
  return out;
}

zorplex::Error refused(const std::string& path, const std::string& why) {
  return zorplex::Error{"cannot resume from " + path + ": " + why +
                        "; restore the file, or start this generator without --resume (its task stream then "
                        "starts again at task 0 and repeats its prompts)"};
}

}  // namespace

TaskInStream task_in_stream(std::int64_t task_seed_base, std::uint32_t id, std::uint64_t n) {
  return TaskInStream{static_cast<std::uint64_t>(task_seed_base) + std::uint64_t{id} * kTasksPerGenerator +
                          n % kTasksPerGenerator,
                      n / kTasksPerGenerator};
}

std::string generator_state_file(const std::string& out_dir, std::uint32_t id) {
  return out_dir + "/generator-" + std::to_string(id) + "-state.json";
}

zorplex::Result<bool> save_generator_state(const std::string& path, const GeneratorState& state) {
  const nlohmann::ordered_json j{{"format", kFormat},
                                 {"format_version", kFormatVersion},
                                 {"id", state.id},
                                 {"tasks", state.tasks},
                                 {"task_seed_base", state.task_seed_base},
                                 {"sampling_seed", state.sampling_seed},
                                 {"next_task", state.position.next_task},
                                 {"data_epoch", state.position.next_task / kTasksPerGenerator},
                                 {"next_round", state.position.next_round},
                                 {"next_sequence", state.position.next_sequence}};
  const std::string text = j.dump(2) + "\n";
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return zorplex::Error{"cannot write " + temp + ": " + std::strerror(errno)};
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      return zorplex::Error{"cannot write " + temp + ": " + std::strerror(error)};
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return zorplex::Error{"cannot write " + temp + ": " + std::strerror(errno)};
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return zorplex::Error{"cannot rename " + temp + " to " + path + ": " + std::strerror(errno)};
  }
  return true;
}

zorplex::Result<GeneratorState> load_generator_state(const std::string& path) {
  std::ifstream in(path);
  if (!in) return refused(path, std::string("no state file (") + std::strerror(errno) + ")");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return refused(path, "the file is not JSON (corrupt or truncated)");
  const nlohmann::json format = j.value("format", nlohmann::json());
  if (!format.is_string() || format.get<std::string>() != kFormat) {
    return refused(path, std::string("the file is not a generator state (no \"format\": \"") + kFormat + "\")");
  }
  const nlohmann::json version = j.value("format_version", nlohmann::json());
  if (!version.is_number_integer() || version.get<std::int64_t>() != kFormatVersion) {
    return refused(path, "format_version " + version.dump() + ", this generator reads " +
                             std::to_string(kFormatVersion));
  }
  GeneratorState state;
  try {
    state.id = j.at("id").get<std::uint32_t>();
    state.tasks = j.at("tasks").get<std::vector<std::string>>();
    state.task_seed_base = j.at("task_seed_base").get<std::int64_t>();
    state.sampling_seed = j.at("sampling_seed").get<std::uint64_t>();
    state.position.next_task = j.at("next_task").get<std::uint64_t>();
    state.position.next_round = j.at("next_round").get<std::uint64_t>();
    state.position.next_sequence = j.at("next_sequence").get<std::uint64_t>();
    const auto epoch = j.at("data_epoch").get<std::uint64_t>();
    for (const char* field : {"id", "sampling_seed", "next_task", "next_round", "next_sequence", "data_epoch"}) {
      if (!j.at(field).is_number_unsigned()) throw std::invalid_argument(std::string(field) + " is not a count");
    }
    if (epoch != state.position.next_task / kTasksPerGenerator) {
      return refused(path, "data_epoch " + std::to_string(epoch) + " does not match next_task " +
                               std::to_string(state.position.next_task) + " (corrupt)");
    }
  } catch (const std::exception& e) {
    return refused(path, std::string("a field is missing or of the wrong type (") + e.what() + ")");
  }
  return state;
}

zorplex::Result<bool> check_same_stream(const GeneratorState& saved, const GeneratorState& wanted,
                                        const std::string& path) {
  std::string differences;
  const auto differ = [&](const std::string& what, const std::string& was, const std::string& now) {
    if (was == now) return;
    differences += (differences.empty() ? "" : ", ") + what + " " + was + " in the file, " + now + " now";
  };
  differ("--id", std::to_string(saved.id), std::to_string(wanted.id));
  differ("--task", join(saved.tasks), join(wanted.tasks));
  differ("--task-seed-base", std::to_string(saved.task_seed_base), std::to_string(wanted.task_seed_base));
  differ("--seed", std::to_string(saved.sampling_seed), std::to_string(wanted.sampling_seed));
  if (differences.empty()) return true;
  return zorplex::Error{"cannot resume from " + path + ": it is another task stream (" + differences +
                        "); resume with the flags it was written with, or start without --resume (a new "
                        "stream from task 0)"};
}

}  // namespace generator
