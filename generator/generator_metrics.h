// generator/generator_metrics.h: the generator's objects on a Prometheus
// /metrics endpoint (weightsync/metrics.h), kept in step as reconnects
// replace them.
//
// Contract
// - Built over an endpoint the caller owns (nullptr: every call does
//   nothing), which must outlive this object.
// - track_*(p) makes p the one source of its kind: the previous one is
//   removed first (remove() returns once no scrape reads it), so call
//   track_*(nullptr) BEFORE destroying or replacing a tracked object, and
//   track_*(new) after. Passing the tracked pointer again does nothing.
// - The destructor removes every tracked source: declare this object after
//   the objects it tracks, so it is destroyed before them.
// - Labels: the subscriber and the foreground pulls' blocked time under
//   source="generator"; the in-flight path (StagedUpdates: its installs'
//   blocked time and its subscriber) under source="generator-inflight", so
//   no series is exposed twice; a --relay generator's relay under "relay".
// - count_blocked(): time generation stood still for a foreground pull
//   (weightsync_generation_blocked_seconds_total{source="generator"}).
// - Threads: one thread (the generator's loop); scrapes run on the
//   endpoint's own threads.
#pragma once

#include "weightsync/metrics.h"

namespace weightsync {
class Relay;
class StagedUpdates;
class Subscriber;
}  // namespace weightsync

namespace generator {

class GeneratorMetrics {
 public:
  explicit GeneratorMetrics(weightsync::MetricsEndpoint* endpoint) : endpoint_(endpoint) {}
  ~GeneratorMetrics();
  GeneratorMetrics(const GeneratorMetrics&) = delete;
  GeneratorMetrics& operator=(const GeneratorMetrics&) = delete;

  void track_subscriber(const weightsync::Subscriber* subscriber);
  void track_staged(const weightsync::StagedUpdates* staged);
  void track_relay(const weightsync::Relay* relay);
  void count_blocked(double seconds);

 private:
  struct Tracked {
    const void* object = nullptr;
    weightsync::MetricsSourceId id = 0;
  };
  // Removes what `slot` tracks; then, if `object` is set, `add()` registers it.
  template <typename Add>
  void retrack(Tracked& slot, const void* object, Add add);

  weightsync::MetricsEndpoint* endpoint_;
  Tracked subscriber_, staged_, relay_;
};

}  // namespace generator
