// rollout/transcript_writer.h: rollouts written to disk as transcripts, one
// JSON line per trajectory (Marin's rollout transcripts, seed 001), so a run's
// samples can be read back: what each prompt was, what the model wrote, which
// tools it called and what they answered, and what it earned.
//
// Contract
// - transcript_turns() splits a trajectory's tokens after the prompt into the
//   turns the rollout played: each run of generated tokens is a turn's model
//   text (decode(): special tokens such as EOS dropped), and the run of
//   injected tokens after it is that turn's tool result, exactly as the model
//   saw it. tool_calls are the calls that ran: those of a turn followed by a
//   result (a turn that also answered ran none, as zorplex::Episode says).
// - transcript_line() is one compact JSON object, no newline: the context
//   fields (generator, round, group_sequence, index_in_group, task_seed,
//   task_index, data_epoch, temperature, sent), then kind, difficulty,
//   question, answer, prompt (render(): specials shown as <|user|> etc.),
//   turns [{model, tool_calls [{name, argument}], tool_result}], end,
//   truncated, reward, correct, failure_mode, tool_calls (count), oldest_version,
//   newest_version, generated_tokens and tokens. Bytes that are not UTF-8 come
//   out as U+FFFD (the byte-level model may write any byte).
// - Size: every text field is a slice of the trajectory's tokens (at most the
//   model's max_seq_len; the question, tool calls and prompt repeat parts of
//   them), so a line is at most about 1 KB + 3 * 6 * max_seq_len bytes (6:
//   the JSON escape of a control byte); Zorplex lines are 1 to 2 KB.
// - TranscriptWriter appends lines to one file. add() buffers a line in
//   memory; flush() writes the buffered lines and fflush()es them (the
//   generator calls it once per round, so a killed generator loses at most
//   the round in progress, and a reader may see a torn last line only if the
//   process died inside the write). A write failure (disk full) is reported
//   once on stderr and later lines are dropped: transcripts never stop a run.
// - Ownership: the writer owns its FILE; closed (after a last flush) by the
//   destructor. Threads: one thread per writer; the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rollout/trajectory.h"
#include "zorplex/result.h"
#include "zorplex/tools.h"

namespace rollout {

// Where a trajectory came from (the generator's side of it).
struct TranscriptContext {
  std::uint32_t generator = 0;
  std::uint64_t round = 0;
  std::uint64_t group_sequence = 0;  // TrajectoryGroup::sequence
  std::size_t index_in_group = 0;
  std::uint64_t task_seed = 0;
  std::uint64_t task_index = 0;  // which of the seed's tasks (carry candidates)
  std::uint64_t data_epoch = 0;
  double temperature = 0.0;
  bool sent = true;  // false: sampled, but the round was stopped before its group was sent
  // Set when every token was sampled with this one version (weights pulled
  // between rounds: token_versions then hold 0s); otherwise oldest/newest
  // come from Trajectory::token_versions.
  std::optional<std::uint64_t> version;
};

struct TranscriptTurn {
  std::string model;                       // the model's text of the turn
  std::vector<zorplex::ToolCall> tool_calls;  // the calls that ran
  std::string tool_result;                 // the injected result ("" if none)
};

std::vector<TranscriptTurn> transcript_turns(const Trajectory& trajectory);
std::string transcript_line(const TranscriptContext& context, const Trajectory& trajectory);

// The file a generator writes for --transcripts ARG: ARG itself, or
// ARG/transcripts-generator-K.jsonl when ARG is an existing folder or ends in '/'.
std::string transcripts_file(const std::string& arg, std::uint32_t generator);

class TranscriptWriter {
 public:
  // Creates the file or appends to it; an Error names the path and errno.
  static zorplex::Result<std::unique_ptr<TranscriptWriter>> open(const std::string& path);
  ~TranscriptWriter();
  TranscriptWriter(const TranscriptWriter&) = delete;
  TranscriptWriter& operator=(const TranscriptWriter&) = delete;

  void add(const std::string& line);  // buffered until flush()
  void flush();
  const std::string& path() const { return path_; }
  std::uint64_t lines_written() const { return lines_written_; }

 private:
  TranscriptWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
  std::string pending_;
  std::uint64_t pending_lines_ = 0;
  std::uint64_t lines_written_ = 0;
  bool failed_ = false;
};

}  // namespace rollout
