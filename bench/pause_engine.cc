// The trainer thread, the engine's read pass and the rows' update steps of
// `weightsync-bench pause` (pause_engine.h).
#include "pause_engine.h"

#include <cstring>
#include <utility>

#include "roles.h"

namespace wsbench {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// ---- the trainer ----

PauseTrainer::PauseTrainer(weightsync::Publisher& publisher, std::chrono::milliseconds interval)
    : publisher_(publisher), interval_(interval) {}

PauseTrainer::~PauseTrainer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

weightsync::Status PauseTrainer::publish(std::uint64_t version, bool whole) {
  auto writer = publisher_.begin_publish(version);
  if (!writer.ok()) return writer.status();
  // The first use of a slot writes it whole (a repeating byte per version);
  // later versions leave the bytes of an older one and rewrite the marks.
  if (whole) std::memset(writer->data(), static_cast<int>(version * 37 % 251), writer->size());
  mark_image(writer->data(), writer->size(), version);
  auto committed = writer->commit();
  if (!committed.ok()) return committed.status();
  published_.store(version);
  return weightsync::Status();
}

weightsync::Status PauseTrainer::fill_slots() {
  if (thread_.joinable()) return weightsync::Status(weightsync::ErrorCode::kInvalidArgument, "filled twice");
  for (std::size_t i = 0; i < publisher_.slot_count(); ++i) {
    if (auto s = publish(published_.load() + 1, true); !s.ok()) return s;
  }
  wanted_ = published_.load();
  last_publish_ = Clock::now();
  thread_ = std::thread([this] { run(); });  // publishes from here on
  return weightsync::Status();
}

void PauseTrainer::publish_next() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wanted_;
  }
  wake_.notify_all();
}

std::string PauseTrainer::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void PauseTrainer::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (error_.empty() && wanted_ > published_.load()); });
    if (stop_) return;
    const auto at = last_publish_ + interval_;
    if (Clock::now() < at) {
      wake_.wait_until(lock, at, [&] { return stop_; });
      if (stop_) return;
    }
    // Unlocked while publishing (a commit with checksums hashes the slot):
    // publish_next() never waits for it.
    std::string failed;
    lock.unlock();
    try {
      const weightsync::Status s = publish(published_.load() + 1, false);
      if (!s.ok()) failed = "the trainer could not publish: " + s.to_string();
    } catch (const std::exception& e) {
      failed = std::string("the trainer failed: ") + e.what();
    }
    lock.lock();
    last_publish_ = Clock::now();
    error_ = failed;
  }
}

// ---- the engine's read ----

std::uint64_t read_pass(const void* data, std::size_t bytes) {
  const auto* words = static_cast<const std::uint64_t*>(data);
  const std::size_t n = bytes / sizeof(std::uint64_t);
  std::uint64_t a = 0, b = 0, c = 0, d = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += words[i];
    b += words[i + 1];
    c += words[i + 2];
    d += words[i + 3];
  }
  for (; i < n; ++i) a += words[i];
  return a + b + c + d;
}

// ---- the update steps ----

namespace {

class ForegroundUpdater : public Updater {
 public:
  ForegroundUpdater(std::unique_ptr<weightsync::Subscriber> subscriber, weightsync::HostBuffer& live,
                    const PauseTrainer& trainer, std::chrono::seconds timeout)
      : subscriber_(std::move(subscriber)), live_(live), trainer_(trainer), timeout_(timeout) {
    auto plan = subscriber_->prepare(weightsync::Destination::contiguous(live_.data(), live_.size()));
    if (!plan.ok()) throw PauseError("prepare: " + plan.status().to_string());
    plan_ = *plan;
  }
  const void* live() const override { return live_.data(); }

  bool try_update(PauseSample* sample) override {
    if (trainer_.published() <= version_) return false;
    weightsync::PullOptions options;
    options.newer_than = version_;
    options.wait = timeout_;
    const auto start = Clock::now();
    auto pulled = subscriber_->pull(plan_, options);
    const double call_s = seconds_since(start);
    if (!pulled.ok()) throw PauseError("pull: " + pulled.status().to_string());
    version_ = pulled->version;
    sample->version = pulled->version;
    sample->blocked_s = call_s;
    sample->call_s = call_s;
    sample->pull_s = pulled->seconds;
    sample->pull_bytes = pulled->bytes;
    sample->retries = pulled->retries;
    return true;
  }

 private:
  std::unique_ptr<weightsync::Subscriber> subscriber_;
  weightsync::HostBuffer& live_;
  const PauseTrainer& trainer_;
  const std::chrono::seconds timeout_;
  weightsync::PullPlan plan_;
  std::uint64_t version_ = 0;
};

class StagedUpdater : public Updater {
 public:
  StagedUpdater(std::unique_ptr<weightsync::Subscriber> subscriber, weightsync::InstallMode mode,
                weightsync::HostBuffer* live, bool require_checksum) {
    weightsync::StagedUpdatesOptions options;
    options.mode = mode;
    options.deltas = false;  // every update moves the whole image
    options.require_checksum = require_checksum;
    if (mode == weightsync::InstallMode::kCopy) {
      options.live = weightsync::Destination::contiguous(live->data(), live->size());
    }
    auto staged = weightsync::StagedUpdates::create(std::move(subscriber), std::move(options));
    if (!staged.ok()) throw PauseError("StagedUpdates::create: " + staged.status().to_string());
    staged_ = std::move(*staged);
    // kSwap: no weights to read before the first install (an engine starts
    // from it; reading the never-written buffer would only map zero pages).
    if (mode == weightsync::InstallMode::kCopy) live_ = live->data();
  }
  const void* live() const override { return live_; }

  bool try_update(PauseSample* sample) override {
    if (staged_->staged_version() == 0) {
      if (auto s = staged_->status(); !s.ok())
        throw PauseError("the background pull stopped: " + s.to_string());
      return false;
    }
    const auto start = Clock::now();
    auto installed = staged_->install();
    const double call_s = seconds_since(start);
    if (!installed.ok()) {
      if (installed.status().code() == weightsync::ErrorCode::kNotReady) return false;
      throw PauseError("install: " + installed.status().to_string());
    }
    // kSwap: the staged buffer is live now; the old one is the library's again.
    if (staged_->mode() == weightsync::InstallMode::kSwap) live_ = staged_->live_data();
    sample->version = installed->version;
    sample->blocked_s = installed->blocked_seconds;
    sample->call_s = call_s;
    sample->pull_s = installed->pull.seconds;
    sample->pull_bytes = installed->pull.bytes;
    sample->staged_s = installed->staged_seconds;
    sample->retries = installed->pull.retries;
    return true;
  }

 private:
  std::unique_ptr<weightsync::StagedUpdates> staged_;
  const void* live_ = nullptr;
};

}  // namespace

std::unique_ptr<Updater> make_foreground_updater(std::unique_ptr<weightsync::Subscriber> subscriber,
                                                 weightsync::HostBuffer& live, const PauseTrainer& trainer,
                                                 std::chrono::seconds timeout) {
  return std::make_unique<ForegroundUpdater>(std::move(subscriber), live, trainer, timeout);
}

std::unique_ptr<Updater> make_staged_updater(std::unique_ptr<weightsync::Subscriber> subscriber,
                                             weightsync::InstallMode mode, weightsync::HostBuffer* live,
                                             bool require_checksum) {
  return std::make_unique<StagedUpdater>(std::move(subscriber), mode, live, require_checksum);
}

}  // namespace wsbench
