// make_fp8_plan(): the checks of check_fp8_pair() (weightsync/fp8.h), and the
// two loops that run a plan over whole images.
#include "fp8/fp8_plan.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "weightsync/fp8.h"
#include "weightsync/narrow.h"

namespace weightsync::detail {
namespace {

constexpr std::size_t kChunkElements = std::size_t{1} << 20;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Status mismatch(const std::string& name, const std::string& what) {
  return Status(ErrorCode::kInvalidArgument, "fp8 tensor '" + name + "': " + what +
                                                 ": the fp8 layout is not a form of this float32 layout");
}

// The step for wide tensor `w` and its fp8 counterpart `f`; marks what it uses.
Result<Fp8Step> make_step(const WeightLayout& fp8, const TensorEntry& w, const TensorEntry& f,
                          std::vector<bool>& used) {
  Fp8Step step;
  step.wide_offset = w.offset;
  step.fp8_offset = f.offset;
  const DType a = f.spec.dtype;
  const DType b = w.spec.dtype;
  if (a == b) {
    step.kind = Fp8Step::Kind::kCopy;
    step.bytes = w.bytes;
    return step;
  }
  if (b != DType::kFloat32) {
    return mismatch(w.spec.name, std::string("is ") + to_string(a) + " on the wire and " + to_string(b) +
                                     " here: only float32 takes another dtype");
  }
  step.rows = 1;
  for (std::size_t i = 0; i + 1 < w.spec.shape.size(); ++i) step.rows *= w.spec.shape[i];
  step.cols = w.spec.shape.empty() ? 1 : w.spec.shape.back();
  if (a == DType::kBFloat16 || a == DType::kFloat16) {
    step.kind = a == DType::kBFloat16 ? Fp8Step::Kind::kBFloat16 : Fp8Step::Kind::kFloat16;
    return step;
  }
  if (a != DType::kFloat8E4M3) {
    return mismatch(w.spec.name, std::string("is ") + to_string(a) + " on the wire: float32 is sent as "
                                                                     "float8_e4m3, bfloat16, float16 or float32");
  }
  if (w.spec.shape.size() < 2) return mismatch(w.spec.name, "is e4m3 but has rank < 2 (no 2-D blocks)");
  const std::string scale_name = fp8_scale_name(w.spec.name);
  const TensorEntry* s = fp8.find(scale_name);
  if (s == nullptr) return mismatch(w.spec.name, "is e4m3 but its scale tensor '" + scale_name + "' is missing");
  const std::vector<std::int64_t> want = fp8_scale_shape(w.spec.shape);
  if (s->spec.dtype != DType::kFloat32 || s->spec.shape != want) {
    return mismatch(w.spec.name, "its scale tensor '" + scale_name + "' is " + to_string(s->spec.dtype) + " " +
                                     shape_text(s->spec.shape) + ", not float32 " + shape_text(want));
  }
  const std::size_t index = static_cast<std::size_t>(s - fp8.tensors().data());
  if (used[index]) return mismatch(scale_name, "is used twice (as a tensor and as a scale)");
  used[index] = true;
  step.kind = Fp8Step::Kind::kE4M3;
  step.scale_offset = s->offset;
  return step;
}

}  // namespace

Result<Fp8Plan> make_fp8_plan(const WeightLayout& fp8, const WeightLayout& wide) {
  Fp8Plan plan;
  std::vector<bool> used(fp8.tensors().size(), false);
  for (const TensorEntry& w : wide.tensors()) {
    const TensorEntry* f = fp8.find(w.spec.name);
    if (f == nullptr) return mismatch(w.spec.name, "is missing from the fp8 layout");
    if (f->spec.shape != w.spec.shape) {
      return mismatch(w.spec.name, "has shape " + shape_text(f->spec.shape) + " on the wire and " +
                                       shape_text(w.spec.shape) + " here");
    }
    const std::size_t index = static_cast<std::size_t>(f - fp8.tensors().data());
    if (used[index]) return mismatch(w.spec.name, "is used twice (as a tensor and as a scale)");
    used[index] = true;
    auto step = make_step(fp8, w, *f, used);
    if (!step.ok()) return step.status();
    plan.steps.push_back(step.value());
  }
  for (std::size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) {
      return mismatch(fp8.tensors()[i].spec.name, "is neither a tensor of the float32 layout nor the scale of one");
    }
  }
  return plan;
}

bool run_quantize(const Fp8Plan& plan, const void* wide_image, void* fp8_image, const std::atomic<bool>* stop) {
  const auto* src = static_cast<const unsigned char*>(wide_image);
  auto* dst = static_cast<unsigned char*>(fp8_image);
  auto stopped = [stop] { return stop != nullptr && stop->load(std::memory_order_relaxed); };
  for (const Fp8Step& s : plan.steps) {
    if (s.kind == Fp8Step::Kind::kE4M3) {
      const std::int64_t band = kFp8BlockSize;
      const std::size_t band_scales = static_cast<std::size_t>((s.cols + band - 1) / band);
      for (std::int64_t r0 = 0; r0 < s.rows; r0 += band) {
        if (stopped()) return false;
        const std::int64_t n = std::min(band, s.rows - r0);
        const std::size_t at = static_cast<std::size_t>(r0) * static_cast<std::size_t>(s.cols);
        quantize_blocks_e4m3(src + s.wide_offset + 4 * at, n, s.cols, dst + s.fp8_offset + at,
                             dst + s.scale_offset + 4 * band_scales * static_cast<std::size_t>(r0 / band));
      }
      continue;
    }
    const std::size_t numel = s.kind == Fp8Step::Kind::kCopy ? s.bytes : static_cast<std::size_t>(s.rows * s.cols);
    for (std::size_t first = 0; first < numel; first += kChunkElements) {
      if (stopped()) return false;
      const std::size_t count = std::min(kChunkElements, numel - first);
      if (s.kind == Fp8Step::Kind::kCopy) {
        std::memcpy(dst + s.fp8_offset + first, src + s.wide_offset + first, count);
      } else if (s.kind == Fp8Step::Kind::kBFloat16) {
        narrow_to_bfloat16(src + s.wide_offset + 4 * first, dst + s.fp8_offset + 2 * first, count);
      } else {
        narrow_to_float16(src + s.wide_offset + 4 * first, dst + s.fp8_offset + 2 * first, count);
      }
    }
  }
  return true;
}

void run_dequantize(const Fp8Plan& plan, const void* fp8_image, void* wide_image) {
  const auto* src = static_cast<const unsigned char*>(fp8_image);
  auto* dst = static_cast<unsigned char*>(wide_image);
  for (const Fp8Step& s : plan.steps) {
    const std::size_t numel = static_cast<std::size_t>(s.rows * s.cols);
    switch (s.kind) {
      case Fp8Step::Kind::kCopy:
        std::memcpy(dst + s.wide_offset, src + s.fp8_offset, s.bytes);
        break;
      case Fp8Step::Kind::kBFloat16:
        widen_bfloat16(src + s.fp8_offset, dst + s.wide_offset, numel);
        break;
      case Fp8Step::Kind::kFloat16:
        widen_float16(src + s.fp8_offset, dst + s.wide_offset, numel);
        break;
      case Fp8Step::Kind::kE4M3:
        dequantize_blocks_e4m3(src + s.fp8_offset, src + s.scale_offset, s.rows, s.cols, dst + s.wide_offset);
        break;
    }
  }
}

}  // namespace weightsync::detail
