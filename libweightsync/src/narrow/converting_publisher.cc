// ConvertingPublisher: two staging buffers of the source image filled on the
// caller's thread, one converter thread that turns the newest staged version
// into a slot of the target Publisher (narrow/converting_publisher.h has the
// contract; NarrowingPublisher and Fp8Publisher are made of it).
#include "narrow/converting_publisher.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/log.h"
#include "narrow/narrowing_hooks.h"
#include "weightsync/memory.h"

namespace weightsync {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::mutex g_hook_mu;
detail::NarrowingConvertHook g_hook;

}  // namespace

namespace detail {

void set_narrowing_convert_hook(NarrowingConvertHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_hook = std::move(hook);
}

NarrowingConvertHook narrowing_convert_hook() {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  return g_hook;
}

class ConvertingPublisher::State {
 public:
  State(std::string n, WeightLayout w, Converter c) : name(std::move(n)), wide(std::move(w)), convert_fn(std::move(c)) {}

  ~State() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop.store(true);
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }

  void run() noexcept;
  // One version from staging buffer `index` into a slot; called unlocked.
  void convert(int index, std::uint64_t version);

  const std::string name;
  const WeightLayout wide;
  const Converter convert_fn;
  std::unique_ptr<Publisher> publisher;
  HostBuffer staging[2];

  mutable std::mutex mu;
  std::condition_variable cv;  // pending / converting / stop changed
  std::uint64_t staged_version[2] = {0, 0};
  int pending = -1;     // staging buffer holding a version that waits for the converter
  int converting = -1;  // staging buffer the converter reads
  std::uint64_t last_handed = 0;
  std::optional<Status> error;  // the converter's first unreported error
  std::optional<PublishResult> last_result;
  NarrowingStats counters;
  std::atomic<bool> stop{false};
  std::thread thread;  // last: started once everything above exists
};

void ConvertingPublisher::State::run() noexcept {
  for (;;) {
    int index = -1;
    std::uint64_t version = 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop.load() || pending != -1; });
      if (stop.load()) {
        if (pending != -1) ++counters.versions_skipped;
        pending = -1;
        return;
      }
      index = pending;
      version = staged_version[index];
      pending = -1;
      converting = index;
    }
    try {
      convert(index, version);
    } catch (const std::exception& e) {
      WS_ERROR("{}: converting version {} failed: {}", name, version, e.what());
      std::lock_guard<std::mutex> lock(mu);
      ++counters.versions_failed;
      if (!error)
        error =
            Status(ErrorCode::kInternal, "converting version " + std::to_string(version) + ": " + e.what());
    } catch (...) {
      WS_ERROR("{}: converting version {} failed with an unknown exception", name, version);
      std::lock_guard<std::mutex> lock(mu);
      ++counters.versions_failed;
      if (!error)
        error = Status(ErrorCode::kInternal, "converting version " + std::to_string(version) + " failed");
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      converting = -1;
    }
    cv.notify_all();
  }
}

void ConvertingPublisher::State::convert(int index, std::uint64_t version) {
  if (const detail::NarrowingConvertHook hook = detail::narrowing_convert_hook()) hook(version);
  const auto start = Clock::now();
  Status failure;
  std::optional<PublishResult> committed;
  bool stopped = false;
  auto writer = publisher->begin_publish(version);
  if (!writer.ok()) {
    failure = writer.status();
  } else if (!convert_fn(staging[index].data(), writer->data(), &stop)) {
    stopped = true;  // the writer abandons the slot when it goes
  } else {
    auto result = writer->commit();
    if (result.ok()) {
      committed = result.value();
    } else {
      failure = result.status();
    }
  }
  const double seconds = seconds_since(start);
  std::lock_guard<std::mutex> lock(mu);
  if (stopped) {
    ++counters.versions_skipped;
  } else if (committed) {
    ++counters.versions_converted;
    counters.conversion_seconds += seconds;
    counters.last_conversion_seconds = seconds;
    counters.last_committed_version = version;
    last_result = committed;
  } else {
    ++counters.versions_failed;
    if (!error) {
      error = Status(failure.code(), "version " + std::to_string(version) +
                                         " was not published by the converter thread: " + failure.message());
    }
  }
}

