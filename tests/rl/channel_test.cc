// The trajectory group's wire form: a round trip keeps every field the
// trainer uses; every malformed input (wrong schema, truncation at every
// length, random mutations, each out-of-range field) is an Error, never a
// crash. The channel over real ZeroMQ sockets on 127.0.0.1: order, the
// handshake's refusals, garbage, backpressure, bind errors. The attacks of
// issue 30 are in channel_attack_test.cc.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "channel/group_channel.h"
#include "channel/group_codec.h"
#include "rollout/demonstrations.h"

using algorithms::TrajectoryGroup;
using nlohmann::json;

namespace {

TrajectoryGroup sample_group() {
  rollout::DemonstrationOptions options;
  options.imperfect_fraction = 0.5;
  options.seed = 3;
  const rollout::DemonstrationStream stream(options);
  TrajectoryGroup group;
  for (std::uint64_t i = 0; i < 4; ++i) {
    rollout::Trajectory t = stream.at(i);
    for (std::size_t k = 0; k < t.log_probs.size(); ++k) {
      if (t.generated[k]) t.log_probs[k] = -0.001f * static_cast<float>(k % 97) - 1e-7f;
    }
    group.trajectories.push_back(std::move(t));
  }
  group.version_start = 7;
  group.version_end = 9;
  group.generator = 2;
  group.sequence = 41;
  group.task_seed = 100000;
  group.task_index = 12;
  group.generation_seconds = 0.25;
  group.pull_seconds = 0.125;
  group.pull_bytes = 3569152;
  group.temperature = 0.7;
  group.top_p = 0.95;
  group.filtered_groups = 3;
  group.filtered_trajectories = 24;
  group.round_groups = 4;
  return group;
}

json as_json(const std::string& bytes) {
  return json::from_msgpack(bytes);
}

std::string as_bytes(const json& j) {
  const auto v = json::to_msgpack(j);
  return std::string(v.begin(), v.end());
}

std::string error_of(const json& j) {
  auto decoded = channel::decode_group(as_bytes(j));
  REQUIRE_FALSE(decoded.ok());
  return decoded.error().message;
}

}  // namespace

TEST_CASE("group codec: a round trip keeps every field the trainer uses", "[rl][channel]") {
  const TrajectoryGroup group = sample_group();
  const std::string bytes = channel::encode_group(group);
  auto decoded = channel::decode_group(bytes);
  REQUIRE(decoded.ok());
  const TrajectoryGroup& g = decoded.value();
  CHECK(g.version_start == 7);
  CHECK(g.version_end == 9);
  CHECK(g.generator == 2);
  CHECK(g.sequence == 41);
  CHECK(g.task_seed == 100000);
  CHECK(g.task_index == 12);
  CHECK(g.generation_seconds == 0.25);
  CHECK(g.pull_seconds == 0.125);
  CHECK(g.pull_bytes == 3569152);
  CHECK(g.temperature == 0.7);  // exactly: the trainer compares it with its own
  CHECK(g.top_p == 0.95);
  CHECK(g.filtered_groups == 3);  // the generator's dynamic filter
  CHECK(g.filtered_trajectories == 24);
  CHECK(g.round_groups == 4);
  REQUIRE(g.trajectories.size() == group.trajectories.size());
  for (std::size_t i = 0; i < g.trajectories.size(); ++i) {
    const rollout::Trajectory& a = group.trajectories[i];
    const rollout::Trajectory& b = g.trajectories[i];
    CHECK(b.tokens == a.tokens);
    CHECK(b.generated == a.generated);
    CHECK(b.log_probs == a.log_probs);  // float32 bits survive
    CHECK(b.prompt_tokens == a.prompt_tokens);
    CHECK(b.transcript == a.transcript);
    CHECK(b.task.question == a.task.question);
    CHECK(b.task.answer == a.task.answer);
    CHECK(b.task.kind == a.task.kind);
    CHECK(b.score.reward == a.score.reward);
    CHECK(b.score.correct == a.score.correct);
    CHECK(b.score.has_answer_tag == a.score.has_answer_tag);
    CHECK(b.score.extraction.rule == a.score.extraction.rule);
    CHECK(b.score.extraction.answer.has_value() == a.score.extraction.answer.has_value());
    if (a.score.extraction.answer)
      CHECK(b.score.extraction.answer->value == a.score.extraction.answer->value);
    CHECK(b.score.failure_mode == a.score.failure_mode);
    CHECK(b.score.tool_calls == a.score.tool_calls);
    CHECK(b.turns == a.turns);
    CHECK(b.end == a.end);
    CHECK(b.truncated == a.truncated);
  }
  // Compact: tokens 2 bytes, mask 1, log-prob 4, plus the fields.
  std::size_t tokens = 0;
  for (const auto& t : group.trajectories) tokens += t.tokens.size();
  CHECK(bytes.size() < tokens * 7 + 2000);
}

