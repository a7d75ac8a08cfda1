// The two sources of a StagedUpdates (pull_source.h).
#include "staged/pull_source.h"

#include <utility>

namespace weightsync::detail {
namespace {

class SubscriberSource final : public PullSource {
 public:
  explicit SubscriberSource(std::unique_ptr<Subscriber> s) : subscriber_(std::move(s)) {}
  std::size_t members() const override { return 1; }
  bool is_group() const override { return false; }
  const WeightLayout& layout(std::size_t) const override { return subscriber_->layout(); }
  std::string transport() const override { return subscriber_->transport(); }
  bool checksums() const override { return subscriber_->publisher_checksums(); }
  bool deltas() const override { return subscriber_->publisher_deltas(); }
  Result<PullPlan> prepare(std::size_t, const Destination& destination) override {
    return subscriber_->prepare(destination);
  }
  Result<PullResult> pull(const std::vector<PullPlan>& plans, const SourcePull& request) override {
    PullOptions options;
    options.newer_than = request.newer_than;
    options.version = request.version;
    options.wait = request.wait;
    options.cancel.token = request.cancel;
    options.delta_base = request.delta_base;
    options.on_progress = request.on_progress;
    return subscriber_->pull(plans[0], options);
  }
  Status status() const override { return subscriber_->status(); }
  SubscriberStats stats() const override { return subscriber_->stats(); }

 private:
  std::unique_ptr<Subscriber> subscriber_;
};

class GroupSource final : public PullSource {
 public:
  explicit GroupSource(std::unique_ptr<SubscriberGroup> g) : group_(std::move(g)) {
    for (std::size_t r = 0; r < group_->size(); ++r)
      checksums_ = checksums_ && group_->member(r).publisher_checksums();
  }
  std::size_t members() const override { return group_->size(); }
  bool is_group() const override { return true; }
  const WeightLayout& layout(std::size_t member) const override { return group_->member(member).layout(); }
  std::string transport() const override { return group_->member(0).transport(); }
  bool checksums() const override { return checksums_; }
  bool deltas() const override { return false; }
  Result<PullPlan> prepare(std::size_t member, const Destination& destination) override {
    return group_->member(member).prepare(destination);
  }
  Result<PullResult> pull(const std::vector<PullPlan>& plans, const SourcePull& request) override {
    GroupPullOptions options;
    options.newer_than = request.newer_than;
    options.version = request.version;
    options.wait = request.wait;
    auto pulled = group_->pull(plans, options);
    if (!pulled.ok()) return pulled.status();
    PullResult sum;
    sum.version = pulled->version;
    sum.bytes = pulled->bytes;
    sum.seconds = pulled->seconds;
    sum.wait_seconds = pulled->wait_seconds;
    sum.retries = pulled->rounds;
    sum.checksum_verified = pulled->checksums_verified;
    sum.signature_verified = !pulled->members.empty();
    for (const PullResult& m : pulled->members) {
      sum.retries += m.retries;
      sum.wire_bytes += m.wire_bytes;
      sum.partial = sum.partial || m.partial;
      sum.staged = sum.staged || m.staged;
      sum.signature_verified = sum.signature_verified && m.signature_verified;
    }
    return sum;
  }
  Status status() const override { return group_->status(); }
  SubscriberStats stats() const override { return group_->stats(); }

 private:
  std::unique_ptr<SubscriberGroup> group_;
  bool checksums_ = true;
};

}  // namespace

std::unique_ptr<PullSource> subscriber_source(std::unique_ptr<Subscriber> subscriber) {
  return std::make_unique<SubscriberSource>(std::move(subscriber));
}

std::unique_ptr<PullSource> group_source(std::unique_ptr<SubscriberGroup> group) {
  return std::make_unique<GroupSource>(std::move(group));
}

}  // namespace weightsync::detail
