// zorplex/episode.h: one conversation's environment side: it takes each
// finished turn's text, runs the tool calls in it, and says what to append
// and whether the episode is over.
//
// Contract
// - An Episode borrows a Toolbox, which must outlive it. It is a mutable
//   object for one thread at a time (no internal locking); distinct episodes
//   may run concurrently over the same Toolbox.
// - add_turn(turn_text) follows the original loop: if the turn holds an
//   answer (contains_answer) or no parsable tool call, the text is appended
//   and the episode ends; its tool calls, if any, are neither run nor counted.
//   Otherwise every call is run, the text and result_injection() are
//   appended, and the episode ends after max_turns turns. The transcript is
//   the model text plus injected results, exactly as the model saw it;
//   injected_spans() says where the injected results lie in it, so that a
//   trainer can mask them out of the loss (the spec's second defect).
// - Calls after the episode ended change nothing and report it as over.
// - Nothing here fails: odd text is a turn without tool calls.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zorplex/protocol.h"
#include "zorplex/tools.h"

namespace zorplex {

enum class EpisodeEnd { kNotOver, kAnswered, kNoToolCall, kTurnLimit };
const char* episode_end_name(EpisodeEnd end);

class Episode {
 public:
  explicit Episode(const Toolbox& tools, int max_turns = kMaxTurns);

  struct TurnOutcome {
    EpisodeEnd end = EpisodeEnd::kNotOver;  // kNotOver: generate another turn
    std::vector<ExecutedCall> calls;        // the calls run in this turn
    std::string injection;                  // appended after the turn text ("" if none)
  };
  TurnOutcome add_turn(std::string_view turn_text);

  bool over() const { return end_ != EpisodeEnd::kNotOver; }
  EpisodeEnd end() const { return end_; }
  int turns() const { return turns_; }
  const std::string& transcript() const { return transcript_; }
  // Every call run so far, in order (what the reward counts).
  const std::vector<ExecutedCall>& calls() const { return calls_; }

  // A byte range of transcript().
  struct Span {
    std::size_t offset = 0;
    std::size_t length = 0;
  };
  // The injected result texts, in order; everything else is model text.
  const std::vector<Span>& injected_spans() const { return injected_; }

 private:
  const Toolbox* tools_;
  int max_turns_;
  int turns_ = 0;
  EpisodeEnd end_ = EpisodeEnd::kNotOver;
  std::string transcript_;
  std::vector<ExecutedCall> calls_;
  std::vector<Span> injected_;
};

}  // namespace zorplex