TEST_CASE("group codec: a different schema or shape is refused with the reason", "[rl][channel]") {
  const json good = as_json(channel::encode_group(sample_group()));
  json j = good;
  j["schema"] = "weightsync-trajectories/2";  // from before groups carried what the generator filtered
  CHECK(error_of(j).find("expected \"weightsync-trajectories/3\"") != std::string::npos);
  j = good;
  j.erase("temperature");
  CHECK(error_of(j).find("missing \"temperature\"") != std::string::npos);
  for (double bad : {-0.5, std::nan(""), HUGE_VAL}) {
    j = good;
    j["temperature"] = bad;
    CHECK(error_of(j).find("temperature must be finite") != std::string::npos);
  }
  for (double bad : {0.0, 1.5}) {
    j = good;
    j["top_p"] = bad;
    CHECK(error_of(j).find("top_p in (0, 1]") != std::string::npos);
  }
  j = good;
  j.erase("version_start");
  CHECK(error_of(j).find("missing \"version_start\"") != std::string::npos);
  j = good;
  j["sequence"] = "seven";
  CHECK(error_of(j).find("\"sequence\" has the wrong type") != std::string::npos);
  j = good;
  j["version_end"] = 3;  // before version_start 7
  CHECK(error_of(j).find("version_end < version_start") != std::string::npos);
  j = good;
  j["trajectories"] = json::array();
  CHECK(error_of(j).find("0 trajectories") != std::string::npos);
  CHECK_FALSE(channel::decode_group(as_bytes(json::array({1, 2}))).ok());
}

TEST_CASE("group codec: the dynamic filter's counts are bounded: absurd ones are refused, not summed",
          "[rl][channel]") {
  const json good = as_json(channel::encode_group(sample_group()));
  auto with = [&](const char* key, const json& value) {
    json j = good;
    j[key] = value;
    return error_of(j);
  };
  for (const char* key : {"filtered_groups", "filtered_trajectories", "round_groups"}) {
    json j = good;
    j.erase(key);
    CHECK(error_of(j).find(std::string("missing \"") + key + "\"") != std::string::npos);
    CHECK(with(key, -1).find("has the wrong type") != std::string::npos);
  }
  // A hostile generator's counts that would overflow the trainer's sums.
  CHECK(with("filtered_groups", std::uint64_t{1} << 63).find("out of range") != std::string::npos);
  CHECK(with("filtered_groups", channel::kMaxFilteredGroups + 1).find("out of range") != std::string::npos);
  for (std::uint64_t groups : {channel::kMaxFilteredGroups + 1, std::uint64_t{1} << 54, std::uint64_t{1} << 63}) {
    json j = good;  // one trajectory per group: only the bound on groups stands in the way
    j["filtered_groups"] = groups;
    j["filtered_trajectories"] = groups;
    CHECK(error_of(j).find("out of range") != std::string::npos);
  }
  CHECK(with("filtered_trajectories", ~std::uint64_t{0}).find("out of range") != std::string::npos);
  // More trajectories than groups can hold, or fewer than one per group.
  CHECK(with("filtered_trajectories", 3 * channel::kMaxTrajectories + 1).find("out of range") !=
        std::string::npos);
  CHECK(with("filtered_trajectories", 2).find("out of range") != std::string::npos);
  json none = good;
  none["filtered_groups"] = 0;
  none["filtered_trajectories"] = 1;
  CHECK(error_of(none).find("out of range") != std::string::npos);
  CHECK(with("round_groups", 0).find("round_groups 0") != std::string::npos);
  CHECK(with("round_groups", channel::kMaxRoundGroups + 1).find("allowed") != std::string::npos);
  // The largest counts allowed pass.
  json largest = good;
  largest["filtered_groups"] = channel::kMaxFilteredGroups;
  largest["filtered_trajectories"] = channel::kMaxFilteredGroups * channel::kMaxTrajectories;
  largest["round_groups"] = channel::kMaxRoundGroups;
  auto decoded = channel::decode_group(as_bytes(largest));
  INFO((decoded.ok() ? std::string() : decoded.error().message));
  REQUIRE(decoded.ok());
  CHECK(decoded.value().filtered_trajectories == channel::kMaxFilteredGroups * channel::kMaxTrajectories);
}

