// weightsync/narrow.h: a narrower dtype in flight. The trainer keeps float32
// weights and publishes a bfloat16 (or float16) image of them; a subscriber
// pulls that image and uses it as is, or widens it into its own float32
// parameters.
//
// Contract
// - Conversion kernels: narrowing rounds to nearest, ties to even (IEEE 754
//   roundTiesToEven). NaN stays NaN with its sign, made quiet (the top
//   payload bits are kept); +-inf stays +-inf; -0 stays -0. float16: values
//   of magnitude >= 65520 become +-inf, values below 2^-14 become subnormals
//   or +-0, rounded the same way. Widening (bfloat16 or float16 to float32)
//   is exact, so widen(narrow(x)) is the float32 value nearest to x in the
//   narrow type, and narrow(widen(h)) == h for every non-NaN h. The kernels
//   read and write through memcpy-sized loads: any alignment is fine. They
//   assume the default floating-point environment (round to nearest, no
//   flush-to-zero of the results; denormals-are-zero on inputs changes only
//   float32 subnormals, which narrow to +-0 either way).
// - Layouts: narrowed_layout() turns every float32 tensor of a layout into
//   the narrow dtype and keeps every other tensor, the names, the order and
//   the alignment. check_widenable() says whether a narrow layout can be
//   widened into a wide one: the same tensors (names, shapes, order), each
//   either of the same dtype or bfloat16/float16 on the narrow side and
//   float32 on the wide side. narrow_image() and widen_image() convert whole
//   images between two such layouts, tensor by tensor (same dtype: a copy);
//   padding bytes are not written. Errors: kInvalidArgument naming the
//   tensor (or the dtype) that does not fit; nothing is written then.
// - NarrowingPublisher: owns a Publisher over narrowed_layout(wide, narrow)
//   (its PublisherOptions passed through; slot_memory must be kHost) and one
//   converter thread. publish() copies the float32 image into a staging
//   buffer (a memcpy, the only work on the caller's thread) and returns; the
//   converter converts it straight into a slot (begin_publish, convert into
//   the slot, commit) on its own thread. Two staging buffers: publish() never
//   waits for the converter. A version still waiting for the converter when
//   a newer one is handed over is dropped (newest wins) and counted in
//   versions_skipped; subscribers never see it.
// - Errors of the converter (begin_publish or commit failing, e.g. kBusy
//   with FullRingPolicy::kSkip, or a version not newer than one published
//   through publisher() directly) are kept and returned once: by the next
//   publish() (which then hands nothing over: call it again) or by flush(),
//   whichever comes first. flush(timeout) waits until every version handed
//   over is committed, skipped or failed, and returns the last PublishResult
//   (kNotReady if none was ever committed), the kept error, or kTimeout.
// - Threads: publish() and flush() from one thread at a time (the
//   trainer's); stats(), wide_layout(), narrow_dtype() and publisher() (for
//   address(), stats(), latest_version()) from any thread. Do not publish
//   through publisher() while this object may be converting. The destructor
//   stops the converter (a conversion in progress is abandoned within one
//   chunk of a few MiB, a waiting version is dropped and counted as
//   skipped), joins it, then destroys the Publisher.
// - No exception crosses these functions; allocation failures are kInternal.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "weightsync/layout.h"
#include "weightsync/options.h"
#include "weightsync/publisher.h"
#include "weightsync/status.h"

namespace weightsync {

// One value (bits of the narrow type in a uint16).
std::uint16_t float_to_bfloat16(float value) noexcept;
std::uint16_t float_to_float16(float value) noexcept;
float bfloat16_to_float(std::uint16_t bits) noexcept;
float float16_to_float(std::uint16_t bits) noexcept;

// `count` elements from `src` to `dst` (which must not overlap).
void narrow_to_bfloat16(const void* src_f32, void* dst_bf16, std::size_t count) noexcept;
void narrow_to_float16(const void* src_f32, void* dst_f16, std::size_t count) noexcept;
void widen_bfloat16(const void* src_bf16, void* dst_f32, std::size_t count) noexcept;
void widen_float16(const void* src_f16, void* dst_f32, std::size_t count) noexcept;

// `narrow` is kBFloat16 or kFloat16 (else kInvalidArgument).
Result<WeightLayout> narrowed_layout(const WeightLayout& wide, DType narrow);

// OK when `narrow` can be widened into `wide` (see the contract), else
// kInvalidArgument naming the first tensor that does not fit.
Status check_widenable(const WeightLayout& narrow, const WeightLayout& wide);

// Images are total_bytes() of their layout, packed as it says.
Status narrow_image(const WeightLayout& wide, const void* wide_image, const WeightLayout& narrow,
                    void* narrow_image);
Status widen_image(const WeightLayout& narrow, const void* narrow_image, const WeightLayout& wide,
                   void* wide_image);

// What publish() did on the caller's thread.
struct NarrowHandoff {
  std::uint64_t version = 0;
  double copy_seconds = 0.0;           // the memcpy into staging (the whole call, nearly)
  std::uint64_t replaced_version = 0;  // a version still waiting that this one replaced; 0: none
};

struct NarrowingStats {
  std::uint64_t versions_handed_over = 0;  // publish() calls that handed a version over
  std::uint64_t versions_converted = 0;    // converted and committed
  std::uint64_t versions_skipped = 0;      // replaced while waiting (newest wins) or dropped at destruction
  std::uint64_t versions_failed = 0;       // begin_publish or commit failed
  double conversion_seconds = 0.0;         // total, converter thread: begin_publish to commit
  double last_conversion_seconds = 0.0;
  std::uint64_t last_committed_version = 0;
};

class NarrowingPublisher {
 public:
  static Result<std::unique_ptr<NarrowingPublisher>> create(const WeightLayout& wide, DType narrow,
                                                            PublisherOptions options = {});
  ~NarrowingPublisher();
  NarrowingPublisher(const NarrowingPublisher&) = delete;
  NarrowingPublisher& operator=(const NarrowingPublisher&) = delete;

  // `wide_image`: wide_layout().total_bytes() bytes; `version` greater than
  // every version handed over before (else kInvalidArgument).
  Result<NarrowHandoff> publish(std::uint64_t version, const void* wide_image, std::size_t bytes);
  Result<PublishResult> flush(std::chrono::milliseconds timeout = std::chrono::seconds(60));

  const WeightLayout& wide_layout() const noexcept;
  DType narrow_dtype() const noexcept;
  // The Publisher of the narrow layout: address(), layout(), stats().
  Publisher& publisher() noexcept;
  NarrowingStats stats() const;

  class Impl;

 private:
  explicit NarrowingPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightsync
