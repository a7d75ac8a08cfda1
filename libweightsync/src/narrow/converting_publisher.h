// narrow/converting_publisher.h: the machinery shared by the publishers that
// convert off the trainer's thread (NarrowingPublisher, Fp8Publisher): two
// staging buffers of the source image filled by publish() on the caller's
// thread, one converter thread that turns the newest staged version into a
// slot of a Publisher of the converted layout with a Converter function.
//
// Contract
// - create(): `source` is the layout publish() takes; `target` the layout of
//   the Publisher it creates (options passed through); `convert` turns one
//   source image into one target image in place in the slot, checking `stop`
//   between chunks of a few MiB and returning false when it stopped early.
//   `name` prefixes the error messages ("NarrowingPublisher").
// - publish(), flush(), stats(), publisher(): as NarrowingPublisher's
//   (weightsync/narrow.h): newest wins, the converter's errors come back once
//   by the next publish() or flush(), destruction abandons a conversion
//   within one chunk and joins the thread.
// - Threads: publish() and flush() from one thread at a time; stats() and
//   publisher() from any thread. The Converter runs on the converter thread
//   only, never concurrently with itself.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "weightsync/layout.h"
#include "weightsync/narrow.h"
#include "weightsync/options.h"
#include "weightsync/publisher.h"
#include "weightsync/status.h"

namespace weightsync::detail {

using Converter = std::function<bool(const void* source_image, void* target_image, const std::atomic<bool>* stop)>;

class ConvertingPublisher {
 public:
  static Result<std::unique_ptr<ConvertingPublisher>> create(std::string name, const WeightLayout& source,
                                                             WeightLayout target, Converter convert,
                                                             PublisherOptions options);
  ~ConvertingPublisher();
  ConvertingPublisher(const ConvertingPublisher&) = delete;
  ConvertingPublisher& operator=(const ConvertingPublisher&) = delete;

  Result<NarrowHandoff> publish(std::uint64_t version, const void* source_image, std::size_t bytes);
  Result<PublishResult> flush(std::chrono::milliseconds timeout);
  const WeightLayout& source_layout() const noexcept;
  Publisher& publisher() noexcept;
  NarrowingStats stats() const;

  class State;

 private:
  explicit ConvertingPublisher(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace weightsync::detail