TEST_CASE("group codec: out-of-range trajectory fields are refused", "[rl][channel]") {
  const json good = as_json(channel::encode_group(sample_group()));
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j["trajectories"][1]);
    return error_of(j);
  };
  CHECK(with([](json& t) {
          t["tokens"].get_binary()[0] = 0x10, t["tokens"].get_binary()[1] = 0x01;
        }).find("outside the vocabulary") != std::string::npos);  // id 272
  CHECK(with([](json& t) { t["generated"].get_binary()[3] = 2; }).find("not 0 or 1") != std::string::npos);
  CHECK(with([](json& t) { t["generated"].get_binary().pop_back(); }).find("differ in length") !=
        std::string::npos);
  CHECK(with([](json& t) { t["prompt_tokens"] = 100000; }).find("prompt_tokens") != std::string::npos);
  CHECK(with([](json& t) { t["failure_mode"] = "lucky"; }).find("unknown") != std::string::npos);
  CHECK(with([](json& t) { t["kind"] = "cooking"; }).find("cooking") != std::string::npos);
  CHECK(with([](json& t) { t["extracted"] = "12a"; }).find("not an integer") != std::string::npos);
  CHECK(with([](json& t) { t["reward"] = std::nan(""); }).find("not finite") != std::string::npos);
  // A positive log-prob on a generated token.
  CHECK(with([](json& t) {
          auto& mask = t["generated"].get_binary();
          std::size_t k = 0;
          while (mask[k] == 0) ++k;
          auto& lp = t["log_probs"].get_binary();
          const float one = 1.0f;
          std::memcpy(&lp[4 * k], &one, 4);
        }).find("not a finite number <= 0") != std::string::npos);
  CHECK(with([](json& t) {
          t["tokens"] = json::binary_t(std::vector<std::uint8_t>{1, 0});
        }).find("differ in length") != std::string::npos);
}

TEST_CASE("group codec: the version of every token, as sampled with in-flight updates", "[rl][channel]") {
  TrajectoryGroup group = sample_group();
  // Trajectory 0 was sampled across an install: its first generated tokens on
  // version 7, the rest on 8; trajectory 1 entirely on 9; the others unknown.
  for (std::size_t t = 0; t < 2; ++t) {
    rollout::Trajectory& traj = group.trajectories[t];
    traj.token_versions.assign(traj.tokens.size(), 0);
    std::size_t seen = 0;
    for (std::size_t k = 0; k < traj.tokens.size(); ++k) {
      if (!traj.generated[k]) continue;
      traj.token_versions[k] = t == 1 ? 9 : (seen++ < 5 ? 7 : 8);
    }
  }
  auto decoded = channel::decode_group(channel::encode_group(group));
  INFO((decoded.ok() ? std::string() : decoded.error().message));
  REQUIRE(decoded.ok());
  const auto& got = decoded.value().trajectories;
  CHECK(got[0].token_versions == group.trajectories[0].token_versions);
  CHECK(got[1].token_versions == group.trajectories[1].token_versions);
  CHECK(got[0].oldest_version() == 7);
  CHECK(got[0].newest_version() == 8);
  // Unknown versions arrive as the group's version_start.
  CHECK(got[2].oldest_version() == 7);
  CHECK(got[2].newest_version() == 7);

  const json good = as_json(channel::encode_group(group));
  REQUIRE(good["trajectories"][0]["token_versions"].get_binary().size() == 2 * 12);  // two runs
  CHECK(good["trajectories"][2]["token_versions"].is_null());
  auto with = [&](const std::function<void(json::binary_t&)>& edit) {
    json j = good;
    edit(j["trajectories"][0]["token_versions"].get_binary());
    return error_of(j);
  };
  auto set = [](json::binary_t& runs, std::size_t at, std::uint64_t value, int bytes) {
    for (int b = 0; b < bytes; ++b)
      runs[at + static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(value >> (8 * b));
  };
  CHECK(with([&](json::binary_t& runs) { set(runs, 12 + 4, 10, 8); }).find("outside the group's 7..9") !=
        std::string::npos);
  CHECK(with([&](json::binary_t& runs) { set(runs, 4, 6, 8); }).find("outside the group's 7..9") !=
        std::string::npos);
  CHECK(with([&](json::binary_t& runs) {
          std::swap_ranges(runs.begin(), runs.begin() + 12, runs.begin() + 12);
        }).find("out of order") != std::string::npos);
  CHECK(with([&](json::binary_t& runs) { set(runs, 0, 0, 4); }).find("prompt or tool token") !=
        std::string::npos);
  CHECK(with([&](json::binary_t& runs) { set(runs, 12, 1u << 30, 4); }).find("past the tokens") !=
        std::string::npos);
  CHECK(with([](json::binary_t& runs) { runs.pop_back(); }).find("whole number of runs") !=
        std::string::npos);
  json j = good;
  j["trajectories"][0]["token_versions"] = 5;
  CHECK(error_of(j).find("not a binary") != std::string::npos);
}

TEST_CASE("group codec: truncation at every length and random mutations never crash", "[rl][channel]") {
  const std::string bytes = channel::encode_group(sample_group());
  for (std::size_t n = 0; n < bytes.size(); n += (n < 512 ? 1 : 37)) {
    CHECK_FALSE(channel::decode_group(std::string_view(bytes.data(), n)).ok());
  }
  std::mt19937_64 rng(7);
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) mutated[rng() % mutated.size()] = static_cast<char>(rng() & 0xff);
    auto decoded = channel::decode_group(mutated);
    if (decoded.ok()) {
      ++accepted;  // a flip inside a question or a log-prob can still be valid; then it must be consistent
      for (const auto& t : decoded.value().trajectories) {
        CHECK(t.tokens.size() == t.generated.size());
        CHECK(t.prompt_tokens < t.tokens.size());
      }
    }
  }
  CHECK(accepted < 3000);
}

