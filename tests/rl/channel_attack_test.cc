// Attacks on the generator -> trainer trajectory channel (issue 30, findings
// 2, 5 and 6), each over real sockets on 127.0.0.1 with the attacker in its
// own process (ws_channel_attacker, a raw ZeroMQ PUSH socket) where memory or
// identity matters.
//
// Bounds these cases hold the receiver to:
// - endless MORE frames from a peer without the secret: the receiver's RSS
//   grows by less than 48 MiB while 192 MiB are offered (12 x 16 MiB);
// - a decoded payload: 1 MB of nested arrays decodes to an Error (no crash),
//   and 8 MiB of nils raise the decoder's peak RSS by less than 16 MiB;
// - an authenticated peer's multipart message is refused (counted), and a
//   frame over max_message_bytes (1 MiB here) is never read (bytes < 1 MiB);
// - a recorded message replayed 50 times (by a peer without the secret, and
//   by one holding it) is accepted once;
// - a peer of another uid (nobody, 65534) gets nothing accepted by a trainer
//   without a secret (needs root; prints SKIPPED otherwise), while the same
//   bytes from our own uid are;
// - 2000 bad messages print at most 11 log lines (10 per minute + a
//   summary), and every one is counted.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "channel/channel_keys.h"
#include "channel/group_channel.h"
#include "channel/group_codec.h"
#include "channel/rejection_log.h"
#include "rollout/demonstrations.h"

using algorithms::TrajectoryGroup;

namespace {

constexpr uid_t kNobodyUid = 65534;
constexpr gid_t kNobodyGid = 65534;

TrajectoryGroup small_group(double reward) {
  rollout::DemonstrationOptions options;
  options.seed = 5;
  const rollout::DemonstrationStream stream(options);
  TrajectoryGroup group;
  for (std::uint64_t i = 0; i < 2; ++i) {
    rollout::Trajectory t = stream.at(i);
    for (std::size_t k = 0; k < t.log_probs.size(); ++k) {
      if (t.generated[k]) t.log_probs[k] = -0.5f;
    }
    t.score.reward = reward;
    group.trajectories.push_back(std::move(t));
  }
  group.generator = 1;
  group.sequence = 5;
  group.temperature = 1.0;
  group.top_p = 1.0;
  return group;
}

// This process's resident set (VmRSS) or its peak (VmHWM), in KiB.
long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  for (int i = 0; i < 200 && std::getline(in, line); ++i) {
    if (line.rfind(prefix, 0) == 0) return std::atol(line.c_str() + prefix.size());
  }
  return -1;
}

std::string write_temp(const std::string& bytes) {
  char path[] = "/tmp/ws-channel-attack-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::fchmod(fd, 0644);  // readable by an attacker running as nobody
  ::close(fd);
  return path;
}

// Runs ws_channel_attacker with `args`, as `nobody` when asked (raw system
// calls between fork and exec). Returns the child's pid; stdout goes to `out`.
pid_t spawn_attacker(const std::vector<std::string>& args, bool as_nobody) {
  std::vector<std::string> all{WS_CHANNEL_ATTACKER};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (as_nobody && !(::syscall(SYS_setgroups, 0, nullptr) == 0 && ::syscall(SYS_setgid, kNobodyGid) == 0 &&
                       ::syscall(SYS_setuid, kNobodyUid) == 0 && ::geteuid() == kNobodyUid)) {
      ::_exit(121);
    }
    ::execv(argv[0], argv.data());
    ::_exit(120);
  }
  return pid;
}

// Waits up to `limit` for `pid`, then kills it; its exit code or 128 + signal.
int reap(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (int i = 0; i < 100000; ++i) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return 128 + SIGKILL;
}

// Calls receive() for `window`; the number of groups accepted.
int accepted_within(channel::GroupReceiver& receiver, std::chrono::milliseconds window) {
  const auto end = std::chrono::steady_clock::now() + window;
  int accepted = 0;
  for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < end; ++i) {
    auto got = receiver.receive(std::chrono::milliseconds(50));
    if (got && got->ok()) ++accepted;
  }
  return accepted;
}

