// channel/group_channel.cc: see group_channel.h.
#include "channel/group_channel.h"

#include <openssl/rand.h>

#include <cstring>
#include <map>
#include <utility>
#include <zmq.hpp>

#include "channel/channel_keys.h"
#include "channel/connection_guard.h"
#include "channel/group_codec.h"

namespace channel {
namespace {

constexpr char kMagic[4] = {'W', 'S', 'T', 'G'};
constexpr char kVersion = 1;
constexpr std::size_t kMaxSessions = 4096;
constexpr const char* kZapDomain = "weightsync-trajectories";

using GroupResult = zorplex::Result<algorithms::TrajectoryGroup>;

}  // namespace

std::string frame_message(const std::string& session, std::uint64_t sequence, std::string_view payload) {
  std::string frame(kMagic, sizeof kMagic);
  frame += kVersion;
  frame += session.substr(0, kSessionIdBytes);
  frame.resize(4 + 1 + kSessionIdBytes, '\0');
  for (int b = 0; b < 8; ++b) frame += static_cast<char>((sequence >> (8 * b)) & 0xff);
  frame.append(payload.data(), payload.size());
  return frame;
}

struct GroupSender::Impl {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::push};
  ChannelOptions options;
  std::string session;
  std::uint64_t next_sequence = 1;
};

GroupSender::GroupSender(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GroupSender::~GroupSender() = default;

zorplex::Result<std::unique_ptr<GroupSender>> GroupSender::connect(const std::string& endpoint,
                                                                   const ChannelOptions& options) try {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->session.assign(kSessionIdBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(impl->session.data()), kSessionIdBytes) != 1)
    return zorplex::Error{"trajectory channel: no random bytes for a session id"};
  impl->socket.set(zmq::sockopt::linger, 0);
  impl->socket.set(zmq::sockopt::sndhwm, options.high_water_mark);
  impl->socket.set(zmq::sockopt::sndtimeo, static_cast<int>(options.send_timeout.count()));
  if (!options.secret.empty()) {
    auto keys = derive_channel_keys(options.secret);
    if (!keys) return keys.error();
    impl->socket.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(keys.value().server_public.data(), 32));
    impl->socket.set(zmq::sockopt::curve_publickey, zmq::const_buffer(keys.value().client_public.data(), 32));
    impl->socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(keys.value().client_secret.data(), 32));
  }
  impl->socket.connect(endpoint);
  return std::unique_ptr<GroupSender>(new GroupSender(std::move(impl)));
} catch (const zmq::error_t& e) {
  return zorplex::Error{"trajectory channel: cannot connect to " + endpoint + ": " + e.what()};
}

const std::string& GroupSender::session() const {
  return impl_->session;
}

std::uint64_t GroupSender::next_sequence() const {
  return impl_->next_sequence;
}

zorplex::Result<bool> GroupSender::send_raw(std::string_view frame) try {
  return impl_->socket.send(zmq::buffer(frame.data(), frame.size()), zmq::send_flags::none).has_value();
} catch (const zmq::error_t& e) {
  return zorplex::Error{std::string("trajectory channel: send failed: ") + e.what()};
}

zorplex::Result<bool> GroupSender::send(const algorithms::TrajectoryGroup& group) {
  auto sent = send_raw(frame_message(impl_->session, impl_->next_sequence, encode_group(group)));
  if (sent.ok() && sent.value()) ++impl_->next_sequence;  // a frame not queued used no number
  return sent;
}

struct GroupReceiver::Impl {
  zmq::context_t context{1};
  // The guard outlives the socket (declared before it): ZeroMQ would admit
  // anyone to a socket whose context lost its ZAP handler.
  std::unique_ptr<ConnectionGuard> guard;
  zmq::socket_t socket{context, zmq::socket_type::pull};
  ChannelOptions options;
  std::string endpoint;
  ReceiverCounters counters;
  std::uint64_t refusals_reported = 0;
  std::chrono::steady_clock::time_point last_report{};
  // (generator, session) -> (highest sequence accepted, when last used).
  std::map<std::pair<std::uint32_t, std::string>, std::pair<std::uint64_t, std::uint64_t>> sessions;
  std::uint64_t clock = 0;

  GroupResult reject(std::uint64_t& counter, std::string why) {
    ++counter;
    return GroupResult(zorplex::Error{"trajectory channel: " + std::move(why)});
  }
  // New refusals as one Error, at most once a second unless `idle` (nothing
  // arrived), so that a stream of refusals cannot crowd out the messages.
  std::optional<GroupResult> refusal_report(bool idle) {
    const std::uint64_t refused = guard->refused();
    counters.rejected_connections = refused;
    const auto now = std::chrono::steady_clock::now();
    if (refused == refusals_reported || (!idle && now - last_report < std::chrono::seconds(1)))
      return std::nullopt;
    const std::uint64_t fresh_refusals = refused - refusals_reported;
    refusals_reported = refused;
    last_report = now;
    return GroupResult(zorplex::Error{"trajectory channel: refused " + std::to_string(fresh_refusals) +
                                      " connection(s), the last: " + guard->last_refusal()});
  }
  // true: `sequence` is new for this (generator, session); it is then recorded.
  bool fresh(std::uint32_t generator, const std::string& session, std::uint64_t sequence,
             std::uint64_t& last);
};

