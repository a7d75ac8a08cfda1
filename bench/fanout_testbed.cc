// TestBed: scripts/testbed.sh up / exec / down, with every command recorded
// and the bed removed on every way out (destructor, or a signal).
#include "fanout_testbed.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace wsbench {
namespace {

// What a signal handler needs to remove the bed: argv built before it is up.
constexpr int kMaxArgs = 4;
char g_down_args[kMaxArgs][512];
char* g_down_argv[kMaxArgs + 1] = {};
volatile sig_atomic_t g_bed_up = 0;

void remove_bed_and_exit(int sig) {
  if (g_bed_up) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execv(g_down_argv[0], g_down_argv);
      ::_exit(127);
    }
    int status = 0;
    if (pid > 0) ::waitpid(pid, &status, 0);
  }
  ::_exit(128 + sig);
}

}  // namespace

int run_captured(const std::vector<std::string>& argv, double timeout_s, std::string* output) {
  int fds[2];
  if (argv.empty() || ::pipe2(fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a timeout kills the script and what it started
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  char chunk[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output->append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    output->append("\n(killed after " + std::to_string(timeout_s) + " s)\n");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./:=,+@%") == std::string::npos;
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

bool TestBed::check(const std::string& script, std::string* why) {
  std::string output;
  const int rc = run_captured({script, "check"}, 30, &output);
  if (rc == 0) return true;
  const auto at = output.find("SKIPPED:");
  if (at != std::string::npos) {
    *why = output.substr(at + 8);
  } else {
    *why = script + " check failed (exit " + std::to_string(rc) + "): " + output;
  }
  while (!why->empty() && (why->back() == '\n' || why->back() == ' ')) why->pop_back();
  while (!why->empty() && why->front() == ' ') why->erase(0, 1);
  return false;
}

TestBed::TestBed(std::string script, std::vector<std::string>* commands)
    : script_(std::move(script)), commands_(commands) {}

TestBed::~TestBed() {
  down();
}

bool TestBed::up(const std::string& name, int hosts, const std::string& rate, std::string* error) {
  name_ = name;
  // Armed before the bed exists: a signal from here on removes it.
  const std::string args[kMaxArgs - 1] = {script_, "down", name_};
  for (int i = 0; i < kMaxArgs - 1; ++i) {
    std::snprintf(g_down_args[i], sizeof(g_down_args[i]), "%s", args[i].c_str());
    g_down_argv[i] = g_down_args[i];
  }
  g_down_argv[kMaxArgs - 1] = nullptr;
  g_bed_up = 1;
  up_ = true;
  struct sigaction action {};
  action.sa_handler = remove_bed_and_exit;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);

  std::vector<std::string> argv = {script_, "up", name_, std::to_string(hosts)};
  if (rate != "none") {
    argv.push_back("--rate");
    argv.push_back(rate);
  }
  commands_->push_back(shell_join(argv));
  std::string output;
  const int rc = run_captured(argv, 120, &output);
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string tag;
    FanoutHost host;
    if (words >> tag >> host.index >> host.ns >> host.address && tag == "HOST") hosts_.push_back(host);
  }
  if (rc != 0 || static_cast<int>(hosts_.size()) != hosts) {
    *error = shell_join(argv) + " failed (exit " + std::to_string(rc) + ", " + std::to_string(hosts_.size()) +
             " HOST lines): " + output;
    return false;
  }
  return true;
}

void TestBed::down() {
  if (!up_) return;
  const std::vector<std::string> argv = {script_, "down", name_};
  commands_->push_back(shell_join(argv));
  std::string output;
  const int rc = run_captured(argv, 120, &output);
  if (rc != 0)
    std::fprintf(stderr, "fanout: %s failed (exit %d): %s\n", shell_join(argv).c_str(), rc, output.c_str());
  up_ = false;
  g_bed_up = 0;
}

std::vector<std::string> TestBed::exec(int host, const std::vector<std::string>& argv) {
  std::vector<std::string> full = {script_, "exec", name_, std::to_string(host)};
  full.insert(full.end(), argv.begin(), argv.end());
  commands_->push_back(shell_join(full));
  return full;
}

std::string TestBed::subnet() const {
  if (hosts_.empty()) return "";
  const std::string& a = hosts_[0].address;
  return a.substr(0, a.rfind('.')) + ".0/24";
}

std::string TestBed::bridge_address() const {
  if (hosts_.empty()) return "";
  const std::string& a = hosts_[0].address;
  return a.substr(0, a.rfind('.')) + ".254";
}

}  // namespace wsbench
