// weightsync-python-pull-reader: the C++ side of bench/python/python_figures.py.
//
// One Subscriber, connected over the transport named on the command line,
// pulling into its own per-tensor buffers (scatter, like an engine's
// parameters) or one region (--contiguous). The memory is what an engine's
// allocator gives by default: posix_memalign(64) per tensor, faulted in before
// any pull, no madvise (torch's CPU allocator does the same), or with
// --memory hostbuffer weightsync::HostBuffer (2 MiB aligned, MADV_HUGEPAGE).
// The destination is prepared once (Subscriber::prepare), as the Python
// binding's bind() does, and every pull replays the plan.
//
// Driven by lines on stdin, answered by one line on stdout each:
//   PULL              pull(plan, wait 30 s), timed with steady_clock around the call:
//                     "PULLED <version> <bytes> <result.seconds> <result.wait_seconds> <wall_s> <retries>"
//   NOOP <n>          n pulls with nothing newer (each must be kNotReady), each timed:
//                     "NOOP <ns_1> ... <ns_n>"
//   SUMS              per tensor, layout order: the wrapping sum of its 64-bit words and the
//                     sum of (index + 1) * word: "SUMS <s_0> <w_0> <s_1> <w_1> ..."
//   QUIT
// Errors: "ERROR <what>". Startup: "READY <transport> <total_bytes> <tensors>".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "weightsync/weightsync.h"

namespace {

void reply(const std::string& line) {
  std::string out = line;
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

int fail(const std::string& what) {
  reply("ERROR " + what);
  return 1;
}

struct Buffer {
  void* data = nullptr;
  std::size_t bytes = 0;
  weightsync::HostBuffer host;  // --memory hostbuffer
};

void word_sums(const void* data, std::size_t bytes, std::uint64_t* sum, std::uint64_t* weighted) {
  const auto* words = static_cast<const std::uint64_t*>(data);
  const std::size_t n = bytes / 8;
  std::uint64_t s = 0, w = 0;
  for (std::size_t i = 0; i < n; ++i) {
    s += words[i];
    w += static_cast<std::uint64_t>(i + 1) * words[i];
  }
  *sum = s;
  *weighted = w;
}

}  // namespace

int main(int argc, char** argv) {
  std::string address, transport = "tcp", memory = "malloc";
  bool contiguous = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (arg == "--transport") {
      if (!value(&transport)) return fail("--transport needs a value");
    } else if (arg == "--memory") {
      if (!value(&memory)) return fail("--memory needs a value");
    } else if (arg == "--contiguous") {
      contiguous = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf(
          "usage: %s ADDRESS [--transport tcp|shm|ucx] [--memory malloc|hostbuffer] [--contiguous]\n"
          "Reads PULL / NOOP n / SUMS / QUIT lines on stdin (bench/python/python_figures.py).\n",
          argv[0]);
      return 0;
    } else if (address.empty()) {
      address = arg;
    } else {
      return fail("unexpected argument '" + arg + "'");
    }
  }
  if (address.empty()) return fail("usage: weightsync-python-pull-reader ADDRESS [--transport T]");
  if (memory != "malloc" && memory != "hostbuffer") return fail("--memory must be malloc or hostbuffer");

  weightsync::SubscriberOptions options;
  options.transport = transport;
  options.client_name = "python-figures-cxx";
  auto connected = weightsync::Subscriber::connect(address, options);
  if (!connected.ok()) return fail("connect over " + transport + ": " + connected.status().to_string());
  weightsync::Subscriber& sub = **connected;
  const weightsync::WeightLayout& layout = sub.layout();

  // One buffer per tensor (or one region), faulted in before any pull.
  std::vector<Buffer> buffers;
  auto allocate = [&](std::size_t bytes, Buffer* b) -> bool {
    b->bytes = bytes;
    if (memory == "hostbuffer") {
      auto h = weightsync::HostBuffer::allocate(bytes);
      if (!h.ok()) return false;
      b->host = std::move(*h);
      b->data = b->host.data();
    } else if (::posix_memalign(&b->data, 64, bytes) != 0) {
      return false;
    }
    std::memset(b->data, 0, bytes);
    return true;
  };
  std::vector<weightsync::ScatterEntry> entries;
  if (contiguous) {
    buffers.resize(1);
    if (!allocate(layout.total_bytes(), &buffers[0])) return fail("allocating the destination");
  } else {
    buffers.resize(layout.tensors().size());
    for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
      const auto& t = layout.tensors()[i];
      if (!allocate(t.bytes, &buffers[i])) return fail("allocating " + t.spec.name);
      entries.push_back({t.spec.name, buffers[i].data, t.bytes});
    }
  }
  const auto destination = contiguous ? weightsync::Destination::contiguous(buffers[0].data, buffers[0].bytes)
                                      : weightsync::Destination::scatter(entries);
  auto plan = sub.prepare(destination);
  if (!plan.ok()) return fail("prepare: " + plan.status().to_string());

  reply("READY " + sub.transport() + " " + std::to_string(layout.total_bytes()) + " " +
        std::to_string(layout.tensors().size()));

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "PULL") {
      weightsync::PullOptions pull_options;
      pull_options.wait = std::chrono::seconds(30);
      const auto start = std::chrono::steady_clock::now();
      auto pulled = sub.pull(*plan, pull_options);
      const auto end = std::chrono::steady_clock::now();
      if (!pulled.ok()) {
        reply("ERROR pull: " + pulled.status().to_string());
        continue;
      }
      std::ostringstream out;
      out.precision(9);
      out << "PULLED " << pulled->version << " " << pulled->bytes << " " << pulled->seconds << " "
          << pulled->wait_seconds << " " << std::chrono::duration<double>(end - start).count() << " "
          << pulled->retries;
      reply(out.str());
    } else if (command == "NOOP") {
      long n = 0;
      in >> n;
      std::vector<std::int64_t> ns(static_cast<std::size_t>(std::max(n, 0L)));
      std::string error;
      for (auto& sample : ns) {
        const auto start = std::chrono::steady_clock::now();
        auto pulled = sub.pull(*plan);
        const auto end = std::chrono::steady_clock::now();
        sample = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
        if (pulled.ok()) {
          error = "a pull with nothing new delivered version " + std::to_string(pulled->version);
          break;
        }
        if (pulled.status().code() != weightsync::ErrorCode::kNotReady) {
          error = pulled.status().to_string();
          break;
        }
      }
      if (!error.empty()) {
        reply("ERROR noop: " + error);
        continue;
      }
      std::string out = "NOOP";
      out.reserve(ns.size() * 8);
      for (auto v : ns) out += " " + std::to_string(v);
      reply(out);
    } else if (command == "SUMS") {
      std::string out = "SUMS";
      for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
        const auto& t = layout.tensors()[i];
        const void* data =
            contiguous ? static_cast<const char*>(buffers[0].data) + t.offset : buffers[i].data;
        std::uint64_t s = 0, w = 0;
        word_sums(data, t.bytes, &s, &w);
        out += " " + std::to_string(s) + " " + std::to_string(w);
      }
      reply(out);
    } else if (command == "QUIT") {
      break;
    } else if (!command.empty()) {
      reply("ERROR unknown command '" + command + "'");
    }
  }
  for (auto& b : buffers) {
    if (memory == "malloc") std::free(b.data);
  }
  return 0;
}
