// Fp8Publisher: a ConvertingPublisher (narrow/converting_publisher.h) whose
// converter quantizes float32 images into the fp8 wire layout
// (weightsync/fp8.h has the contract).
#include <utility>

#include "fp8/fp8_plan.h"
#include "narrow/converting_publisher.h"
#include "weightsync/fp8.h"

namespace weightsync {

class Fp8Publisher::Impl {
 public:
  std::unique_ptr<detail::ConvertingPublisher> core;
};

Fp8Publisher::Fp8Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Fp8Publisher::~Fp8Publisher() = default;

Result<std::unique_ptr<Fp8Publisher>> Fp8Publisher::create(const WeightLayout& wide, const Fp8Policy& policy,
                                                           PublisherOptions options) try {
  auto layout = fp8_layout(wide, policy);
  if (!layout.ok()) return layout.status();
  auto plan = detail::make_fp8_plan(layout.value(), wide);
  if (!plan.ok()) return plan.status();
  // The converter owns its plan: offsets only, nothing it points to.
  detail::Converter convert = [plan = std::move(plan).value()](const void* src, void* dst,
                                                                 const std::atomic<bool>* stop) {
    return detail::run_quantize(plan, src, dst, stop);
  };
  auto core = detail::ConvertingPublisher::create("Fp8Publisher", wide, std::move(layout).value(),
                                                  std::move(convert), std::move(options));
  if (!core.ok()) return core.status();
  auto impl = std::make_unique<Impl>();
  impl->core = std::move(core).value();
  return std::unique_ptr<Fp8Publisher>(new Fp8Publisher(std::move(impl)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Fp8Publisher::create: ") + e.what());
}

Result<NarrowHandoff> Fp8Publisher::publish(std::uint64_t version, const void* wide_image, std::size_t bytes) try {
  return impl_->core->publish(version, wide_image, bytes);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Fp8Publisher::publish: ") + e.what());
}

Result<PublishResult> Fp8Publisher::flush(std::chrono::milliseconds timeout) try {
  return impl_->core->flush(timeout);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Fp8Publisher::flush: ") + e.what());
}

const WeightLayout& Fp8Publisher::wide_layout() const noexcept {
  return impl_->core->source_layout();
}

Publisher& Fp8Publisher::publisher() noexcept {
  return impl_->core->publisher();
}

NarrowingStats Fp8Publisher::stats() const {
  return impl_->core->stats();
}

}  // namespace weightsync
