// UpstreamLink: connect, refuse mismatched layouts, round robin.
#include "relay/upstream_link.h"

#include <algorithm>

#include "common/log.h"

namespace weightsync::detail {

UpstreamLink::UpstreamLink(std::vector<std::string> addresses, SubscriberOptions options)
    : addresses_(std::move(addresses)), options_(std::move(options)) {}

Status UpstreamLink::connect_first() {
  std::string reasons;
  Status last;
  for (std::size_t i = 0; i < addresses_.size(); ++i) {
    auto sub = Subscriber::connect(addresses_[i], options_);
    if (sub.ok()) {
      subscriber_ = std::move(*sub);
      index_ = i;
      failed_in_round_ = 0;
      return Status();
    }
    last = sub.status();
    if (!reasons.empty()) reasons += "; ";
    reasons += addresses_[i] + ": " + last.to_string();
  }
  return Status(last.code(), "relay: no upstream could be connected (" + reasons + ")");
}

Status UpstreamLink::connect_next(const WeightLayout& layout) {
  subscriber_.reset();
  if (failed_in_round_ >= addresses_.size()) failed_in_round_ = 0;
  index_ = (index_ + 1) % addresses_.size();
  const std::string& address = addresses_[index_];
  auto sub = Subscriber::connect(address, options_);
  if (!sub.ok()) {
    ++failed_in_round_;
    return Status(sub.status().code(), "upstream " + address + ": " + sub.status().message());
  }
  if (!((*sub)->layout() == layout)) {
    ++failed_in_round_;
    return Status(ErrorCode::kInvalidConfig,
                  "upstream " + address + " serves another layout than the relay's; refused");
  }
  subscriber_ = std::move(*sub);
  failed_in_round_ = 0;
  backoff_ = std::chrono::milliseconds(0);
  return Status();
}

void UpstreamLink::drop() {
  subscriber_.reset();
  failed_in_round_ = 0;
}

std::chrono::milliseconds UpstreamLink::next_backoff() {
  backoff_ = backoff_.count() == 0 ? std::chrono::milliseconds(50)
                                   : std::min(backoff_ * 2, std::chrono::milliseconds(2000));
  failed_in_round_ = 0;
  return backoff_;
}

}  // namespace weightsync::detail
