// StagingChannel: a DataChannel decorator for pulls into CUDA device memory
// over a channel that cannot write it (writes_device_memory() false). The
// read is split into windows of one staging chunk each; the inner channel
// reads window w into host chunk w % K of a StagingEngine while its copy
// engine moves the previous windows' chunks to the device (double
// buffering, never a whole-model staging copy). All windows are read under
// one lease; each window's stamp is checked, so a torn version is detected
// at the first window that sees the slot rewritten. See docs/gpu.md.
//
// Contract: one thread, like any channel. Borrows the inner channel, which
// must outlive it; owns the engine (the device side: cuda/device_backend.h).
// read() takes a plan of device destinations and returns the stamp of the
// last window, or the first stamp that differs from the request's (the caller
// reports it as torn), or the inner channel's or the engine's error; it waits
// for every copy before it returns, also after an error. Everything else is
// the inner channel's, plus the engine's chunks in registrations().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "cuda/device_backend.h"
#include "transport/data_channel.h"

namespace weightsync::detail {

class StagingChannel final : public DataChannel {
 public:
  StagingChannel(DataChannel& inner, std::unique_ptr<StagingEngine> engine)
      : inner_(inner), engine_(std::move(engine)) {}

  const char* name() const override { return inner_.name(); }
  Result<std::uint64_t> read(const ReadRequest& request) override;
  void close() override { inner_.close(); }
  // The inner channel's, plus one per page-locked staging chunk.
  std::uint64_t registrations() const override { return inner_.registrations() + engine_->chunk_count(); }
  Status register_region(void* base, std::size_t bytes) override {
    return inner_.register_region(base, bytes);
  }
  std::size_t release_region(void* base, std::size_t bytes) override {
    return inner_.release_region(base, bytes);
  }
  std::uint64_t released_registrations() const override { return inner_.released_registrations(); }
  std::uint64_t registration_generation() const override { return inner_.registration_generation(); }
  bool writes_device_memory() const override { return true; }
  std::optional<std::uint64_t> newest_committed() const override { return inner_.newest_committed(); }

 private:
  DataChannel& inner_;
  std::unique_ptr<StagingEngine> engine_;
};

}  // namespace weightsync::detail