// Runs `body` in a forked child; the child's exit code, or 128 + signal.
template <typename Body>
int in_child(Body body) {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGSEGV, SIG_DFL);  // not Catch's handler: the parent reads the signal
    ::signal(SIGBUS, SIG_DFL);
    ::_exit(body());
  }
  return reap(pid, std::chrono::seconds(60));
}

}  // namespace

TEST_CASE("channel attack (issue 30 #2): endless MORE frames without the secret do not grow the receiver",
          "[rl][channel][attack]") {
  channel::ChannelOptions options;
  options.secret = "right";
  auto bound = channel::GroupReceiver::bind("tcp://127.0.0.1:*", options);
  REQUIRE(bound.ok());
  auto receiver = std::move(bound).value();
  (void)receiver->receive(std::chrono::milliseconds(10));
  const long before = status_kib("VmRSS");
  const pid_t attacker = spawn_attacker({receiver->endpoint(), "frames", "12", "16", "4000"}, false);
  long peak = before;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  for (int i = 0; i < 1000 && std::chrono::steady_clock::now() < end; ++i) {
    (void)receiver->receive(std::chrono::milliseconds(50));
    peak = std::max(peak, status_kib("VmRSS"));
  }
  reap(attacker, std::chrono::seconds(10));
  INFO("receiver RSS " << before / 1024 << " MiB before, " << peak / 1024
                       << " MiB at most while 192 MiB were offered");
  CHECK(peak - before < 48 * 1024);
  CHECK(receiver->counters().received == 0);
  CHECK(receiver->counters().rejected_connections >= 1);  // NULL greeting against CURVE
}

TEST_CASE("channel attack (issue 30 #2): an authenticated peer's multipart or oversized message is refused",
          "[rl][channel][attack]") {
  channel::ChannelOptions options;
  options.secret = "right";
  options.max_message_bytes = 1 << 20;
  auto bound = channel::GroupReceiver::bind("tcp://127.0.0.1:*", options);
  REQUIRE(bound.ok());
  auto receiver = std::move(bound).value();
  auto keys = channel::derive_channel_keys("right");
  REQUIRE(keys.ok());
  const std::vector<std::string> curve{"--curve", channel::z85_key(keys.value().server_public),
                                       channel::z85_key(keys.value().client_public),
                                       channel::z85_key(keys.value().client_secret)};
  // A good message split in two frames, 3 times, by a peer holding the secret.
  const std::string frame =
      channel::frame_message(std::string(16, 'x'), 1, channel::encode_group(small_group(0.0)));
  const std::string head = write_temp(frame.substr(0, 40));
  const std::string tail = write_temp(frame.substr(40));
  std::vector<std::string> args = curve;
  for (const std::string& a :
       {receiver->endpoint(), std::string("files"), std::string("3"), std::string("1500"), head, tail})
    args.push_back(a);
  pid_t attacker = spawn_attacker(args, false);
  CHECK(accepted_within(*receiver, std::chrono::milliseconds(2000)) == 0);
  CHECK(reap(attacker, std::chrono::seconds(10)) == 0);
  CHECK(receiver->counters().rejected_malformed == 3);
  // One frame over max_message_bytes: ZeroMQ drops the connection before buffering it.
  const std::string big =
      write_temp(channel::frame_message(std::string(16, 'y'), 1, std::string(2 << 20, '\xc0')));
  args = curve;
  for (const std::string& a :
       {receiver->endpoint(), std::string("files"), std::string("1"), std::string("1500"), big})
    args.push_back(a);
  attacker = spawn_attacker(args, false);
  CHECK(accepted_within(*receiver, std::chrono::milliseconds(2000)) == 0);
  reap(attacker, std::chrono::seconds(10));
  CHECK(receiver->counters().bytes < (1u << 20));  // only the two halves above were read
  for (const std::string& path : {head, tail, big}) ::unlink(path.c_str());
}

