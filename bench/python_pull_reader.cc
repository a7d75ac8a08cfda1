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
// A blank line gets no answer. The loop: role_loop.h.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "line_stream.h"
#include "role_loop.h"
#include "role_support.h"
#include "weightsync/weightsync.h"

namespace {

using wsbench::error_line;

struct Args {
  std::string address, transport = "tcp", memory = "malloc";
  bool contiguous = false;
  bool help = false;
};

// The command line; false with *error set on a bad one.
bool parse_args(int argc, char** argv, Args* args, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (arg == "--transport") {
      if (!value(&args->transport)) return *error = "--transport needs a value", false;
    } else if (arg == "--memory") {
      if (!value(&args->memory)) return *error = "--memory needs a value", false;
    } else if (arg == "--contiguous") {
      args->contiguous = true;
    } else if (arg == "-h" || arg == "--help") {
      args->help = true;
      return true;
    } else if (args->address.empty()) {
      args->address = arg;
    } else {
      return *error = "unexpected argument '" + arg + "'", false;
    }
  }
  if (args->address.empty())
    return *error = "usage: weightsync-python-pull-reader ADDRESS [--transport T]", false;
  if (args->memory != "malloc" && args->memory != "hostbuffer") {
    return *error = "--memory must be malloc or hostbuffer", false;
  }
  return true;
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

// The Subscriber, its buffers and its prepared plan; the commands, on the role loop's thread.
class PullReader {
 public:
  explicit PullReader(const Args& args) : args_(args) {}
  PullReader(const PullReader&) = delete;
  PullReader& operator=(const PullReader&) = delete;
  ~PullReader() {
    for (auto& b : buffers_) {
      if (args_.memory == "malloc") std::free(b.data);
    }
  }

  // Connects, allocates one buffer per tensor (or one region), prepares the plan.
  bool setup(std::string* error) {
    weightsync::SubscriberOptions options;
    options.transport = args_.transport;
    options.client_name = "python-figures-cxx";
    auto connected = weightsync::Subscriber::connect(args_.address, options);
    if (!connected.ok()) {
      *error = "connect over " + args_.transport + ": " + connected.status().to_string();
      return false;
    }
    sub_ = std::move(*connected);
    if (!allocate_buffers(error)) return false;
    auto plan = sub_->prepare(destination());
    if (!plan.ok()) {
      *error = "prepare: " + plan.status().to_string();
      return false;
    }
    plan_ = std::move(*plan);
    return true;
  }

  // READY's fields: <transport> <total_bytes> <tensors>
  std::string ready_fields() const {
    return sub_->transport() + " " + std::to_string(layout().total_bytes()) + " " +
           std::to_string(layout().tensors().size());
  }

  // PULL -> PULLED <version> <bytes> <seconds> <wait_seconds> <wall_s> <retries>
  std::string pull() {
    weightsync::PullOptions pull_options;
    pull_options.wait = std::chrono::seconds(30);
    const auto start = std::chrono::steady_clock::now();
    auto pulled = sub_->pull(plan_, pull_options);
    const auto end = std::chrono::steady_clock::now();
    if (!pulled.ok()) return error_line("pull: " + pulled.status().to_string());
    std::ostringstream out;
    out.precision(9);
    out << "PULLED " << pulled->version << " " << pulled->bytes << " " << pulled->seconds << " "
        << pulled->wait_seconds << " " << std::chrono::duration<double>(end - start).count() << " "
        << pulled->retries;
    return out.str();
  }

