// metrics_unavailable.cc: MetricsEndpoint in a build without prometheus-cpp
// (WEIGHTSYNC_WITH_METRICS=OFF or prometheus-cpp-dev absent): start() says
// so; no endpoint can exist, so the other members are never reached.
#include "weightsync/metrics.h"

namespace weightsync {

class MetricsEndpoint::Impl {};

bool metrics_available() noexcept {
  return false;
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsEndpoint::~MetricsEndpoint() = default;

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(MetricsOptions) {
  return Status(ErrorCode::kInvalidConfig,
                "this libweightsync was built without metrics: install prometheus-cpp-dev and configure with "
                "WEIGHTSYNC_WITH_METRICS=AUTO or ON");
}

std::string MetricsEndpoint::address() const {
  return std::string();
}
MetricsSourceId MetricsEndpoint::add_publisher(const Publisher&, const std::string&) {
  return 0;
}
MetricsSourceId MetricsEndpoint::add_subscriber(const Subscriber&, const std::string&) {
  return 0;
}
MetricsSourceId MetricsEndpoint::add_subscriber_group(SubscriberGroup&, const std::string&) {
  return 0;
}
MetricsSourceId MetricsEndpoint::add_relay(const Relay&, const std::string&) {
  return 0;
}
MetricsSourceId MetricsEndpoint::add_staged_updates(const StagedUpdates&, const std::string&) {
  return 0;
}
void MetricsEndpoint::remove(MetricsSourceId) {}
void MetricsEndpoint::count_generation_blocked(double, const std::string&) {}
std::string MetricsEndpoint::scrape() const {
  return std::string();
}

}  // namespace weightsync