GroupReceiver::GroupReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GroupReceiver::~GroupReceiver() = default;

zorplex::Result<std::unique_ptr<GroupReceiver>> GroupReceiver::bind(const std::string& endpoint,
                                                                    const ChannelOptions& options) try {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->socket.set(zmq::sockopt::linger, 0);
  impl->socket.set(zmq::sockopt::rcvhwm, options.high_water_mark);
  impl->socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes));
  impl->socket.set(zmq::sockopt::zap_domain, kZapDomain);
  std::string client_key;
  if (!options.secret.empty()) {
    auto keys = derive_channel_keys(options.secret);
    if (!keys) return keys.error();
    client_key = keys.value().client_public;
    impl->socket.set(zmq::sockopt::curve_server, true);
    impl->socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(keys.value().server_secret.data(), 32));
  }
  // Before bind, so that the guard sees every connection from the first.
  const std::string monitor = "inproc://weightsync-trajectory-monitor";
  if (zmq_socket_monitor(impl->socket.handle(), monitor.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
    throw zmq::error_t();
  auto guard = ConnectionGuard::start(impl->context, client_key, monitor);
  if (!guard) return guard.error();
  impl->guard = std::move(guard).value();
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
  impl_->counters.rejected_connections = impl_->guard->refused();
  return impl_->counters;
}

bool GroupReceiver::Impl::fresh(std::uint32_t generator, const std::string& session, std::uint64_t sequence,
                                std::uint64_t& last) {
  const auto key = std::make_pair(generator, session);
  auto it = sessions.find(key);
  if (it != sessions.end()) {
    last = it->second.first;
    if (sequence <= last) return false;
    it->second = {sequence, ++clock};
    return true;
  }
  if (sessions.size() >= kMaxSessions) {  // forget the least recently active session
    auto oldest = sessions.begin();
    for (auto s = sessions.begin(); s != sessions.end(); ++s)
      if (s->second.second < oldest->second.second) oldest = s;
    sessions.erase(oldest);
  }
  sessions.emplace(key, std::make_pair(sequence, ++clock));
  return true;
}

std::optional<GroupResult> GroupReceiver::receive(std::chrono::milliseconds timeout) try {
  Impl& d = *impl_;
  if (auto report = d.refusal_report(false)) return report;
  zmq::pollitem_t item{d.socket.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return d.refusal_report(true);
  zmq::message_t frame;
  if (!d.socket.recv(frame, zmq::recv_flags::dontwait)) return std::nullopt;
  d.counters.bytes += frame.size();
  if (frame.more()) {  // already whole in memory (libzmq delivers complete messages): release it
    std::uint64_t frames = 1;
    for (bool more = true; more && frames < (std::uint64_t{1} << 32); ++frames) {
      zmq::message_t rest;
      if (!d.socket.recv(rest, zmq::recv_flags::dontwait)) break;
      d.counters.bytes += rest.size();
      more = rest.more();
    }
    return d.reject(d.counters.rejected_malformed,
                    "a message of " + std::to_string(frames) + " frames, expected 1");
  }
  if (d.options.secret.empty()) {
    // The guard admitted this connection at its handshake; asked again here,
    // a connection already gone (its descriptor closed) is judged by that.
    const int fd = zmq_msg_get(frame.handle(), ZMQ_SRCFD);
    auto me = fd >= 0 ? loopback_peer_is_me(fd) : zorplex::Result<bool>(zorplex::Error{"gone"});
    if (me.ok() && !me.value()) {
      return d.reject(d.counters.rejected_authentication,
                      "a message from another user (without a secret only this uid may send)");
    }
  }
  const std::string_view bytes(static_cast<const char*>(frame.data()), frame.size());
  if (bytes.size() < kFrameHeaderBytes || bytes.compare(0, 4, std::string_view(kMagic, 4)) != 0 ||
      bytes[4] != kVersion) {
    return d.reject(d.counters.rejected_malformed, "a message without the WSTG/1 header");
  }
  const std::string session(bytes.substr(5, kSessionIdBytes));
  std::uint64_t sequence = 0;
  for (int b = 0; b < 8; ++b)
    sequence |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[5 + kSessionIdBytes + b]))
                << (8 * b);
  auto group = decode_group(bytes.substr(kFrameHeaderBytes));
  if (!group) {
    ++d.counters.rejected_malformed;
    return GroupResult(group.error());
  }
  std::uint64_t last = 0;
  if (!d.fresh(group.value().generator, session, sequence, last)) {
    return d.reject(d.counters.rejected_replay, "a replayed or repeated message (generator " +
                                                    std::to_string(group.value().generator) + ", sequence " +
                                                    std::to_string(sequence) + ", already at " +
                                                    std::to_string(last) + ")");
  }
  ++d.counters.received;
  return group;
} catch (const zmq::error_t& e) {
  ++impl_->counters.rejected_malformed;
  return GroupResult(zorplex::Error{std::string("trajectory channel: receive failed: ") + e.what()});
}

}  // namespace channel