ConvertingPublisher::ConvertingPublisher(std::unique_ptr<State> state) : state_(std::move(state)) {}

ConvertingPublisher::~ConvertingPublisher() = default;

Result<std::unique_ptr<ConvertingPublisher>> ConvertingPublisher::create(std::string name, const WeightLayout& source,
                                                                         WeightLayout target, Converter convert,
                                                                         PublisherOptions options) {
  if (options.slot_memory != MemoryKind::kHost) {
    return Status(ErrorCode::kInvalidConfig,
                  name + " converts on the host: its slots must be host memory (slot_memory kHost), not " +
                      std::string(to_string(options.slot_memory)));
  }
  auto state = std::make_unique<State>(name, source, std::move(convert));
  auto publisher = Publisher::create(std::move(target), std::move(options));
  if (!publisher.ok()) return publisher.status();
  state->publisher = std::move(publisher).value();
  for (HostBuffer& buffer : state->staging) {
    auto allocated = HostBuffer::allocate(source.total_bytes());
    if (!allocated.ok()) {
      return Status(allocated.status().code(),
                    name + ": the float32 staging buffer: " + allocated.status().message());
    }
    buffer = std::move(allocated).value();
  }
  State* raw = state.get();
  state->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<ConvertingPublisher>(new ConvertingPublisher(std::move(state)));
}

Result<NarrowHandoff> ConvertingPublisher::publish(std::uint64_t version, const void* wide_image,
                                                   std::size_t bytes) {
  State& s = *state_;
  if (wide_image == nullptr || bytes != s.wide.total_bytes()) {
    return Status(ErrorCode::kInvalidArgument,
                  s.name + "::publish(): the image has " + std::to_string(bytes) +
                      " bytes; the wide layout's region is " + std::to_string(s.wide.total_bytes()));
  }
  NarrowHandoff handoff;
  handoff.version = version;
  int target = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.error) {
      Status failed = std::move(*s.error);
      s.error.reset();
      return Status(failed.code(), failed.message() + " (version " + std::to_string(version) +
                                       " was not handed over: publish it again)");
    }
    if (version <= s.last_handed) {
      return Status(ErrorCode::kInvalidArgument, s.name + "::publish(): version " +
                                                     std::to_string(version) + " is not greater than " +
                                                     std::to_string(s.last_handed) + ", handed over before");
    }
    // A version still waiting is replaced (newest wins); otherwise the
    // buffer the converter is not reading.
    if (s.pending != -1) {
      target = s.pending;
      handoff.replaced_version = s.staged_version[target];
      ++s.counters.versions_skipped;
      s.pending = -1;
    } else {
      target = s.converting == 0 ? 1 : 0;
    }
    s.last_handed = version;
  }
  const auto start = Clock::now();
  std::memcpy(s.staging[target].data(), wide_image, bytes);
  handoff.copy_seconds = seconds_since(start);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.staged_version[target] = version;
    s.pending = target;
    ++s.counters.versions_handed_over;
  }
  s.cv.notify_all();
  return handoff;
}

Result<PublishResult> ConvertingPublisher::flush(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.cv.wait_for(lock, timeout, [&] { return s.pending == -1 && s.converting == -1; })) {
    return Status(ErrorCode::kTimeout, s.name + "::flush(): version " + std::to_string(s.last_handed) +
                                           " is not converted after " + std::to_string(timeout.count()) +
                                           " ms; flush again");
  }
  if (s.error) {
    Status failed = std::move(*s.error);
    s.error.reset();
    return failed;
  }
  if (!s.last_result) {
    return Status(ErrorCode::kNotReady, s.name + "::flush(): no version was committed yet");
  }
  return *s.last_result;
}

const WeightLayout& ConvertingPublisher::source_layout() const noexcept {
  return state_->wide;
}

Publisher& ConvertingPublisher::publisher() noexcept {
  return *state_->publisher;
}

NarrowingStats ConvertingPublisher::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counters;
}

}  // namespace detail
}  // namespace weightsync
