// rollout/transcript_writer.cc: see transcript_writer.h.
#include "rollout/transcript_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "policy/tokenizer.h"
#include "zorplex/episode.h"
#include "zorplex/kinds.h"
#include "zorplex/protocol.h"
#include "zorplex/scoring.h"

namespace rollout {

std::vector<TranscriptTurn> transcript_turns(const Trajectory& trajectory) {
  std::vector<TranscriptTurn> turns;
  const std::size_t n = std::min(trajectory.tokens.size(), trajectory.generated.size());
  std::size_t i = std::min(trajectory.prompt_tokens, n);
  while (i < n) {
    const bool generated = trajectory.generated[i] != 0;
    std::size_t end = i;
    while (end < n && (trajectory.generated[end] != 0) == generated) ++end;
    const std::vector<TokenId> run(trajectory.tokens.begin() + static_cast<std::ptrdiff_t>(i),
                                   trajectory.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    if (generated || turns.empty() || !turns.back().tool_result.empty()) {
      // A model turn (an injection never comes first, nor twice in a row).
      turns.push_back(TranscriptTurn{});
      if (!generated) {
        turns.back().tool_result = policy::decode(run);
      } else {
        turns.back().model = policy::decode(run);
      }
    } else {
      TranscriptTurn& turn = turns.back();
      turn.tool_result = policy::decode(run);
      turn.tool_calls = zorplex::parse_tool_calls(turn.model);  // a result follows: they ran
    }
    i = end;
  }
  return turns;
}

std::string transcript_line(const TranscriptContext& context, const Trajectory& trajectory) {
  nlohmann::ordered_json turns = nlohmann::ordered_json::array();
  for (const TranscriptTurn& turn : transcript_turns(trajectory)) {
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (const zorplex::ToolCall& call : turn.tool_calls) {
      calls.push_back({{"name", call.name}, {"argument", call.argument}});
    }
    turns.push_back({{"model", turn.model}, {"tool_calls", calls}, {"tool_result", turn.tool_result}});
  }
  const std::vector<TokenId> prompt(
      trajectory.tokens.begin(),
      trajectory.tokens.begin() +
          static_cast<std::ptrdiff_t>(std::min(trajectory.prompt_tokens, trajectory.tokens.size())));
  const zorplex::Task& task = trajectory.task;
  nlohmann::ordered_json line{
      {"generator", context.generator},
      {"round", context.round},
      {"group_sequence", context.group_sequence},
      {"index_in_group", context.index_in_group},
      {"task_seed", context.task_seed},
      {"task_index", context.task_index},
      {"data_epoch", context.data_epoch},
      {"temperature", context.temperature},
      {"sent", context.sent},
      {"kind", zorplex::kind_name(task.kind)},
      {"difficulty", zorplex::difficulty_name(task.difficulty)},
      {"question", task.question},
      {"answer", task.answer ? nlohmann::ordered_json(*task.answer) : nlohmann::ordered_json(nullptr)},
      {"prompt", policy::render(prompt)},
      {"turns", std::move(turns)},
      {"end", zorplex::episode_end_name(trajectory.end)},
      {"truncated", trajectory.truncated},
      {"reward", trajectory.score.reward},
      {"correct", trajectory.score.correct},
      {"failure_mode", zorplex::failure_mode_name(trajectory.score.failure_mode)},
      {"tool_calls", trajectory.score.tool_calls},
      {"oldest_version", context.version ? *context.version : trajectory.oldest_version()},
      {"newest_version", context.version ? *context.version : trajectory.newest_version()},
      {"generated_tokens", trajectory.generated_tokens()},
      {"tokens", trajectory.tokens.size()}};
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string transcripts_file(const std::string& arg, std::uint32_t generator) {
  std::error_code ec;
  if ((!arg.empty() && arg.back() == '/') || std::filesystem::is_directory(arg, ec)) {
    return (std::filesystem::path(arg) / ("transcripts-generator-" + std::to_string(generator) + ".jsonl"))
        .string();
  }
  return arg;
}

zorplex::Result<std::unique_ptr<TranscriptWriter>> TranscriptWriter::open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return zorplex::Error{"cannot open transcripts file " + path + ": " + std::strerror(errno)};
  }
  return std::unique_ptr<TranscriptWriter>(new TranscriptWriter(path, file));
}

TranscriptWriter::~TranscriptWriter() {
  flush();
  std::fclose(file_);
}

void TranscriptWriter::add(const std::string& line) {
  pending_ += line;
  pending_ += '\n';
  ++pending_lines_;
}

void TranscriptWriter::flush() {
  if (pending_.empty()) return;
  if (!failed_) {
    const bool ok = std::fwrite(pending_.data(), 1, pending_.size(), file_) == pending_.size() &&
                    std::fflush(file_) == 0;
    if (ok) {
      lines_written_ += pending_lines_;
    } else {
      std::fprintf(stderr, "transcripts: writing %s failed (%s); no more transcripts are written\n",
                   path_.c_str(), std::strerror(errno));
      failed_ = true;
    }
  }
  pending_.clear();
  pending_lines_ = 0;
}

}  // namespace rollout
