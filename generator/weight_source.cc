#include "generator/weight_source.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

namespace generator {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

std::vector<std::string> split_addresses(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

WeightSource::WeightSource(WeightSourceOptions options) : options_(std::move(options)) {}

WeightSource::~WeightSource() = default;

std::string WeightSource::describe() const {
  if (!relaying()) {
    return options_.upstreams.size() == 1 ? "the trainer at " + options_.upstreams.front()
                                          : "the sources " + joined(options_.upstreams);
  }
  const std::string at = relay_ ? relay_->address() : options_.relay_bind;
  return "its relay at " + at + " (upstreams " + joined(options_.upstreams) + ")";
}

weightsync::Status WeightSource::start_relay() {
  weightsync::RelayOptions relay;
  relay.upstreams = options_.upstreams;
  relay.subscriber = options_.subscriber;
  relay.subscriber.client_name = options_.subscriber.client_name + "-relay";
  relay.publisher.secret = options_.subscriber.secret;
  const std::string& bind = options_.relay_bind;
  const auto colon = bind.rfind(':');
  if (colon == std::string::npos) {
    relay.publisher.bind_address = bind;
  } else {
    relay.publisher.bind_address = bind.substr(0, colon);
    const std::string port = bind.substr(colon + 1);
    char* end = nullptr;
    const unsigned long value = std::strtoul(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || value > 65535) {
      return weightsync::Status(weightsync::ErrorCode::kInvalidConfig,
                                "--relay '" + bind + "': the port must be a number from 0 to 65535");
    }
    relay.publisher.port = static_cast<std::uint16_t>(value);
  }
  auto created = weightsync::Relay::create(std::move(relay));
  if (!created.ok()) return created.status();
  relay_ = std::move(created).value();
  if (!options_.relay_address_file.empty()) {
    const std::string tmp = options_.relay_address_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << relay_->address() << "\n";
      if (!out) {
        return weightsync::Status(weightsync::ErrorCode::kInvalidConfig,
                                  "cannot write the relay's address to " + tmp);
      }
    }
    if (std::rename(tmp.c_str(), options_.relay_address_file.c_str()) != 0) {
      return weightsync::Status(weightsync::ErrorCode::kInvalidConfig,
                                "cannot rename " + tmp + " to " + options_.relay_address_file);
    }
  }
  return weightsync::Status();
}

weightsync::Result<std::unique_ptr<weightsync::Subscriber>> WeightSource::connect() {
  if (options_.upstreams.empty()) {
    return weightsync::Status(weightsync::ErrorCode::kInvalidConfig, "no --trainer address given");
  }
  if (relaying()) {
    if (relay_ && !relay_->stats().running) relay_.reset();
    if (!relay_) {
      weightsync::Status started = start_relay();
      if (!started.ok()) return started;
    }
    return weightsync::Subscriber::connect(relay_->address(), options_.subscriber);
  }
  weightsync::Status last;
  for (const std::string& address : options_.upstreams) {
    auto subscriber = weightsync::Subscriber::connect(address, options_.subscriber);
    if (subscriber.ok()) return subscriber;
    last = subscriber.status();
    if (last.action() == weightsync::Action::kFixConfiguration || last.action() == weightsync::Action::kFixCall) {
      return weightsync::Status(last.code(), address + ": " + last.message());
    }
  }
  return last;
}

}  // namespace generator
