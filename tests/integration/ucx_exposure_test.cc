// What a holder of the publisher's `ucx` offer can reach (issue 14, findings
// 4, 5 and 7b). Each case runs in a child process of this binary (a hidden
// test case, "[.ucx-exposure-child]") with its own UCX_* environment, so that
// UCX reads it fresh and a crash shows up as an exit status. The child prints
// what it found as "KEY value" lines; the parent checks them.
//
// The attack (child "attack the ucx offer"): the child runs the publisher
// itself, authenticates like any subscriber, reads SLOT_TABLE, and, when a
// `ucx` offer is there, uses it with plain UCX calls: a ucp_get from a global
// of this process (outside every slot) and a ucp_put into it. Without the fix,
// UCX_TLS=posix,self with memfd slots offered ucx and UCX's software-emulated
// RMA served both.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "net/socket.h"
#include "peers.h"
#include "subscriber/control_client.h"
#include "wire/messages.h"

// WS_TEST_HAVE_UCX: the library was built with UCX (and links it), not just
// "the headers are installed".
#if defined(WS_TEST_HAVE_UCX)
#include <ucp/api/ucp.h>

#include "transport/ucx/ucx_offer.h"
#define WS_TEST_HAVE_UCX_HEADERS 1
#endif

using namespace weightsync;
using namespace weightsync::detail;
using namespace wstest;

namespace {

const std::string kSecret = "ucx-exposure-secret";

std::string self_exe() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  REQUIRE(n > 0);
  return std::string(path, static_cast<std::size_t>(n));
}

// Why UCX cannot be tested here at all, or empty.
std::string ucx_unavailable_reason() {
#ifndef WS_TEST_HAVE_UCX_HEADERS
  return "this build has no UCX (WEIGHTSYNC_WITH_UCX=OFF or libucx-dev missing)";
#else
  for (const auto& t : available_transports()) {
    if (t.name == "ucx" && t.reason.find("built without") != std::string::npos) return t.reason;
  }
  return "";
#endif
}

// The output of one child case: its exit status and its "KEY value" lines.
struct ChildReport {
  int exit_status = -1;
  std::vector<std::pair<std::string, std::string>> lines;
  std::vector<std::string> values(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& [k, v] : lines) {
      if (k == key) out.push_back(v);
    }
    return out;
  }
  std::string value(const std::string& key) const {
    auto all = values(key);
    return all.empty() ? "" : all.front();
  }
  std::string dump() const {
    std::string out = "exit " + std::to_string(exit_status) + "\n";
    for (const auto& [k, v] : lines) out += k + " " + v + "\n";
    return out;
  }
};

// Runs the hidden case `name` in a child with `env`; bounded to 120 s.
ChildReport run_child(const std::string& name, const std::vector<std::string>& env) {
  auto child = ChildProcess::spawn({self_exe(), name}, env);
  ChildReport report;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int i = 0; i < 10000 && std::chrono::steady_clock::now() < deadline; ++i) {
    auto line = child.read_line(std::chrono::milliseconds(1000));
    if (!line) {
      if (auto status = child.wait(std::chrono::milliseconds(0))) {
        report.exit_status = *status;
        return report;
      }
      continue;
    }
    const auto space = line->find(' ');
    if (line->rfind("UCXREPORT ", 0) == 0) {
      const std::string rest = line->substr(space + 1);
      const auto sep = rest.find(' ');
      report.lines.emplace_back(rest.substr(0, sep), sep == std::string::npos ? "" : rest.substr(sep + 1));
    }
  }
  if (auto status = child.wait(std::chrono::seconds(5))) report.exit_status = *status;
  return report;
}