namespace {

std::unique_ptr<channel::GroupReceiver> bind_receiver(const channel::ChannelOptions& options) {
  auto receiver = channel::GroupReceiver::bind("tcp://127.0.0.1:*", options);
  REQUIRE(receiver.ok());
  return std::move(receiver).value();
}

std::unique_ptr<channel::GroupSender> connect_sender(const std::string& endpoint,
                                                     const channel::ChannelOptions& options) {
  auto sender = channel::GroupSender::connect(endpoint, options);
  REQUIRE(sender.ok());
  return std::move(sender).value();
}

// Waits up to 5 s for one message.
zorplex::Result<TrajectoryGroup> receive_one(channel::GroupReceiver& receiver) {
  auto got = receiver.receive(std::chrono::seconds(5));
  REQUIRE(got.has_value());
  return *got;
}

}  // namespace

TEST_CASE("group channel: groups arrive in order over real ZeroMQ sockets, authenticated", "[rl][channel]") {
  channel::ChannelOptions options;
  options.secret = "s3cret";
  auto receiver = bind_receiver(options);
  CHECK(receiver->endpoint().rfind("tcp://127.0.0.1:", 0) == 0);
  auto sender = connect_sender(receiver->endpoint(), options);
  TrajectoryGroup group = sample_group();
  for (std::uint64_t i = 0; i < 3; ++i) {
    group.sequence = i;
    auto sent = sender->send(group);
    REQUIRE(sent.ok());
    CHECK(sent.value());
  }
  for (std::uint64_t i = 0; i < 3; ++i) {
    auto got = receive_one(*receiver);
    REQUIRE(got.ok());
    CHECK(got.value().sequence == i);
    CHECK(got.value().trajectories.size() == 4);
    CHECK(got.value().trajectories[2].tokens == group.trajectories[2].tokens);
  }
  CHECK(receiver->counters().received == 3);
  CHECK_FALSE(receiver->receive(std::chrono::milliseconds(50)).has_value());
}

// Calls receive() for up to 5 s until `count` connections were refused and
// reported; the groups accepted meanwhile. `reports` gets the reports.
int until_refused(channel::GroupReceiver& receiver, std::uint64_t count, std::string& reports) {
  int accepted = 0;
  for (int i = 0; i < 100; ++i) {
    if (receiver.counters().rejected_connections >= count && !reports.empty()) break;
    auto got = receiver.receive(std::chrono::milliseconds(50));
    if (got && got->ok()) ++accepted;
    if (got && !got->ok()) reports += got->error().message + "\n";
  }
  return accepted;
}