TEST_CASE("channel attack (issue 30 #5): deep nesting and a flood of nils are refused while reading",
          "[rl][channel][attack]") {
  // 1 MB of nested arrays: 0x91 is a MessagePack array of one element.
  const std::string nested = std::string(1 << 20, '\x91') + '\xc0';
  const int nested_exit = in_child([&] { return channel::decode_group(nested).ok() ? 1 : 0; });
  CHECK(nested_exit == 0);  // 128 + 11 on a SIGSEGV

  // A map whose "trajectories" is an array of 8 Mi nils.
  const std::size_t nils = std::size_t{8} << 20;
  std::string flood = "\x81\xactrajectories\xdd";
  for (int shift = 24; shift >= 0; shift -= 8) flood += static_cast<char>((nils >> shift) & 0xff);
  flood += std::string(nils, '\xc0');
  const int flood_exit = in_child([&] {
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS
    const long start = status_kib("VmRSS");
    const bool ok = channel::decode_group(flood).ok();
    const long grew_mib = (status_kib("VmHWM") - start) / 1024;
    std::printf("decoding 8 MiB of nils raised the peak RSS by %ld MiB\n", grew_mib);
    std::fflush(stdout);
    return ok ? 1 : (grew_mib < 16 ? 0 : 2);
  });
  CHECK(flood_exit == 0);  // 2: the peak grew by 16 MiB or more
}

TEST_CASE("channel attack (issue 30 #6): a recorded message replayed 50 times is accepted once",
          "[rl][channel][attack]") {
  channel::ChannelOptions options;
  options.secret = "right";
  auto bound = channel::GroupReceiver::bind("tcp://127.0.0.1:*", options);
  REQUIRE(bound.ok());
  auto receiver = std::move(bound).value();
  auto connected = channel::GroupSender::connect(receiver->endpoint(), options);
  REQUIRE(connected.ok());
  const TrajectoryGroup group = small_group(0.0);
  const std::uint64_t sequence = connected.value()->next_sequence();
  REQUIRE(connected.value()->send(group).ok());
  // What crossed the wire (inside CURVE's encryption), as the sender built it.
  const std::string recorded = write_temp(
      channel::frame_message(connected.value()->session(), sequence, channel::encode_group(group)));
  auto keys = channel::derive_channel_keys("right");
  REQUIRE(keys.ok());
  // A replayer without the secret, then one holding it (a compromised relay).
  const pid_t outsider = spawn_attacker({receiver->endpoint(), "files", "50", "3000", recorded}, false);
  const pid_t insider = spawn_attacker(
      {"--curve", channel::z85_key(keys.value().server_public), channel::z85_key(keys.value().client_public),
       channel::z85_key(keys.value().client_secret), receiver->endpoint(), "files", "50", "1500", recorded},
      false);
  const int accepted = accepted_within(*receiver, std::chrono::milliseconds(3000));
  // The outsider's handshake failed (counted by the guard); on a loaded
  // machine it may take a moment to connect at all.
  int late = 0;
  for (int i = 0; i < 100 && receiver->counters().rejected_connections == 0; ++i)
    late += accepted_within(*receiver, std::chrono::milliseconds(50));
  CHECK(reap(outsider, std::chrono::seconds(10)) == 0);
  CHECK(reap(insider, std::chrono::seconds(10)) == 0);
  late += accepted_within(*receiver, std::chrono::milliseconds(200));
  ::unlink(recorded.c_str());
  CHECK(accepted + late == 1);
  CHECK(receiver->counters().rejected_replay == 50);
  CHECK(receiver->counters().rejected_connections >= 1);
}