void report(const std::string& key, const std::string& value) {
  std::printf("UCXREPORT %s %s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
}

// "a.b.c.d:port" (or "::1:port", else the raw hex) of every TCP socket this
// process listens on, from /proc/self/fd and /proc/net/tcp{,6}.
std::vector<std::string> listening_addresses() {
  std::vector<std::string> inodes;
  for (int fd = 0; fd < 4096; ++fd) {
    char link[256];
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    const std::string target(link, static_cast<std::size_t>(n));
    if (target.rfind("socket:[", 0) == 0) inodes.push_back(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    for (int i = 0; i < 100000 && std::getline(in, line); ++i) {
      std::istringstream fields(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      fields >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || std::find(inodes.begin(), inodes.end(), inode) == inodes.end()) continue;
      const auto colon = local.find(':');
      const std::string hex = local.substr(0, colon);
      const unsigned port = std::stoul(local.substr(colon + 1), nullptr, 16);
      std::string address;
      if (hex.size() == 8) {
        const unsigned long v = std::stoul(hex, nullptr, 16);  // little-endian on x86
        address = std::to_string(v & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." +
                  std::to_string((v >> 16) & 0xff) + "." + std::to_string((v >> 24) & 0xff);
      } else if (hex == "00000000000000000000000001000000") {
        address = "::1";
      } else {
        address = hex;
      }
      out.push_back(address + ":" + std::to_string(port));
    }
  }
  return out;
}

bool is_loopback_listen(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address.rfind("::1:", 0) == 0;
}

// A global of this process, outside every slot: what the attack tries to
// read and overwrite.
alignas(4096) char g_canary[4096];
constexpr char kCanary[] = "WEIGHTSYNC-UCX-EXPOSURE-CANARY";
constexpr char kForged[] = "FORGED-BY-A-SUBSCRIBER";

#ifdef WS_TEST_HAVE_UCX_HEADERS
void on_done(void* request, ucs_status_t status, void* user_data) {
  static_cast<std::atomic<int>*>(user_data)->store(static_cast<int>(status));
  ucp_request_free(request);
}

// A subscriber that uses the offer with plain UCX calls. Everything it does
// is bounded in time; requests still pending at the end are leaked with
// their state (the process exits right after).
struct Attacker {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;

  bool connect(const UcxOffer& offer) {
    ucp_config_t* config = nullptr;
    if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return false;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    const ucs_status_t st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (st != UCS_OK) return false;
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(context, &wparams, &worker) != UCS_OK) return false;
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(offer.worker_address.data());
    if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) return false;
    // Slot 0's rkey: any key of the offer will do.
    return ucp_ep_rkey_unpack(ep, offer.slots[0].rkey.data(), &rkey) == UCS_OK;
  }

  // Waits up to 3 s for `req`; true when it completed successfully.
  bool wait(ucs_status_ptr_t req, std::atomic<int>& status) {
    if (req == nullptr) return true;
    if (UCS_PTR_IS_ERR(req)) return false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (int i = 0; i < 10000000 && status.load() == 1 && std::chrono::steady_clock::now() < until; ++i) {
      if (ucp_worker_progress(worker) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return status.load() == UCS_OK;
  }

  bool get(void* dest, std::size_t length, std::uint64_t remote) {
    auto* status = new std::atomic<int>(1);  // leaked if never completed
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_done;
    param.user_data = status;
    return wait(ucp_get_nbx(ep, dest, length, remote, rkey, &param), *status);
  }

  bool put(const void* source, std::size_t length, std::uint64_t remote) {
    auto* status = new std::atomic<int>(1);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_done;
    param.user_data = status;
    if (!wait(ucp_put_nbx(ep, source, length, remote, rkey, &param), *status)) return false;
    auto* flushed = new std::atomic<int>(1);
    param.user_data = flushed;
    return wait(ucp_ep_flush_nbx(ep, &param), *flushed);
  }
};
#endif

}  // namespace

// ---- the children (hidden: run only by the parents below) ----

TEST_CASE("ucx-exposure child: attack the ucx offer", "[.ucx-exposure-child]") {
  std::memset(g_canary, 0, sizeof(g_canary));
  std::memcpy(g_canary, kCanary, sizeof(kCanary));
  PublisherOptions options;
  options.secret = kSecret;
  auto publisher = Publisher::create(bytes_layout(1 << 20), options);
  REQUIRE(publisher.ok());
  report("ALLOCATOR", (*publisher)->slot_allocator());
  for (const auto& address : listening_addresses()) report("LISTEN", address);
  report("PORT", std::to_string((*publisher)->port()));
  publish_pattern(**publisher, 1);
  auto target = parse_host_port((*publisher)->address());
  REQUIRE(target.ok());
  auto control = ControlClient::connect(*target, kSecret, "ucx-exposure", 5000, 5000);
  REQUIRE(control.ok());
  auto table = control->get_slot_table();
  REQUIRE(table.ok());
  const TransportOffer* ucx = nullptr;
  for (const auto& offer : table->transports) {
    report("OFFER", offer.name);
    if (offer.name == "ucx") ucx = &offer;
  }
  if (ucx == nullptr) return;
#ifdef WS_TEST_HAVE_UCX_HEADERS
  auto offer = UcxOffer::decode(ucx->blob);
  REQUIRE(offer.ok());
  Attacker attacker;
  REQUIRE(attacker.connect(*offer));
  const auto canary = reinterpret_cast<std::uint64_t>(&g_canary[0]);
  REQUIRE((canary + sizeof(g_canary) <= offer->slots[0].address ||
           canary >= offer->slots[0].address + offer->slots[0].length));
  char stolen[sizeof(kCanary)] = {};
  const bool got = attacker.get(stolen, sizeof(stolen), canary);
  report("READ_OUTSIDE", got && std::memcmp(stolen, kCanary, sizeof(kCanary)) == 0 ? "yes" : "no");
  const bool put = attacker.put(kForged, sizeof(kForged), canary + 1024);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  char landed[sizeof(kForged)];
  for (std::size_t i = 0; i < sizeof(landed); ++i)
    landed[i] = static_cast<volatile char*>(g_canary)[1024 + i];
  report("WRITE_OUTSIDE", put && std::memcmp(landed, kForged, sizeof(kForged)) == 0 ? "yes" : "no");
  std::fflush(stdout);
  // UCX objects are left to process exit: a pending emulated request must
  // not be torn down under the publisher's progress thread.
  std::_Exit(0);
#endif
}

TEST_CASE("ucx-exposure child: same-host subscriber with transport auto", "[.ucx-exposure-child]") {
  auto peer =
      start_peer_publisher({"--size", std::to_string(1 << 20), "--tensors", "2", "--secret", kSecret});
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(20)));
  auto target = parse_host_port(peer.address);
  REQUIRE(target.ok());
  auto control = ControlClient::connect(*target, kSecret, "ucx-exposure", 5000, 5000);
  REQUIRE(control.ok());
  auto table = control->get_slot_table();
  REQUIRE(table.ok());
  for (const auto& offer : table->transports) report("OFFER", offer.name);
  control->bye();
  auto options = quick_options(5000, "auto");
  options.secret = kSecret;
  auto sub = Subscriber::connect(peer.address, options);
  if (!sub.ok()) report("CONNECT", sub.status().to_string());
  REQUIRE(sub.ok());
  report("TRANSPORT", (*sub)->transport());
  auto image = HostBuffer::allocate((*sub)->layout().total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  report("PULL", pulled.ok() && image_mismatch((*sub)->layout(), image->data(), pulled->version) < 0
                     ? "ok"
                     : "failed " + pulled.status().to_string());
}

TEST_CASE("ucx-exposure child: ucx slot allocator with lock_memory", "[.ucx-exposure-child]") {
  PublisherOptions options;
  options.slot_allocator = "ucx";
  options.lock_memory = true;
  auto publisher = Publisher::create(bytes_layout(1 << 20, 2), options);
  if (!publisher.ok()) report("CREATE", publisher.status().to_string());
  REQUIRE(publisher.ok());
  report("ALLOCATOR", (*publisher)->slot_allocator());
  publish_pattern(**publisher, 1);
  auto sub = Subscriber::connect((*publisher)->address(), quick_options(5000, "ucx"));
  if (!sub.ok()) report("CONNECT", sub.status().to_string());
  REQUIRE(sub.ok());
  report("TRANSPORT", (*sub)->transport());
  auto image = HostBuffer::allocate((*publisher)->layout().total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  report("PULL", pulled.ok() && image_mismatch((*publisher)->layout(), image->data(), 1) < 0
                     ? "ok"
                     : "failed " + pulled.status().to_string());
}

// ---- the tests ----

TEST_CASE("ucx exposure: UCX shared memory with memfd slots gives no subscriber the publisher's memory",
          "[ucx-exposure]") {
  if (const std::string why = ucx_unavailable_reason(); !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return;
  }
  const std::string tls = GENERATE(as<std::string>{}, "posix,self", "sysv,self");
  auto r = run_child("ucx-exposure child: attack the ucx offer",
                     {"UCX_TLS=" + tls, "WEIGHTSYNC_SLOT_ALLOCATOR=memfd"});
  INFO("UCX_TLS=" << tls << "\n" << r.dump());
  REQUIRE(r.exit_status == 0);
  CHECK(r.value("ALLOCATOR") == "memfd");
  const auto offers = r.values("OFFER");
  CHECK(std::find(offers.begin(), offers.end(), "shm") != offers.end());
  CHECK(std::find(offers.begin(), offers.end(), "ucx") == offers.end());
  CHECK(r.value("READ_OUTSIDE") != "yes");
  CHECK(r.value("WRITE_OUTSIDE") != "yes");
}

TEST_CASE("ucx exposure: UCX over tcp is not offered and opens no UCX socket", "[ucx-exposure]") {
  if (const std::string why = ucx_unavailable_reason(); !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return;
  }
  const std::string tls = GENERATE(as<std::string>{}, "tcp,self", "all");
  auto r = run_child("ucx-exposure child: attack the ucx offer", {"UCX_TLS=" + tls});
  INFO("UCX_TLS=" << tls << "\n" << r.dump());
  REQUIRE(r.exit_status == 0);
  const auto offers = r.values("OFFER");
  CHECK(std::find(offers.begin(), offers.end(), "ucx") == offers.end());
  CHECK(r.value("READ_OUTSIDE") != "yes");
  CHECK(r.value("WRITE_OUTSIDE") != "yes");
  // The only listening socket is weightsync's own control listener.
  const auto listening = r.values("LISTEN");
  CHECK(listening.size() == 1);
  for (const auto& address : listening) CHECK(address == "127.0.0.1:" + r.value("PORT"));
}

TEST_CASE("ucx exposure: with the insecure override UCX listens on loopback only", "[ucx-exposure]") {
  if (const std::string why = ucx_unavailable_reason(); !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return;
  }
  auto r = run_child("ucx-exposure child: attack the ucx offer",
                     {"UCX_TLS=tcp,self", "WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA=1"});
  INFO(r.dump());
  REQUIRE(r.exit_status == 0);
  const auto offers = r.values("OFFER");
  CHECK(std::find(offers.begin(), offers.end(), "ucx") != offers.end());  // the override's point
  const auto listening = r.values("LISTEN");
  CHECK(listening.size() >= 2);  // weightsync's listener and UCX's
  for (const auto& address : listening) CHECK(is_loopback_listen(address));
}

TEST_CASE("ucx exposure: by default a same-host subscriber gets read-only shm, not writable UCX mappings",
          "[ucx-exposure]") {
  if (const std::string why = ucx_unavailable_reason(); !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return;
  }
  const std::string tls = GENERATE(as<std::string>{}, "posix,self", "sysv,self", "posix,sysv,self");
  auto r = run_child("ucx-exposure child: same-host subscriber with transport auto", {"UCX_TLS=" + tls});
  INFO("UCX_TLS=" << tls << "\n" << r.dump());
  REQUIRE(r.exit_status == 0);
  const auto offers = r.values("OFFER");
  CHECK(std::find(offers.begin(), offers.end(), "shm") != offers.end());
  CHECK(std::find(offers.begin(), offers.end(), "ucx") == offers.end());
  CHECK(r.value("TRANSPORT") == "shm");
  CHECK(r.value("PULL") == "ok");
}

TEST_CASE("ucx exposure: lock_memory with the ucx slot allocator publishes and pulls", "[ucx-exposure]") {
  if (const std::string why = ucx_unavailable_reason(); !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return;
  }
  auto r = run_child("ucx-exposure child: ucx slot allocator with lock_memory", {"UCX_TLS=posix,self"});
  INFO(r.dump());
  CHECK(r.exit_status == 0);
  CHECK(r.value("ALLOCATOR") == "ucx");
  CHECK(r.value("TRANSPORT") == "ucx");
  CHECK(r.value("PULL") == "ok");
}
