// generator/staged_policy.h: the policy of an async generator whose weights
// never stop generation: a background pull stages each new version into a
// buffer the library owns (weightsync::StagedUpdates, two buffers swapped),
// and the generator installs it at a token boundary (policy::StepHook), so
// sequences in flight continue under the new weights.
//
// Contract
// - create() takes a connected Subscriber whose layout is the policy's own
//   float32 layout (a narrowed wire goes through the foreground path:
//   loop::PolicyPullTarget) and the generator's starting model (its config
//   and device). It allocates the two buffers once (host memory, or device
//   memory for a CUDA model) and wraps a Transformer over each.
// - model() is the model over the live buffer, and version() its version;
//   before the first install, the starting model and 0.
// - install_if_staged() installs a staged version if there is one: a swap,
//   microseconds (for a CUDA model after the device has finished the work
//   queued on the old buffer). It logs an "install" metrics event (the pause,
//   the background pull's own time, bytes, transport) and a "blocked"
//   timeline span, and never waits for the network. hook() does the same at
//   every token boundary and returns the model and version to sample with.
// - wait_and_install() waits up to `wait` for a staged version (the first
//   round, or sync-like waits) and installs it.
// - A failed background pull never reaches the live weights: generation goes
//   on with the version installed. A lost connection shows in status();
//   reconnect() brings a new Subscriber (the generator's loop calls it at a
//   round boundary) and the next version installed is that trainer's newest,
//   even one older than the live version (a trainer resumed from a checkpoint).
// - Threads: the generator's thread for everything; StagedUpdates runs its
//   own background pull thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "loop/run_log.h"
#include "policy/sampling.h"
#include "policy/transformer.h"
#include "weightsync/staged_updates.h"
#include "zorplex/result.h"

namespace generator {

class StagedPolicy {
 public:
  static zorplex::Result<std::unique_ptr<StagedPolicy>> create(
      std::unique_ptr<weightsync::Subscriber> subscriber, const policy::Transformer& starting_model,
      std::uint32_t generator_id, loop::JsonlFile* metrics, loop::Timeline* timeline);

  const policy::Transformer& model() const;
  std::uint64_t version() const { return staged_->live_version(); }
  // The newest version known here: staged, or else live.
  std::uint64_t newest_known() const;

  zorplex::Result<bool> install_if_staged();
  zorplex::Result<bool> wait_and_install(std::chrono::milliseconds wait);
  policy::StepHook hook();

  weightsync::Status status() const { return staged_->status(); }
  weightsync::Status reconnect(std::unique_ptr<weightsync::Subscriber> subscriber);
  std::string transport() const { return staged_->transport(); }
  weightsync::StagedUpdatesStats stats() const { return staged_->stats(); }
  // For the /metrics endpoint (lives as long as this object; reconnect() keeps it).
  const weightsync::StagedUpdates& updates() const { return *staged_; }

 private:
  StagedPolicy() = default;
  void log_install(const weightsync::InstallResult& installed, double end);

  std::unique_ptr<weightsync::StagedUpdates> staged_;
  const policy::Transformer* starting_ = nullptr;
  std::unique_ptr<policy::Transformer> over_buffer_[2];  // a model over each library buffer
  bool cuda_ = false;
  std::uint32_t id_ = 0;
  loop::JsonlFile* metrics_ = nullptr;
  loop::Timeline* timeline_ = nullptr;
};

}  // namespace generator
