// ws-example-lora: LoRA adapters as their own versions. A trainer serves two
// adapters ("math-v2" and "tool-use") behind one AdapterPublisher address,
// each with its own layout and version stream, and publishes them out of step
// (math every step, tool-use every third); one engine per adapter pulls its
// adapter in the background (StagedUpdates) and installs it between
// generation steps, checking that every installed version is its adapter's,
// complete, and never older than the one before. Exit code 0: all checked.
// See README.md next to this file.
#include <CLI/CLI.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <weightsync/weightsync.h>

namespace {

using namespace weightsync;

// A LoRA adapter's tensors: lora_A [rank, hidden] and lora_B [hidden, rank]
// per layer, bf16.
WeightLayout lora_layout(int layers, int hidden, int rank) {
  std::vector<TensorSpec> specs;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".q_proj.";
    specs.push_back({p + "lora_A", DType::kBFloat16, {rank, hidden}});
    specs.push_back({p + "lora_B", DType::kBFloat16, {hidden, rank}});
  }
  auto layout = WeightLayout::build(std::move(specs));
  if (!layout.ok()) throw std::runtime_error(layout.status().to_string());
  return *layout;
}

// Every 8-byte word of a version holds (adapter, version, word index).
std::uint64_t word(std::uint64_t adapter, std::uint64_t version, std::uint64_t i) {
  return (adapter << 56) | (version << 32) | (i & 0xffffffffu);
}

void fill(void* data, std::size_t bytes, std::uint64_t adapter, std::uint64_t version) {
  auto* w = static_cast<std::uint64_t*>(data);
  for (std::size_t i = 0; i < bytes / 8; ++i) w[i] = word(adapter, version, i);
}

bool holds(const void* data, std::size_t bytes, std::uint64_t adapter, std::uint64_t version) {
  const auto* w = static_cast<const std::uint64_t*>(data);
  for (std::size_t i = 0; i < bytes / 8; ++i) {
    if (w[i] != word(adapter, version, i)) return false;
  }
  return true;
}

struct Adapter {
  std::string name;
  std::uint64_t id;
  int every;  // publishes a version every `every` steps
  std::uint64_t last = 0;
};

struct Options {
  std::string transport = "shm";
  int steps = 60;
  int layers = 8;
  int hidden = 1024;
  int rank = 16;
  int timeout_s = 60;
};

// One engine: installs its adapter between steps until it has the last version.
bool run_engine(const std::string& address, const Adapter& adapter, const Options& o, std::string* report) {
  SubscriberOptions sopts;
  sopts.adapter = adapter.name;
  sopts.transport = o.transport;
  sopts.client_name = "engine-" + adapter.name;
  auto sub = Subscriber::connect(address, sopts);
  if (!sub.ok()) return *report = sub.status().to_string(), false;
  const std::size_t bytes = (*sub)->layout().total_bytes();
  auto staged = StagedUpdates::create(std::move(*sub));
  if (!staged.ok()) return *report = staged.status().to_string(), false;
  std::uint64_t live = 0, installs = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  while (live < adapter.last && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a generation step
    auto installed = (*staged)->install();
    if (!installed.ok()) {
      if (installed.status().code() == ErrorCode::kNotReady) continue;
      return *report = installed.status().to_string(), false;
    }
    if (installed->version <= live || !holds((*staged)->live_data(), bytes, adapter.id, installed->version)) {
      *report = "installed version " + std::to_string(installed->version) + " is not " + adapter.name + "'s";
      return false;
    }
    live = installed->version;
    ++installs;
  }
  const auto stats = (*staged)->stats();
  *report = adapter.name + ": " + std::to_string(installs) + " installs, last version " +
            std::to_string(live) + ", install blocked median " +
            std::to_string(stats.blocked.median_seconds * 1e6) + " us";
  return live == adapter.last;
}

int run(const Options& o) {
  AdapterPublisherOptions popts;
  popts.publisher.checksum = true;  // StagedUpdates stages only verified versions
  auto publisher = AdapterPublisher::create(popts);
  if (!publisher.ok()) return std::fprintf(stderr, "%s\n", publisher.status().to_string().c_str()), 1;
  std::vector<Adapter> adapters = {{"math-v2", 1, 1}, {"tool-use", 2, 3}};
  std::vector<Publisher*> pubs;
  for (auto& a : adapters) {
    // Different shapes: each adapter has its own layout.
    auto added =
        (*publisher)->add_adapter(a.name, lora_layout(o.layers, o.hidden, o.rank * static_cast<int>(a.id)));
    if (!added.ok()) return std::fprintf(stderr, "%s\n", added.status().to_string().c_str()), 1;
    pubs.push_back(*added);
    for (int step = 1; step <= o.steps; ++step) {
      if (step % a.every == 0) a.last = static_cast<std::uint64_t>(step);
    }
  }
  std::printf("serving %zu adapters at %s\n", adapters.size(), (*publisher)->address().c_str());
  std::vector<std::string> reports(adapters.size());
  std::vector<char> ok(adapters.size(), 0);
  std::vector<std::thread> engines;
  for (std::size_t i = 0; i < adapters.size(); ++i) {
    engines.emplace_back(
        [&, i] { ok[i] = run_engine((*publisher)->address(), adapters[i], o, &reports[i]); });
  }
  // The trainer: each adapter's version number is the step that produced it.
  for (int step = 1; step <= o.steps; ++step) {
    for (std::size_t i = 0; i < adapters.size(); ++i) {
      if (step % adapters[i].every != 0) continue;
      auto writer = pubs[i]->begin_publish(static_cast<std::uint64_t>(step));
      if (!writer.ok()) return std::fprintf(stderr, "%s\n", writer.status().to_string().c_str()), 1;
      fill(writer->data(), writer->size(), adapters[i].id, static_cast<std::uint64_t>(step));
      if (auto c = writer->commit(); !c.ok())
        return std::fprintf(stderr, "%s\n", c.status().to_string().c_str()), 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // an optimizer step
  }
  for (auto& t : engines) t.join();
  bool all = true;
  for (std::size_t i = 0; i < adapters.size(); ++i) {
    std::printf("%s %s\n", ok[i] ? "ok  " : "FAIL", reports[i].c_str());
    all = all && ok[i];
  }
  return all ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Two LoRA adapters as their own versions behind one AdapterPublisher, one engine each."};
  Options o;
  app.add_option("--transport", o.transport, "shm or tcp")->check(CLI::IsMember({"shm", "tcp"}));
  app.add_option("--steps", o.steps, "trainer steps")->check(CLI::Range(3, 100000));
  app.add_option("--layers", o.layers, "layers with a q_proj adapter")->check(CLI::Range(1, 512));
  app.add_option("--hidden", o.hidden, "hidden size")->check(CLI::Range(8, 65536));
  app.add_option("--rank", o.rank, "LoRA rank of math-v2 (tool-use: twice it)")->check(CLI::Range(1, 1024));
  app.add_option("--timeout-s", o.timeout_s, "give up after this long")->check(CLI::Range(1, 3600));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
