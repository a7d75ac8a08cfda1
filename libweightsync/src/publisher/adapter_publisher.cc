// AdapterPublisher (weightsync/adapter_publisher.h): one server, an optional
// base model as its default stream, and one serverless publisher core per
// adapter, served as a named stream (publisher/stream_table.h).
#include "weightsync/adapter_publisher.h"

#include <map>
#include <mutex>

#include "common/log.h"
#include "net/socket.h"
#include "publisher/publisher_core.h"
#include "publisher/publisher_settings.h"
#include "wire/stream_messages.h"

namespace weightsync {

namespace {
constexpr std::size_t kMostAdapters = 1024;
}  // namespace

struct AdapterPublisher::State {
  AdapterPublisherOptions options;
  std::unique_ptr<Publisher> base;                      // owns the server when there is a base
  std::unique_ptr<detail::PublisherServer> own_server;  // the server without a base
  detail::PublisherServer* server = nullptr;
  std::string bind_host;
  std::uint16_t port = 0;
  mutable std::mutex mu;
  std::map<std::string, std::shared_ptr<Publisher>> adapters;  // also held by their streams

  ~State() {
    server->stop();  // no connection holds an adapter now; the server's table frees them
    adapters.clear();
  }
};

AdapterPublisher::AdapterPublisher(std::unique_ptr<State> state) : state_(std::move(state)) {}
AdapterPublisher::~AdapterPublisher() = default;

Result<std::unique_ptr<AdapterPublisher>> AdapterPublisher::create(AdapterPublisherOptions options,
                                                                   std::optional<WeightLayout> base) try {
  if (options.max_adapters == 0 || options.max_adapters > kMostAdapters) {
    return Status(ErrorCode::kInvalidArgument, "max_adapters must be 1.." + std::to_string(kMostAdapters) +
                                                   ", not " + std::to_string(options.max_adapters));
  }
  if (options.max_adapter_bytes == 0)
    return Status(ErrorCode::kInvalidArgument, "max_adapter_bytes must be > 0");
  auto state = std::make_unique<State>();
  state->options = options;
  if (base) {
    auto core = Publisher::Impl::create(std::move(*base), options.publisher,
                                        Publisher::Impl::Serving{options.max_adapters, nullptr});
    if (!core.ok()) return core.status();
    state->server = (*core)->server.get();
    state->bind_host = (*core)->bind_host;
    state->port = (*core)->port;
    state->base.reset(new Publisher(std::move(*core)));
  } else {
    auto resolved = detail::resolve_publisher_settings(options.publisher);
    if (!resolved.ok()) return resolved.status();
    auto listener = detail::listen_tcp(resolved->bind_address.value, options.publisher.port);
    if (!listener.ok()) return listener.status();
    auto bound = detail::local_port(*listener);
    if (!bound.ok()) return bound.status();
    detail::ServerConfig config = detail::server_config(*resolved, options.publisher);
    config.max_streams = options.max_adapters;
    auto server = detail::PublisherServer::start(std::move(*listener), config, detail::ServedState{});
    if (!server.ok()) return server.status();
    state->own_server = std::move(*server);
    state->server = state->own_server.get();
    state->bind_host = resolved->bind_address.value;
    state->port = *bound;
    if (resolved->secret.value.empty()) {
      WS_WARN("publisher: no secret configured (WEIGHTSYNC_SECRET): adapters on loopback {} only", state->bind_host);
    }
  }
  return std::unique_ptr<AdapterPublisher>(new AdapterPublisher(std::move(state)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("AdapterPublisher::create: ") + e.what());
}

std::string AdapterPublisher::address() const {
  return detail::HostPort{state_->bind_host, state_->port}.to_string();
}

std::uint16_t AdapterPublisher::port() const noexcept {
  return state_->port;
}

Publisher* AdapterPublisher::base() noexcept {
  return state_->base.get();
}

Result<Publisher*> AdapterPublisher::add_adapter(const std::string& name, WeightLayout layout) try {
  if (std::string why = detail::stream_name_problem(name); !why.empty()) {
    return Status(ErrorCode::kInvalidArgument, why);
  }
  if (layout.total_bytes() > state_->options.max_adapter_bytes) {
    return Status(ErrorCode::kInvalidArgument, "adapter '" + name + "' has " +
                                                   std::to_string(layout.total_bytes()) +
                                                   " bytes, over max_adapter_bytes (" +
                                                   std::to_string(state_->options.max_adapter_bytes) + ")");
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->adapters.count(name) != 0) {
    return Status(ErrorCode::kInvalidArgument, "an adapter named '" + name + "' is already served");
  }
  if (state_->adapters.size() >= state_->options.max_adapters) {
    return Status(ErrorCode::kBusy, "already " + std::to_string(state_->adapters.size()) +
                                        " adapters served (max_adapters); remove one first");
  }
  // Its own ring, transports and commit threads, answered by the one server.
  auto core = Publisher::Impl::create(std::move(layout), state_->options.publisher,
                                      Publisher::Impl::Serving{0, state_->server});
  if (!core.ok()) return core.status();
  (*core)->bind_host = state_->bind_host;
  (*core)->port = state_->port;
  std::shared_ptr<Publisher> publisher(new Publisher(std::move(*core)));
  auto stream = std::make_shared<detail::ServedStream>();
  stream->name = name;
  stream->state = publisher->impl_->served;
  stream->owner = publisher;
  if (Status s = state_->server->add_stream(std::move(stream)); !s.ok()) return s;
  state_->adapters[name] = publisher;
  WS_INFO("publisher: serving adapter '{}' ({} bytes) at {}", name, publisher->layout().total_bytes(),
          address());
  return publisher.get();
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("AdapterPublisher::add_adapter: ") + e.what());
}

Publisher* AdapterPublisher::adapter(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->adapters.find(name);
  return it == state_->adapters.end() ? nullptr : it->second.get();
}

Status AdapterPublisher::remove_adapter(const std::string& name) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->adapters.find(name);
  if (it == state_->adapters.end())
    return Status(ErrorCode::kInvalidArgument, "no adapter named '" + name + "'");
  Status removed = state_->server->remove_stream(name);
  state_->adapters.erase(it);  // its sessions still hold it until they close
  return removed;
}

std::vector<std::string> AdapterPublisher::adapter_names() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<std::string> out;
  for (const auto& [name, publisher] : state_->adapters) out.push_back(name);
  return out;
}

}  // namespace weightsync