  // NOOP <n> -> NOOP <ns_1> ... <ns_n>: n pulls with nothing newer, each timed.
  std::string noop(std::istringstream& in) {
    long n = 0;
    in >> n;
    std::vector<std::int64_t> ns(static_cast<std::size_t>(std::max(n, 0L)));
    for (auto& sample : ns) {
      const auto start = std::chrono::steady_clock::now();
      auto pulled = sub_->pull(plan_);
      const auto end = std::chrono::steady_clock::now();
      sample = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
      if (pulled.ok()) {
        return error_line("noop: a pull with nothing new delivered version " +
                          std::to_string(pulled->version));
      }
      if (pulled.status().code() != weightsync::ErrorCode::kNotReady) {
        return error_line("noop: " + pulled.status().to_string());
      }
    }
    std::string out = "NOOP";
    out.reserve(ns.size() * 8);
    for (auto v : ns) out += " " + std::to_string(v);
    return out;
  }

  // SUMS -> SUMS <s_0> <w_0> <s_1> <w_1> ...
  std::string sums() const {
    std::string out = "SUMS";
    for (std::size_t i = 0; i < layout().tensors().size(); ++i) {
      const auto& t = layout().tensors()[i];
      const void* data =
          args_.contiguous ? static_cast<const char*>(buffers_[0].data) + t.offset : buffers_[i].data;
      std::uint64_t s = 0, w = 0;
      word_sums(data, t.bytes, &s, &w);
      out += " " + std::to_string(s) + " " + std::to_string(w);
    }
    return out;
  }

 private:
  const weightsync::WeightLayout& layout() const { return sub_->layout(); }

  // One buffer per tensor (or one region), faulted in before any pull.
  bool allocate_buffers(std::string* error) {
    if (args_.contiguous) {
      buffers_.resize(1);
      if (!allocate(layout().total_bytes(), &buffers_[0]))
        return *error = "allocating the destination", false;
      return true;
    }
    buffers_.resize(layout().tensors().size());
    for (std::size_t i = 0; i < layout().tensors().size(); ++i) {
      const auto& t = layout().tensors()[i];
      if (!allocate(t.bytes, &buffers_[i])) return *error = "allocating " + t.spec.name, false;
      entries_.push_back({t.spec.name, buffers_[i].data, t.bytes});
    }
    return true;
  }

  bool allocate(std::size_t bytes, Buffer* b) const {
    b->bytes = bytes;
    if (args_.memory == "hostbuffer") {
      auto h = weightsync::HostBuffer::allocate(bytes);
      if (!h.ok()) return false;
      b->host = std::move(*h);
      b->data = b->host.data();
    } else if (::posix_memalign(&b->data, 64, bytes) != 0) {
      return false;
    }
    std::memset(b->data, 0, bytes);
    return true;
  }

  weightsync::Destination destination() const {
    return args_.contiguous ? weightsync::Destination::contiguous(buffers_[0].data, buffers_[0].bytes)
                            : weightsync::Destination::scatter(entries_);
  }

  const Args args_;
  std::unique_ptr<weightsync::Subscriber> sub_;
  std::vector<Buffer> buffers_;
  std::vector<weightsync::ScatterEntry> entries_;
  weightsync::PullPlan plan_;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  std::string error;
  const bool parsed = parse_args(argc, argv, &args, &error);
  if (args.help) {
    std::printf(
        "usage: %s ADDRESS [--transport tcp|shm|ucx] [--memory malloc|hostbuffer] [--contiguous]\n"
        "Reads PULL / NOOP n / SUMS / QUIT lines on stdin (bench/python/python_figures.py).\n",
        argv[0]);
    return 0;
  }
  wsutil::LineStream io(0, 1);
  if (!parsed) return wsbench::startup_error(io, error);
  PullReader reader(args);
  if (!reader.setup(&error)) return wsbench::startup_error(io, error);
  wsbench::RoleLoop loop(io);
  loop.on("PULL", [&](std::istringstream&) { return reader.pull(); });
  loop.on("NOOP", [&](std::istringstream& in) { return reader.noop(in); });
  loop.on("SUMS", [&](std::istringstream&) { return reader.sums(); });
  // A blank line: no answer (an unknown command gets an ERROR).
  loop.on("", [](std::istringstream&) { return std::optional<std::string>(); });
  return loop.ready_then_run(reader.ready_fields());
}
