// channel/group_channel.cc: see group_channel.h.
#include "channel/group_channel.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <zmq.hpp>

#include "channel/group_codec.h"

namespace channel {

std::string payload_mac(const std::string& secret, const std::string& payload) {
  if (secret.empty()) return "";
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

struct GroupSender::Impl {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::push};
  ChannelOptions options;
};

GroupSender::GroupSender(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GroupSender::~GroupSender() = default;

zorplex::Result<std::unique_ptr<GroupSender>> GroupSender::connect(const std::string& endpoint,
                                                                   const ChannelOptions& options) try {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->socket.set(zmq::sockopt::linger, 0);
  impl->socket.set(zmq::sockopt::sndhwm, options.high_water_mark);
  impl->socket.set(zmq::sockopt::sndtimeo, static_cast<int>(options.send_timeout.count()));
  impl->socket.connect(endpoint);
  return std::unique_ptr<GroupSender>(new GroupSender(std::move(impl)));
} catch (const zmq::error_t& e) {
  return zorplex::Error{"trajectory channel: cannot connect to " + endpoint + ": " + e.what()};
}

zorplex::Result<bool> GroupSender::send_frames(const std::string& mac, const std::string& payload) try {
  // The first frame is sent only once the whole message can be queued: ZeroMQ
  // queues multipart messages atomically, so a timeout here sends nothing.
  auto first = impl_->socket.send(zmq::buffer(mac), zmq::send_flags::sndmore);
  if (!first) return false;
  auto second = impl_->socket.send(zmq::buffer(payload), zmq::send_flags::none);
  return second.has_value();
} catch (const zmq::error_t& e) {
  return zorplex::Error{std::string("trajectory channel: send failed: ") + e.what()};
}

zorplex::Result<bool> GroupSender::send(const algorithms::TrajectoryGroup& group) {
  const std::string payload = encode_group(group);
  return send_frames(payload_mac(impl_->options.secret, payload), payload);
}

struct GroupReceiver::Impl {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::pull};
  ChannelOptions options;
  std::string endpoint;
  ReceiverCounters counters;
};

GroupReceiver::GroupReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GroupReceiver::~GroupReceiver() = default;

zorplex::Result<std::unique_ptr<GroupReceiver>> GroupReceiver::bind(const std::string& endpoint,
                                                                    const ChannelOptions& options) try {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->socket.set(zmq::sockopt::linger, 0);
  impl->socket.set(zmq::sockopt::rcvhwm, options.high_water_mark);
  // A message larger than this is refused by ZeroMQ before it is buffered.
  impl->socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(256) << 20);
  impl->socket.bind(endpoint);
  impl->endpoint = impl->socket.get(zmq::sockopt::last_endpoint);
  return std::unique_ptr<GroupReceiver>(new GroupReceiver(std::move(impl)));
} catch (const zmq::error_t& e) {
  return zorplex::Error{"trajectory channel: cannot bind " + endpoint + ": " + e.what() +
                        " (is another trainer running on that port?)"};
}

const std::string& GroupReceiver::endpoint() const {
  return impl_->endpoint;
}

const ReceiverCounters& GroupReceiver::counters() const {
  return impl_->counters;
}

std::optional<zorplex::Result<algorithms::TrajectoryGroup>> GroupReceiver::receive(
    std::chrono::milliseconds timeout) try {
  zmq::pollitem_t item{impl_->socket.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t frame;
    if (!impl_->socket.recv(frame, zmq::recv_flags::dontwait)) break;
    impl_->counters.bytes += frame.size();
    frames.push_back(std::move(frame));
  } while (frames.back().more());
  if (frames.size() != 2) {
    ++impl_->counters.rejected_malformed;
    return zorplex::Result<algorithms::TrajectoryGroup>(zorplex::Error{
        "trajectory channel: a message of " + std::to_string(frames.size()) + " frames, expected 2"});
  }
  const std::string mac = frames[0].to_string();
  const std::string payload = frames[1].to_string();
  const std::string expected = payload_mac(impl_->options.secret, payload);
  if (mac.size() != expected.size() || CRYPTO_memcmp(mac.data(), expected.data(), mac.size()) != 0) {
    ++impl_->counters.rejected_authentication;
    return zorplex::Result<algorithms::TrajectoryGroup>(
        zorplex::Error{impl_->options.secret.empty() ? "trajectory channel: a message carries a MAC but this "
                                                       "trainer has no secret (set the same secret "
                                                       "on both sides)"
                                                     : "trajectory channel: a message failed authentication "
                                                       "(wrong or missing secret on that generator)"});
  }
  auto group = decode_group(payload);
  if (!group) {
    ++impl_->counters.rejected_malformed;
    return zorplex::Result<algorithms::TrajectoryGroup>(group.error());
  }
  ++impl_->counters.received;
  return group;
} catch (const zmq::error_t& e) {
  ++impl_->counters.rejected_malformed;
  return zorplex::Result<algorithms::TrajectoryGroup>(
      zorplex::Error{std::string("trajectory channel: receive failed: ") + e.what()});
}

}  // namespace channel