TEST_CASE("channel attack (issue 30 #6): another local user cannot feed a trainer that has no secret",
          "[rl][channel][attack]") {
  if (::geteuid() != 0) {
    std::printf("SKIPPED: needs root to act as another user\n");
    return;
  }
  auto bound = channel::GroupReceiver::bind("tcp://127.0.0.1:*", {});
  REQUIRE(bound.ok());
  auto receiver = std::move(bound).value();
  const std::string forged = write_temp(  // a forged perfect score, in the current wire form
      channel::frame_message(std::string(16, 'n'), 1, channel::encode_group(small_group(1.0))));
  const pid_t attacker = spawn_attacker({receiver->endpoint(), "files", "3", "1500", forged}, true);
  const int accepted = accepted_within(*receiver, std::chrono::milliseconds(2500));
  const int exit_code = reap(attacker, std::chrono::seconds(10));
  REQUIRE(exit_code == 0);  // the attacker did run, as nobody
  CHECK(accepted == 0);
  // Cut at accept or refused at the handshake: no message of it was read.
  CHECK(receiver->counters().rejected_connections >= 1);
  CHECK(receiver->counters().rejected_authentication == 0);
  CHECK(receiver->counters().bytes == 0);
  // The control: the same bytes from a process of our own uid are accepted once.
  const pid_t own = spawn_attacker({receiver->endpoint(), "files", "3", "1500", forged}, false);
  const int accepted_own = accepted_within(*receiver, std::chrono::milliseconds(2500));
  CHECK(reap(own, std::chrono::seconds(10)) == 0);
  ::unlink(forged.c_str());
  CHECK(accepted_own == 1);
}

TEST_CASE("channel attack (issue 30 #6): 2000 bad messages print at most 11 log lines, and all are counted",
          "[rl][channel][attack]") {
  auto bound = channel::GroupReceiver::bind("tcp://127.0.0.1:*", {});
  REQUIRE(bound.ok());
  auto receiver = std::move(bound).value();
  auto connected = channel::GroupSender::connect(receiver->endpoint(), {});
  REQUIRE(connected.ok());
  auto& sender = *connected.value();
  std::FILE* log = std::tmpfile();
  REQUIRE(log != nullptr);
  channel::RejectionLog rejections(log, "trainer: rejected a trajectory message: ", 10,
                                   std::chrono::seconds(60));
  int sent = 0;
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    auto ok = sender.send_raw("garbage");
    if (ok.ok() && ok.value()) ++sent;
    for (int k = 0; k < 100; ++k) {  // keep the queue short: read what has arrived
      auto got = receiver->receive(std::chrono::milliseconds(k == 0 ? 0 : 20));
      if (!got) break;
      if (!got->ok()) rejections.note(got->error().message), ++rejected;
      if (rejected >= sent) break;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int k = 0; k < 100000 && rejected < sent && std::chrono::steady_clock::now() < deadline; ++k) {
    auto got = receiver->receive(std::chrono::milliseconds(20));
    if (got && !got->ok()) rejections.note(got->error().message), ++rejected;
  }
  std::rewind(log);
  int lines = 0;
  for (int c = std::fgetc(log), i = 0; c != EOF && i < (1 << 24); c = std::fgetc(log), ++i)
    lines += c == '\n';
  std::fclose(log);
  CHECK(sent == 2000);
  CHECK(rejected == 2000);
  CHECK(rejections.total() == 2000);
  CHECK(rejections.printed() == 10);
  CHECK(lines <= 11);
  // After the interval, one summary line says how many were held back.
  std::FILE* later = std::tmpfile();
  channel::RejectionLog clock(later, "x: ", 2, std::chrono::seconds(10));
  const auto t0 = channel::RejectionLog::Clock::now();
  for (int i = 0; i < 50; ++i) clock.note("bad", t0);
  clock.flush(t0 + std::chrono::seconds(11));
  std::rewind(later);
  char text[256] = {};
  const std::size_t n = std::fread(text, 1, sizeof text - 1, later);
  std::fclose(later);
  CHECK(std::string(text, n) == "x: bad\nx: bad\nx: 48 more rejections suppressed in the last 10 s\n");
}
