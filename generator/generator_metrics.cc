// The generator's sources on the /metrics endpoint (generator_metrics.h).
#include "generator/generator_metrics.h"

namespace generator {

GeneratorMetrics::~GeneratorMetrics() {
  track_subscriber(nullptr);
  track_staged(nullptr);
  track_relay(nullptr);
}

template <typename Add>
void GeneratorMetrics::retrack(Tracked& slot, const void* object, Add add) {
  if (endpoint_ == nullptr || slot.object == object) return;
  if (slot.id != 0) endpoint_->remove(slot.id);
  slot = Tracked{};
  if (object == nullptr) return;
  slot.object = object;
  slot.id = add();
}

void GeneratorMetrics::track_subscriber(const weightsync::Subscriber* subscriber) {
  retrack(subscriber_, subscriber, [&] { return endpoint_->add_subscriber(*subscriber, "generator"); });
}

void GeneratorMetrics::track_staged(const weightsync::StagedUpdates* staged) {
  retrack(staged_, staged, [&] { return endpoint_->add_staged_updates(*staged, "generator-inflight"); });
}

void GeneratorMetrics::track_relay(const weightsync::Relay* relay) {
  retrack(relay_, relay, [&] { return endpoint_->add_relay(*relay, "relay"); });
}

void GeneratorMetrics::count_blocked(double seconds) {
  if (endpoint_ != nullptr && seconds > 0.0) endpoint_->count_generation_blocked(seconds, "generator");
}

}  // namespace generator
