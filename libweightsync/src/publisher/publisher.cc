// Publisher: the public face of Publisher::Impl (publisher_core.h) and the
// publish paths (copy, contiguous copy, in-place SlotWriter, device publishes).
#include "weightsync/publisher.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/checksum.h"
#include "cuda/device_backend.h"
#include "publisher/publisher_core.h"

namespace weightsync {

Publisher::Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Publisher::~Publisher() = default;  // Impl's destructor stops the server first

Result<std::unique_ptr<Publisher>> Publisher::create(WeightLayout layout, PublisherOptions options) try {
  auto impl = Impl::create(std::move(layout), options);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Publisher>(new Publisher(std::move(*impl)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::create: ") + e.what());
}

const WeightLayout& Publisher::layout() const noexcept {
  return impl_->layout;
}

std::string Publisher::address() const {
  return impl_->address();
}

std::uint16_t Publisher::port() const noexcept {
  return impl_->port;
}

std::size_t Publisher::slot_count() const noexcept {
  return impl_->ring->slot_count();
}

const std::string& Publisher::slot_allocator() const noexcept {
  return impl_->ring->allocator_name();
}

std::vector<SettingReport> Publisher::settings() const {
  return impl_->settings;
}

std::uint64_t Publisher::latest_version() const noexcept {
  return impl_->ring->latest_version();
}

Result<PublishResult> Publisher::publish(std::uint64_t version,
                                         const std::vector<TensorSource>& tensors) try {
  const auto start = std::chrono::steady_clock::now();
  const WeightLayout& layout = impl_->layout;
  if (tensors.size() != layout.tensors().size()) {
    return Status(ErrorCode::kInvalidArgument, "publish() got " + std::to_string(tensors.size()) +
                                                   " tensors; the layout has " +
                                                   std::to_string(layout.tensors().size()));
  }
  // Validate everything before touching a slot.
  std::vector<const TensorSource*> by_index(layout.tensors().size(), nullptr);
  for (const auto& t : tensors) {
    const TensorEntry* entry = layout.find(t.name);
    if (entry == nullptr)
      return Status(ErrorCode::kInvalidArgument, "publish(): unknown tensor '" + t.name + "'");
    const std::size_t index = static_cast<std::size_t>(entry - layout.tensors().data());
    if (by_index[index] != nullptr)
      return Status(ErrorCode::kInvalidArgument, "publish(): tensor '" + t.name + "' given twice");
    if (t.bytes != entry->bytes || t.data == nullptr) {
      return Status(ErrorCode::kInvalidArgument, "publish(): tensor '" + t.name + "' has " +
                                                     std::to_string(t.bytes) + " bytes; the layout says " +
                                                     std::to_string(entry->bytes));
    }
    by_index[index] = &t;
  }
  auto r = impl_->reserve(version);
  if (!r.ok()) return r.status();
  auto* base = static_cast<char*>(r->data);
  std::optional<detail::StreamHasher> hasher;
  if (impl_->checksums) hasher.emplace(impl_->version_key);
  // With checksums: copy in 1 MiB chunks and hash each while still in cache.
  // Without: one memcpy per tensor (large copies are fastest whole; see
  // transport/direct_copy.h).
  const std::uint64_t chunk = hasher ? (1u << 20) : UINT64_MAX;
  for (std::size_t i = 0; i < by_index.size(); ++i) {
    const TensorEntry& entry = layout.tensors()[i];
    const auto* src = static_cast<const char*>(by_index[i]->data);
    for (std::uint64_t done = 0; done < entry.bytes;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, entry.bytes - done));
      if (Status copied = impl_->copy_into_slot(base + entry.offset + done, src + done, n); !copied.ok()) {
        impl_->abandon(r->slot);
        return copied;
      }
      if (hasher) hasher->update(base + entry.offset + done, n);
      done += n;
    }
  }
  return impl_->finish(*r, version, start,
                       hasher ? std::optional<std::uint64_t>(hasher->digest()) : std::nullopt);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish: ") + e.what());
}

Result<PublishResult> Publisher::publish(std::uint64_t version, const void* data, std::size_t bytes) try {
  const auto start = std::chrono::steady_clock::now();
  if (data == nullptr || bytes != impl_->layout.total_bytes()) {
    return Status(ErrorCode::kInvalidArgument, "publish(): contiguous image has " + std::to_string(bytes) +
                                                   " bytes; the layout's region is " +
                                                   std::to_string(impl_->layout.total_bytes()));
  }
  auto r = impl_->reserve(version);
  if (!r.ok()) return r.status();
  if (Status copied = impl_->copy_into_slot(r->data, data, bytes); !copied.ok()) {
    impl_->abandon(r->slot);
    return copied;
  }
  return impl_->finish(*r, version, start, std::nullopt);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish: ") + e.what());
}

Result<SlotWriter> Publisher::begin_publish(std::uint64_t version) try {
  auto r = impl_->reserve(version);
  if (!r.ok()) return r.status();
  return SlotWriter(this, version, r->slot, r->data, impl_->layout.total_bytes(), r->revoked);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::begin_publish: ") + e.what());
}

Result<PublishTicket> Publisher::publish_from_device(std::uint64_t version, const void* device_data,
                                                     std::size_t bytes, void* cuda_stream) try {
  if (device_data == nullptr || bytes != impl_->layout.total_bytes()) {
    return Status(ErrorCode::kInvalidArgument, "publish_from_device(): the image has " +
                                                   std::to_string(bytes) + " bytes; the layout's region is " +
                                                   std::to_string(impl_->layout.total_bytes()));
  }
  return publish_from_device(version, {TensorSource{"", device_data, bytes}}, cuda_stream);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish_from_device: ") + e.what());
}

Result<PublishTicket> Publisher::publish_from_device(std::uint64_t version,
                                                     const std::vector<TensorSource>& tensors,
                                                     void* cuda_stream) try {
  const auto start = std::chrono::steady_clock::now();
  const WeightLayout& layout = impl_->layout;
  // One unnamed source is the whole image (the overload above); else one per tensor.
  const bool image = tensors.size() == 1 && tensors[0].name.empty();
  std::vector<detail::DeviceCopy> copies;  // dest filled in once a slot is reserved
  std::vector<std::uint64_t> offsets;
  if (image) {
    if (Status s = detail::device_backend().check_device_memory(tensors[0].data, tensors[0].bytes,
                                                                "the publish_from_device source");
        !s.ok())
      return s;
    copies.push_back(detail::DeviceCopy{nullptr, tensors[0].data, tensors[0].bytes});
    offsets.push_back(0);
  } else {
    if (tensors.size() != layout.tensors().size()) {
      return Status(ErrorCode::kInvalidArgument,
                    "publish_from_device() got " + std::to_string(tensors.size()) +
                        " tensors; the layout has " + std::to_string(layout.tensors().size()));
    }
    std::vector<bool> seen(layout.tensors().size(), false);
    for (const auto& t : tensors) {
      const TensorEntry* entry = layout.find(t.name);
      if (entry == nullptr)
        return Status(ErrorCode::kInvalidArgument, "publish_from_device(): unknown tensor '" + t.name + "'");
      const std::size_t index = static_cast<std::size_t>(entry - layout.tensors().data());
      if (seen[index])
        return Status(ErrorCode::kInvalidArgument,
                      "publish_from_device(): tensor '" + t.name + "' given twice");
      seen[index] = true;
      if (t.bytes != entry->bytes) {
        return Status(ErrorCode::kInvalidArgument, "publish_from_device(): tensor '" + t.name + "' has " +
                                                       std::to_string(t.bytes) + " bytes; the layout says " +
                                                       std::to_string(entry->bytes));
      }
      if (Status s =
              detail::device_backend().check_device_memory(t.data, t.bytes, "the publish_from_device source");
          !s.ok())
        return Status(s.code(), "tensor '" + t.name + "': " + s.message());
      copies.push_back(detail::DeviceCopy{nullptr, t.data, t.bytes});
      offsets.push_back(entry->offset);
    }
  }
  if (Status prepared = impl_->prepare_device_publish(); !prepared.ok()) return prepared;
  auto r = impl_->reserve(version);  // waits for the previous device publish
  if (!r.ok()) return r.status();
  impl_->writer_open = false;  // the queue owns the reservation from here
  for (std::size_t i = 0; i < copies.size(); ++i) copies[i].dest = static_cast<char*>(r->data) + offsets[i];
  detail::DeviceCopyJob job{version, r->slot, r->revoked, start};
  if (Status queued = impl_->device_queue->enqueue(job, cuda_stream, copies); !queued.ok()) {
    impl_->ring->abandon(r->slot);
    return queued;
  }
  PublishTicket ticket;
  ticket.version = version;
  ticket.slot = r->slot;
  ticket.revoked_leases = r->revoked;
  ticket.enqueue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ticket;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish_from_device: ") + e.what());
}

Status Publisher::order_after_device_publish(void* cuda_stream) try {
  if (!impl_->device_queue) return Status();
  return impl_->device_queue->order_after(cuda_stream);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::order_after_device_publish: ") + e.what());
}

Result<PublishResult> Publisher::flush_device_publishes(std::chrono::milliseconds timeout) try {
  if (!impl_->device_queue) return Status(ErrorCode::kNotReady, "no device publish was enqueued");
  return impl_->device_queue->flush(timeout);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::flush_device_publishes: ") + e.what());
}

PublisherStats Publisher::stats() const {
  return impl_->stats();
}

// ---- SlotWriter ----

SlotWriter::SlotWriter(Publisher* owner, std::uint64_t version, std::uint32_t slot, void* data,
                       std::size_t size, std::uint32_t revoked)
    : owner_(owner),
      version_(version),
      slot_(slot),
      data_(data),
      size_(size),
      revoked_(revoked),
      started_(std::chrono::steady_clock::now()) {}

SlotWriter::SlotWriter(SlotWriter&& other) noexcept
    : owner_(other.owner_),
      version_(other.version_),
      slot_(other.slot_),
      data_(other.data_),
      size_(other.size_),
      revoked_(other.revoked_),
      started_(other.started_) {
  other.owner_ = nullptr;
}

SlotWriter& SlotWriter::operator=(SlotWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    owner_ = other.owner_;
    version_ = other.version_;
    slot_ = other.slot_;
    data_ = other.data_;
    size_ = other.size_;
    revoked_ = other.revoked_;
    started_ = other.started_;
    other.owner_ = nullptr;
  }
  return *this;
}

SlotWriter::~SlotWriter() {
  abandon();
}

void SlotWriter::abandon() noexcept {
  if (owner_ == nullptr) return;
  owner_->impl_->abandon(slot_);
  owner_ = nullptr;
}

Result<void*> SlotWriter::tensor(const std::string& name) try {
  if (owner_ == nullptr) return Status(ErrorCode::kInvalidArgument, "SlotWriter already committed");
  const TensorEntry* entry = owner_->impl_->layout.find(name);
  if (entry == nullptr) return Status(ErrorCode::kInvalidArgument, "unknown tensor '" + name + "'");
  return static_cast<void*>(static_cast<char*>(data_) + entry->offset);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SlotWriter::tensor: ") + e.what());
}

Result<PublishResult> SlotWriter::commit() {
  if (owner_ == nullptr) return Status(ErrorCode::kInvalidArgument, "SlotWriter already committed");
  Publisher* owner = owner_;
  owner_ = nullptr;
  detail::Reservation r{slot_, revoked_, data_};
  try {
    return owner->impl_->finish(r, version_, started_, std::nullopt);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("SlotWriter::commit: ") + e.what());
  }
}

}  // namespace weightsync
