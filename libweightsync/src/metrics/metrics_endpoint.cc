// metrics_endpoint.cc: MetricsEndpoint over prometheus-cpp's exposition: a
// Collectable that reads the registered sources' stats() at scrape time,
// serialized by prometheus-cpp and served by libmicrohttpd with bounded
// threads, connections and timeouts (metrics/http_server.h says why not
// prometheus-cpp's own civetweb server).
#include "weightsync/metrics.h"

#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include "metrics/endpoint_address.h"
#include "metrics/http_server.h"
#include "metrics/metric_families.h"
#include "weightsync/publisher.h"
#include "weightsync/relay.h"
#include "weightsync/staged_updates.h"
#include "weightsync/subscriber.h"
#include "weightsync/subscriber_group.h"

namespace weightsync {
namespace {

using Reader = std::function<void(detail::FamilySet&)>;

// The sources, read under one mutex by each scrape (the server's threads).
class SourceCollector final : public prometheus::Collectable {
 public:
  MetricsSourceId add(Reader reader) {
    std::lock_guard<std::mutex> lock(mu_);
    const MetricsSourceId id = next_id_++;
    readers_.emplace(id, std::move(reader));
    return id;
  }
  void remove(MetricsSourceId id) {
    std::lock_guard<std::mutex> lock(mu_);
    readers_.erase(id);
  }
  void count_blocked(const std::string& source, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& b = blocked_[source];
    b.first += seconds > 0 ? seconds : 0.0;
    ++b.second;
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    try {
      detail::FamilySet set;
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& entry : readers_) entry.second(set);
      for (const auto& [source, b] : blocked_)
        detail::collect_generation_blocked(set, source, b.first, b.second);
      return set.take();
    } catch (const std::exception&) {
      return {};  // out of memory mid-scrape: an empty scrape, never a throw into the server
    }
  }

 private:
  mutable std::mutex mu_;
  MetricsSourceId next_id_ = 1;
  std::map<MetricsSourceId, Reader> readers_;
  std::map<std::string, std::pair<double, std::uint64_t>> blocked_;
};

}  // namespace

class MetricsEndpoint::Impl {
 public:
  std::shared_ptr<SourceCollector> collector = std::make_shared<SourceCollector>();
  // After the collector: stopped (threads joined) before it goes. Null: scrape() only.
  std::unique_ptr<detail::MetricsHttpServer> server;
  std::string address;
};

bool metrics_available() noexcept {
  return true;
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsEndpoint::~MetricsEndpoint() {
  if (impl_ && impl_->server) impl_->server.reset();  // joins the server's threads before the collector goes
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(MetricsOptions options) try {
  auto impl = std::make_unique<Impl>();
  if (!options.address.empty()) {
    auto bind = detail::parse_metrics_address(options.address);
    if (!bind.ok()) return bind.status();
    if (options.threads == 0 || options.threads > 64 || options.queue == 0 || options.queue > 1024 ||
        options.request_timeout.count() <= 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "MetricsOptions: threads must be 1..64, queue 1..1024 and request_timeout positive");
    }
    std::shared_ptr<SourceCollector> collector = impl->collector;
    auto server = detail::MetricsHttpServer::start(*bind, options, [collector]() -> std::string {
      try {
        std::ostringstream out;
        prometheus::TextSerializer().Serialize(out, collector->Collect());
        return out.str();
      } catch (const std::exception&) {
        return std::string();  // out of memory: an empty scrape, never a throw into the server
      }
    });
    if (!server.ok()) return server.status();
    impl->server = std::move(server).value();
    impl->address = bind->host + ":" + std::to_string(impl->server->port());
  }
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("MetricsEndpoint::start: ") + e.what());
}

std::string MetricsEndpoint::address() const {
  return impl_->address;
}

MetricsSourceId MetricsEndpoint::add_publisher(const Publisher& publisher, const std::string& source) try {
  return impl_->collector->add([&publisher, source](detail::FamilySet& out) {
    detail::collect_publisher(out, source, publisher.stats(), publisher.latest_version());
  });
} catch (const std::exception&) {
  return 0;
}

MetricsSourceId MetricsEndpoint::add_subscriber(const Subscriber& subscriber, const std::string& source) try {
  const std::string transport = subscriber.transport();
  return impl_->collector->add([&subscriber, source, transport](detail::FamilySet& out) {
    detail::collect_subscriber(out, {{"source", source}}, transport, subscriber.stats_snapshot());
  });
} catch (const std::exception&) {
  return 0;
}

MetricsSourceId MetricsEndpoint::add_subscriber_group(SubscriberGroup& group, const std::string& source) try {
  std::vector<std::pair<const Subscriber*, std::string>> members;
  for (std::size_t r = 0; r < group.size(); ++r)
    members.emplace_back(&group.member(r), group.member(r).transport());
  return impl_->collector->add([members, source](detail::FamilySet& out) {
    for (std::size_t r = 0; r < members.size(); ++r) {
      detail::collect_subscriber(out, {{"source", source}, {"rank", std::to_string(r)}}, members[r].second,
                                 members[r].first->stats_snapshot());
    }
  });
} catch (const std::exception&) {
  return 0;
}

MetricsSourceId MetricsEndpoint::add_relay(const Relay& relay, const std::string& source) try {
  return impl_->collector->add(
      [&relay, source](detail::FamilySet& out) { detail::collect_relay(out, source, relay.stats()); });
} catch (const std::exception&) {
  return 0;
}

MetricsSourceId MetricsEndpoint::add_staged_updates(const StagedUpdates& staged,
                                                    const std::string& source) try {
  const std::string transport = staged.transport();
  return impl_->collector->add([&staged, source, transport](detail::FamilySet& out) {
    const StagedUpdatesStats s = staged.stats();
    detail::collect_staged(out, source, s);
    detail::collect_subscriber(out, {{"source", source}}, transport, s.subscriber);
  });
} catch (const std::exception&) {
  return 0;
}

void MetricsEndpoint::remove(MetricsSourceId id) {
  impl_->collector->remove(id);
}

void MetricsEndpoint::count_generation_blocked(double seconds, const std::string& source) try {
  impl_->collector->count_blocked(source, seconds);
} catch (const std::exception&) {
  // out of memory for a new source label: this pause goes uncounted
}

std::string MetricsEndpoint::scrape() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, impl_->collector->Collect());
  return out.str();
}

}  // namespace weightsync
