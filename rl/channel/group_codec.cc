// channel/group_codec.cc: see group_codec.h.
#include "channel/group_codec.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "channel/bounded_reader.h"
#include "policy/tokenizer.h"

namespace channel {
namespace {

using nlohmann::json;
using Binary = json::binary_t;

Binary tokens_binary(const std::vector<policy::TokenId>& tokens) {
  Binary out;
  out.resize(tokens.size() * 2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<std::uint16_t>(tokens[i]);
    out[2 * i] = static_cast<std::uint8_t>(id & 0xff);
    out[2 * i + 1] = static_cast<std::uint8_t>(id >> 8);
  }
  return out;
}

Binary floats_binary(const std::vector<float>& values) {
  Binary out;
  out.resize(values.size() * 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &values[i], 4);
    for (int b = 0; b < 4; ++b)
      out[4 * i + static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(bits >> (8 * b));
  }
  return out;
}

json optional_int(const std::optional<std::int64_t>& value) {
  return value ? json(*value) : json(nullptr);
}

// Finds the enum value whose name is `name` among 0..count-1.
template <typename Enum>
std::optional<Enum> enum_named(const std::string& name, int count, const char* (*namer)(Enum)) {
  for (int i = 0; i < count; ++i) {
    if (name == namer(static_cast<Enum>(i))) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

struct Reader {
  const json& object;
  std::string where;
  std::string error;

  const json* field(const char* key, json::value_t type) {
    if (!error.empty()) return nullptr;
    auto it = object.find(key);
    if (it == object.end()) {
      error = where + ": missing \"" + key + "\"";
      return nullptr;
    }
    const bool ok = it->type() == type ||
                    (type == json::value_t::number_integer && it->type() == json::value_t::number_unsigned) ||
                    (type == json::value_t::number_float && it->is_number());
    if (!ok) {
      error = where + ": \"" + key + "\" has the wrong type (" + it->type_name() + ")";
      return nullptr;
    }
    return &*it;
  }
  std::uint64_t u64(const char* key) {
    const json* f = field(key, json::value_t::number_unsigned);
    return f != nullptr ? f->get<std::uint64_t>() : 0;
  }
  std::int64_t i64(const char* key) {
    const json* f = field(key, json::value_t::number_integer);
    return f != nullptr ? f->get<std::int64_t>() : 0;
  }
  double f64(const char* key) {
    const json* f = field(key, json::value_t::number_float);
    return f != nullptr ? f->get<double>() : 0.0;
  }
  bool boolean(const char* key) {
    const json* f = field(key, json::value_t::boolean);
    return f != nullptr && f->get<bool>();
  }
  std::string text(const char* key) {
    const json* f = field(key, json::value_t::string);
    return f != nullptr ? f->get<std::string>() : std::string();
  }
  const Binary* binary(const char* key) {
    const json* f = field(key, json::value_t::binary);
    return f != nullptr ? &f->get_binary() : nullptr;
  }
  std::optional<std::int64_t> optional_i64(const char* key) {
    if (!error.empty()) return std::nullopt;
    auto it = object.find(key);
    if (it != object.end() && it->is_null()) return std::nullopt;
    return i64(key);
  }
};

// The versions of the generated tokens as runs: [index, version] at the
// first generated token and wherever the version changes.
// The versions of the generated tokens as runs, packed as a binary of
// 12-byte entries (u32 token index, u64 version, little-endian): one at the
// first generated token and one wherever the version changes. Null when a
// generated token's version is unknown (0: sampled without in-flight
// updates): the receiver then gives every token the group's version_start.
json version_runs(const rollout::Trajectory& t) {
  if (t.token_versions.size() != t.generated.size()) return nullptr;
  Binary runs;
  bool first = true;
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < t.generated.size(); ++i) {
    if (t.generated[i] == 0) continue;
    if (t.token_versions[i] == 0) return nullptr;
    if (first || t.token_versions[i] != last) {
      for (int b = 0; b < 4; ++b) runs.push_back(static_cast<std::uint8_t>(i >> (8 * b)));
      for (int b = 0; b < 8; ++b) runs.push_back(static_cast<std::uint8_t>(t.token_versions[i] >> (8 * b)));
    }
    first = false;
    last = t.token_versions[i];
  }
  return runs;
}

constexpr std::size_t kRunBytes = 12;

std::uint64_t little_endian(const Binary& bytes, std::size_t at, int count) {
  std::uint64_t value = 0;
  for (int b = 0; b < count; ++b) value |= std::uint64_t{bytes[at + static_cast<std::size_t>(b)]} << (8 * b);
  return value;
}

// Sets every generated token's version from the runs (null: `fallback`, the
// group's version_start), each within fallback..newest.
zorplex::Result<bool> apply_version_runs(const Binary* runs, rollout::Trajectory& t, std::uint64_t fallback,
                                         std::uint64_t newest, const std::string& where) {
  t.token_versions.assign(t.tokens.size(), 0);
  if (runs != nullptr && runs->size() % kRunBytes != 0) {
    return zorplex::Error{where + ": token_versions is not a whole number of runs"};
  }
  const std::size_t count = runs != nullptr ? runs->size() / kRunBytes : 0;
  std::uint64_t version = fallback;
  std::size_t next_run = 0;
  std::uint64_t previous_index = 0;
  for (std::size_t run = 0; run < count; ++run) {
    const std::uint64_t index = little_endian(*runs, run * kRunBytes, 4);
    if (index >= t.tokens.size() || (run > 0 && index <= previous_index)) {
      return zorplex::Error{where + ": version runs out of order or past the tokens"};
    }
    if (t.generated[index] == 0)
      return zorplex::Error{where + ": a version run starts at a prompt or tool token"};
    previous_index = index;
  }
  for (std::size_t i = 0; i < t.tokens.size(); ++i) {
    if (next_run < count && little_endian(*runs, next_run * kRunBytes, 4) == i) {
      version = little_endian(*runs, next_run * kRunBytes + 4, 8);
      ++next_run;
    }
    if (t.generated[i] == 0) continue;
    if (version < fallback || version > newest) {
      return zorplex::Error{where + ": token " + std::to_string(i) + " has version " +
                            std::to_string(version) + ", outside the group's " + std::to_string(fallback) +
                            ".." + std::to_string(newest)};
    }
    t.token_versions[i] = version;
  }
  return true;
}

json encode_trajectory(const rollout::Trajectory& t) {
  return json{
      {"token_versions", version_runs(t)},
      {"tokens", tokens_binary(t.tokens)},
      {"generated", Binary(std::vector<std::uint8_t>(t.generated.begin(), t.generated.end()))},
      {"log_probs", floats_binary(t.log_probs)},
      {"prompt_tokens", t.prompt_tokens},
      {"kind", zorplex::kind_name(t.task.kind)},
      {"difficulty", zorplex::difficulty_name(t.task.difficulty)},
      {"question", t.task.question},
      {"answer", optional_int(t.task.answer)},
      {"reward", t.score.reward},
      {"correct", t.score.correct},
      {"has_answer_tag", t.score.has_answer_tag},
      {"extraction_rule", zorplex::extraction_rule_name(t.score.extraction.rule)},
      {"extracted", t.score.extraction.answer ? json(t.score.extraction.answer->decimal) : json(nullptr)},
      {"failure_mode", zorplex::failure_mode_name(t.score.failure_mode)},
      {"tool_calls", t.score.tool_calls},
      {"turns", t.turns},
      {"end", zorplex::episode_end_name(t.end)},
      {"truncated", t.truncated}};
}

zorplex::Result<rollout::Trajectory> decode_trajectory(const json& j, const std::string& where) {
  if (!j.is_object()) return zorplex::Error{where + " is not a map"};
  Reader r{j, where, ""};
  rollout::Trajectory t;
  const Binary* tokens = r.binary("tokens");
  const Binary* generated = r.binary("generated");
  const Binary* log_probs = r.binary("log_probs");
  const std::uint64_t prompt_tokens = r.u64("prompt_tokens");
  const std::string kind = r.text("kind");
  const std::string difficulty = r.text("difficulty");
  t.task.question = r.text("question");
  t.task.answer = r.optional_i64("answer");
  t.score.reward = r.f64("reward");
  t.score.correct = r.boolean("correct");
  t.score.has_answer_tag = r.boolean("has_answer_tag");
  const std::string rule = r.text("extraction_rule");
  std::optional<std::string> extracted;
  if (r.error.empty() && !j.contains("extracted")) r.error = where + ": missing \"extracted\"";
  if (r.error.empty() && !j.at("extracted").is_null()) extracted = r.text("extracted");
  const std::string failure = r.text("failure_mode");
  t.score.tool_calls = static_cast<int>(r.i64("tool_calls"));
  t.turns = static_cast<int>(r.i64("turns"));
  const std::string end = r.text("end");
  t.truncated = r.boolean("truncated");
  if (!r.error.empty()) return zorplex::Error{r.error};

  const std::size_t n = tokens->size() / 2;
  if (tokens->size() % 2 != 0 || log_probs->size() % 4 != 0 || generated->size() != n ||
      log_probs->size() / 4 != n) {
    return zorplex::Error{where + ": tokens, mask and log-probs differ in length"};
  }
  if (n < 2 || n > kMaxTokens)
    return zorplex::Error{where + ": " + std::to_string(n) + " tokens (2.." + std::to_string(kMaxTokens) +
                          " allowed)"};
  if (prompt_tokens >= n)
    return zorplex::Error{where + ": prompt_tokens " + std::to_string(prompt_tokens) +
                          " is not below the token count"};
  if (!std::isfinite(t.score.reward)) return zorplex::Error{where + ": reward is not finite"};
  if (t.score.tool_calls < 0 || t.turns < 0) return zorplex::Error{where + ": negative tool_calls or turns"};
  t.tokens.resize(n);
  t.generated.resize(n);
  t.log_probs.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t id = static_cast<std::uint16_t>((*tokens)[2 * i] | ((*tokens)[2 * i + 1] << 8));
    if (id >= policy::kVocabSize)
      return zorplex::Error{where + ": token id " + std::to_string(id) + " outside the vocabulary"};
    t.tokens[i] = id;
    const std::uint8_t g = (*generated)[i];
    if (g > 1) return zorplex::Error{where + ": loss mask byte " + std::to_string(g) + " is not 0 or 1"};
    t.generated[i] = g;
    std::uint32_t bits = 0;
    for (int b = 0; b < 4; ++b)
      bits |= static_cast<std::uint32_t>((*log_probs)[4 * i + static_cast<std::size_t>(b)]) << (8 * b);
    float value = 0.0f;
    std::memcpy(&value, &bits, 4);
    if (g == 1 && !(std::isfinite(value) && value <= 0.0f)) {
      return zorplex::Error{where + ": log-prob of token " + std::to_string(i) +
                            " is not a finite number <= 0"};
    }
    t.log_probs[i] = value;
  }
  t.prompt_tokens = static_cast<std::size_t>(prompt_tokens);
  auto parsed_kind = zorplex::parse_kind(kind);
  auto parsed_difficulty = zorplex::parse_difficulty(difficulty);
  if (!parsed_kind) return zorplex::Error{where + ": " + parsed_kind.error().message};
  if (!parsed_difficulty) return zorplex::Error{where + ": " + parsed_difficulty.error().message};
  t.task.kind = parsed_kind.value();
  t.task.difficulty = parsed_difficulty.value();
  const auto parsed_rule = enum_named<zorplex::ExtractionRule>(rule, 9, zorplex::extraction_rule_name);
  const auto parsed_failure = enum_named<zorplex::FailureMode>(failure, 4, zorplex::failure_mode_name);
  const auto parsed_end = enum_named<zorplex::EpisodeEnd>(end, 4, zorplex::episode_end_name);
  if (!parsed_rule || !parsed_failure || !parsed_end) {
    return zorplex::Error{where + ": unknown extraction_rule, failure_mode or end name"};
  }
  t.score.extraction.rule = *parsed_rule;
  if (extracted) {
    const std::string& decimal = *extracted;
    const bool negative = !decimal.empty() && decimal[0] == '-';
    const std::string digits = decimal.substr(negative ? 1 : 0);
    if (digits.empty() || digits.size() > 64 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return zorplex::Error{where + ": extracted \"" + decimal.substr(0, 70) + "\" is not an integer"};
    }
    t.score.extraction.answer = zorplex::make_text_integer(negative, digits);
  }
  if ((t.score.extraction.rule == zorplex::ExtractionRule::kNone) != !extracted) {
    return zorplex::Error{where + ": extracted must be nil exactly when extraction_rule is none"};
  }
  t.score.failure_mode = *parsed_failure;
  t.end = *parsed_end;
  t.transcript = policy::decode(std::vector<policy::TokenId>(
      t.tokens.begin() + static_cast<std::ptrdiff_t>(t.prompt_tokens), t.tokens.end()));
  return t;
}

}  // namespace

std::string encode_group(const algorithms::TrajectoryGroup& group) {
  json trajectories = json::array();
  for (const rollout::Trajectory& t : group.trajectories) trajectories.push_back(encode_trajectory(t));
  const json j{{"schema", kGroupSchema},
               {"generator", group.generator},
               {"sequence", group.sequence},
               {"version_start", group.version_start},
               {"version_end", group.version_end},
               {"task_seed", group.task_seed},
               {"task_index", group.task_index},
               {"generation_seconds", group.generation_seconds},
               {"pull_seconds", group.pull_seconds},
               {"pull_bytes", group.pull_bytes},
               {"temperature", group.temperature},
               {"top_p", group.top_p},
               {"filtered_groups", group.filtered_groups},
               {"filtered_trajectories", group.filtered_trajectories},
               {"round_groups", group.round_groups},
               {"trajectories", trajectories}};
  const std::vector<std::uint8_t> bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

zorplex::Result<algorithms::TrajectoryGroup> decode_group(std::string_view bytes) {
  json j;
  BoundedReader reader(j);
  const bool parsed = json::sax_parse(bytes.begin(), bytes.end(), &reader, json::input_format_t::msgpack);
  if (!parsed || !reader.error().empty()) {
    return zorplex::Error{"trajectory group: " +
                          (reader.error().empty() ? std::string("not valid MessagePack") : reader.error())};
  }
  if (!j.is_object()) return zorplex::Error{"trajectory group: not a map"};
  Reader r{j, "trajectory group", ""};
  const std::string schema = r.text("schema");
  if (r.error.empty() && schema != kGroupSchema) {
    return zorplex::Error{"trajectory group: schema \"" + schema + "\", expected \"" + kGroupSchema +
                          "\" (generator and trainer from different builds?)"};
  }
  algorithms::TrajectoryGroup group;
  group.generator = static_cast<std::uint32_t>(r.u64("generator"));
  group.sequence = r.u64("sequence");
  group.version_start = r.u64("version_start");
  group.version_end = r.u64("version_end");
  group.task_seed = r.u64("task_seed");
  group.task_index = r.u64("task_index");
  group.generation_seconds = r.f64("generation_seconds");
  group.pull_seconds = r.f64("pull_seconds");
  group.pull_bytes = r.u64("pull_bytes");
  group.temperature = r.f64("temperature");
  group.top_p = r.f64("top_p");
  group.filtered_groups = r.u64("filtered_groups");
  group.filtered_trajectories = r.u64("filtered_trajectories");
  const std::uint64_t round_groups = r.u64("round_groups");
  const json* trajectories = r.field("trajectories", json::value_t::array);
  if (!r.error.empty()) return zorplex::Error{r.error};
  if (group.version_end < group.version_start)
    return zorplex::Error{"trajectory group: version_end < version_start"};
  if (!(std::isfinite(group.temperature) && group.temperature >= 0.0) ||
      !(std::isfinite(group.top_p) && group.top_p > 0.0 && group.top_p <= 1.0)) {
    return zorplex::Error{"trajectory group: temperature must be finite and >= 0, and top_p in (0, 1]"};
  }
  // Bounded, so the trainer's sums never overflow whatever a generator sends.
  if (group.filtered_groups > kMaxFilteredGroups ||
      group.filtered_trajectories < group.filtered_groups ||
      group.filtered_trajectories > group.filtered_groups * kMaxTrajectories) {
    return zorplex::Error{"trajectory group: filtered_groups " + std::to_string(group.filtered_groups) +
                          " and filtered_trajectories " + std::to_string(group.filtered_trajectories) +
                          " are out of range (0.." + std::to_string(kMaxFilteredGroups) +
                          " groups of 1.." + std::to_string(kMaxTrajectories) + " trajectories each)"};
  }
  if (round_groups == 0 || round_groups > kMaxRoundGroups) {
    return zorplex::Error{"trajectory group: round_groups " + std::to_string(round_groups) + " (1.." +
                          std::to_string(kMaxRoundGroups) + " allowed)"};
  }
  group.round_groups = static_cast<std::uint32_t>(round_groups);
  if (trajectories->empty() || trajectories->size() > kMaxTrajectories) {
    return zorplex::Error{"trajectory group: " + std::to_string(trajectories->size()) + " trajectories (1.." +
                          std::to_string(kMaxTrajectories) + " allowed)"};
  }
  for (std::size_t i = 0; i < trajectories->size(); ++i) {
    const std::string where = "trajectory " + std::to_string(i);
    auto t = decode_trajectory((*trajectories)[i], where);
    if (!t) return zorplex::Error{"trajectory group: " + t.error().message};
    const json& item = (*trajectories)[i];
    const auto runs = item.find("token_versions");
    const bool given = runs != item.end() && !runs->is_null();
    if (given && !runs->is_binary()) {
      return zorplex::Error{"trajectory group: " + where + ": token_versions is not a binary"};
    }
    auto applied = apply_version_runs(given ? &runs->get_binary() : nullptr, t.value(), group.version_start,
                                      group.version_end, where);
    if (!applied) return zorplex::Error{"trajectory group: " + applied.error().message};
    group.trajectories.push_back(std::move(t).value());
  }
  return group;
}

}  // namespace channel
