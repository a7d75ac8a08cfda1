// NarrowingPublisher: a ConvertingPublisher (narrow/converting_publisher.h)
// whose converter narrows float32 tensors to bfloat16 or float16
// (weightsync/narrow.h has the contract).
#include <utility>

#include "narrow/converting_publisher.h"
#include "narrow/image_convert.h"
#include "weightsync/narrow.h"

namespace weightsync {

class NarrowingPublisher::Impl {
 public:
  DType narrow = DType::kBFloat16;
  std::unique_ptr<detail::ConvertingPublisher> core;
};

NarrowingPublisher::NarrowingPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NarrowingPublisher::~NarrowingPublisher() = default;

Result<std::unique_ptr<NarrowingPublisher>> NarrowingPublisher::create(const WeightLayout& wide, DType narrow,
                                                                       PublisherOptions options) try {
  auto narrow_layout = narrowed_layout(wide, narrow);
  if (!narrow_layout.ok()) return narrow_layout.status();
  const WeightLayout target = narrow_layout.value();
  // The converter owns copies of both layouts: it outlives nothing it points to.
  detail::Converter convert = [wide, target](const void* src, void* dst, const std::atomic<bool>* stop) {
    return detail::convert_image(wide, src, target, dst, stop);
  };
  auto core = detail::ConvertingPublisher::create("NarrowingPublisher", wide, std::move(narrow_layout).value(),
                                                  std::move(convert), std::move(options));
  if (!core.ok()) return core.status();
  auto impl = std::make_unique<Impl>();
  impl->narrow = narrow;
  impl->core = std::move(core).value();
  return std::unique_ptr<NarrowingPublisher>(new NarrowingPublisher(std::move(impl)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("NarrowingPublisher::create: ") + e.what());
}

Result<NarrowHandoff> NarrowingPublisher::publish(std::uint64_t version, const void* wide_image,
                                                  std::size_t bytes) try {
  return impl_->core->publish(version, wide_image, bytes);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("NarrowingPublisher::publish: ") + e.what());
}

Result<PublishResult> NarrowingPublisher::flush(std::chrono::milliseconds timeout) try {
  return impl_->core->flush(timeout);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("NarrowingPublisher::flush: ") + e.what());
}

const WeightLayout& NarrowingPublisher::wide_layout() const noexcept {
  return impl_->core->source_layout();
}

DType NarrowingPublisher::narrow_dtype() const noexcept {
  return impl_->narrow;
}

Publisher& NarrowingPublisher::publisher() noexcept {
  return impl_->core->publisher();
}

NarrowingStats NarrowingPublisher::stats() const {
  return impl_->core->stats();
}

}  // namespace weightsync