TEST_CASE(
    "group channel: a wrong or missing secret is refused at the handshake, garbage is rejected, and good "
    "messages still flow",
    "[rl][channel]") {
  channel::ChannelOptions options;
  options.secret = "right";
  auto receiver = bind_receiver(options);
  channel::ChannelOptions wrong = options;
  wrong.secret = "wrong";
  auto impostor = connect_sender(receiver->endpoint(), wrong);
  REQUIRE(impostor->send(sample_group()).ok());
  std::string reports;
  CHECK(until_refused(*receiver, 1, reports) == 0);
  CHECK(receiver->counters().rejected_connections >= 1);
  // The refusal is reported as an Error naming the cause.
  CHECK(reports.rfind("trajectory channel: refused ", 0) == 0);
  CHECK(reports.find("wrong secret") != std::string::npos);

  channel::ChannelOptions none;  // NULL against CURVE: fails before ZAP, counted all the same
  auto unsigned_sender = connect_sender(receiver->endpoint(), none);
  REQUIRE(unsigned_sender->send(sample_group()).ok());
  reports.clear();
  CHECK(until_refused(*receiver, 2, reports) == 0);
  CHECK(receiver->counters().rejected_connections >= 2);
  CHECK(reports.find("refused") != std::string::npos);

  // Garbage from an authenticated sender: without the header, then with it.
  auto honest = connect_sender(receiver->endpoint(), options);
  REQUIRE(honest->send_raw("\x93\x01\x02").ok());
  auto drain_refusals = [&] {
    for (int i = 0; i < 10; ++i) {
      auto got = receive_one(*receiver);
      if (got.ok() || got.error().message.find("connection(s)") == std::string::npos) return got;
    }
    return zorplex::Result<TrajectoryGroup>(zorplex::Error{"only refusals"});
  };
  auto headless = drain_refusals();
  REQUIRE_FALSE(headless.ok());
  CHECK(headless.error().message.find("WSTG/1 header") != std::string::npos);
  REQUIRE(honest->send_raw(channel::frame_message(honest->session(), 100, "\x93\x01\x02")).ok());
  auto malformed = drain_refusals();
  REQUIRE_FALSE(malformed.ok());
  CHECK(malformed.error().message.find("trajectory group") != std::string::npos);

  auto last_sent = honest->send(sample_group());
  REQUIRE(last_sent.ok());
  CHECK(last_sent.value());
  CHECK(drain_refusals().ok());
  CHECK(receiver->counters().rejected_malformed == 2);
  CHECK(receiver->counters().received == 1);
}

TEST_CASE("group channel: a receiver that does not read makes send() time out, and it recovers",
          "[rl][channel]") {
  channel::ChannelOptions options;
  options.high_water_mark = 1;
  options.send_timeout = std::chrono::milliseconds(100);
  auto receiver = bind_receiver(options);
  auto sender = connect_sender(receiver->endpoint(), options);
  // A large group (about 1 MB) fills the socket buffers quickly.
  TrajectoryGroup big = sample_group();
  while (big.trajectories.size() < 256)
    big.trajectories.push_back(big.trajectories[big.trajectories.size() % 4]);
  int sent = 0;
  bool blocked = false;
  for (int i = 0; i < 200 && !blocked; ++i) {
    auto result = sender->send(big);
    REQUIRE(result.ok());
    if (result.value()) {
      ++sent;
    } else {
      blocked = true;
    }
  }
  INFO("sent " << sent << " groups before the queue was full");
  CHECK(blocked);
  CHECK(sent < 200);
  // Drain everything that was queued: nothing was lost, and sending works again.
  int received = 0;
  while (auto got = receiver->receive(std::chrono::milliseconds(500))) {
    REQUIRE(got->ok());
    ++received;
  }
  CHECK(received == sent);
  auto again = sender->send(sample_group());
  REQUIRE(again.ok());
  CHECK(again.value());
  CHECK(receiver->receive(std::chrono::seconds(5)).has_value());
}

TEST_CASE("group channel: a bad endpoint or a port in use is a clear error", "[rl][channel]") {
  auto bad = channel::GroupReceiver::bind("nonsense://here", {});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("cannot bind nonsense://here") != std::string::npos);
  auto first = bind_receiver({});
  auto second = channel::GroupReceiver::bind(first->endpoint(), {});
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().message.find("another trainer") != std::string::npos);
}
