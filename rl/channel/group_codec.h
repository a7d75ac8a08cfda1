// channel/group_codec.h: the wire form of a trajectory group, sent from a
// generator to the trainer (MessagePack, through nlohmann::json's encoder;
// docs/rl_protocol.md). Never pickle, never raw structs.
//
// Contract
// - encode_group() writes one MessagePack map: "schema" =
//   "weightsync-trajectories/3", the group's fields (generator, sequence,
//   version_start, version_end, task_seed, task_index, generation_seconds,
//   pull_seconds, pull_bytes, the sampling parameters temperature and
//   top_p, which the behaviour log-probs depend on, and the generator's
//   dynamic filter: filtered_groups, filtered_trajectories, round_groups)
//   and "trajectories": an array of maps, each with the token ids (binary,
//   uint16 little endian), the loss mask (binary, one byte per token, 0/1),
//   the behaviour log-probs (binary, float32 little endian), prompt_tokens,
//   the task (kind, difficulty, question, answer or nil) and the outcome
//   (reward, correct, has_answer_tag, extraction_rule, extracted (the
//   integer as written, a decimal string) or nil,
//   failure_mode, tool_calls, turns, end, truncated).
// - decode_group() reads the MessagePack with limits applied while it reads
//   (nlohmann's SAX interface, never json::from_msgpack): the top value is a
//   map of at most 32 entries; the only container it may hold is an array of
//   at most kMaxTrajectories entries, whose only containers are maps of at
//   most 32 entries holding no container (depth <= 3); keys <= 64 bytes,
//   strings <= 4 KiB, binaries <= 4 * kMaxTokens bytes, <= 33,825 values in
//   all. Whatever breaks a limit stops the reader at that point, so memory is
//   bounded by the input's size (a string or binary is read whole before its
//   size is judged: at most twice the input while it grows) plus about 100
//   bytes per value, and the stack by the depth. It then accepts exactly that
//   schema and checks everything before building a group: the schema string,
//   every field's type, enum names, the three per-token arrays of one length,
//   2 <= tokens <= kMaxTokens, token ids < policy::kVocabSize, mask bytes
//   0/1, finite log-probs <= 0 where the mask is 1, prompt_tokens < tokens,
//   at most kMaxTrajectories per group, a finite temperature >= 0 and 0 <
//   top_p <= 1, filtered_groups <= kMaxFilteredGroups with filtered_groups <=
//   filtered_trajectories <= filtered_groups * kMaxTrajectories, and 1 <=
//   round_groups <= kMaxRoundGroups. Anything else is an Error saying what is wrong; it never
//   crashes (the decoder is fed garbage and mutations in the tests). The
//   transcript is rebuilt from the tokens after the prompt; the task's words
//   are not sent.
// - Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "algorithms/replay_buffer.h"
#include "zorplex/result.h"

namespace channel {

inline constexpr const char* kGroupSchema = "weightsync-trajectories/3";
inline constexpr std::size_t kMaxTokens = 1u << 16;
inline constexpr std::size_t kMaxTrajectories = 1024;
// Zero-variance groups one group may say were filtered before it (a round
// samples at most 256 prompts x an over-sampling cap of 64 = 16,384), and the
// groups one round may send.
inline constexpr std::uint64_t kMaxFilteredGroups = 1u << 16;
inline constexpr std::uint64_t kMaxRoundGroups = 1u << 16;

std::string encode_group(const algorithms::TrajectoryGroup& group);
zorplex::Result<algorithms::TrajectoryGroup> decode_group(std::string_view bytes);

}  // namespace channel
