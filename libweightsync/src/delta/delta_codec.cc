// XOR, byte transposition and zstd for delta versions.
#include "delta/delta_codec.h"

#include <zstd.h>

#include <cstring>
#include <string>

namespace weightsync::detail {
namespace {

// dst (transposed) from the XOR of a and b: byte k of element i lands at k * n + i.
template <std::size_t W>
void xor_transpose(const std::uint8_t* a, const std::uint8_t* b, std::size_t elements, std::uint8_t* dst) {
  for (std::size_t i = 0; i < elements; ++i) {
    for (std::size_t k = 0; k < W; ++k) dst[k * elements + i] = a[i * W + k] ^ b[i * W + k];
  }
}

template <std::size_t W>
void untranspose(const std::uint8_t* src, std::size_t elements, std::uint8_t* dst) {
  for (std::size_t i = 0; i < elements; ++i) {
    for (std::size_t k = 0; k < W; ++k) dst[i * W + k] = src[k * elements + i];
  }
}

void xor_transpose_any(const std::uint8_t* a, const std::uint8_t* b, std::size_t bytes, std::size_t w,
                       std::uint8_t* dst) {
  const std::size_t elements = bytes / w;
  switch (w) {
    case 2: xor_transpose<2>(a, b, elements, dst); break;
    case 4: xor_transpose<4>(a, b, elements, dst); break;
    case 8: xor_transpose<8>(a, b, elements, dst); break;
    default: xor_transpose<1>(a, b, elements, dst); break;
  }
  for (std::size_t i = elements * w; i < bytes; ++i) dst[i] = a[i] ^ b[i];
}

void untranspose_any(const std::uint8_t* src, std::size_t bytes, std::size_t w, std::uint8_t* dst) {
  const std::size_t elements = bytes / w;
  switch (w) {
    case 2: untranspose<2>(src, elements, dst); break;
    case 4: untranspose<4>(src, elements, dst); break;
    case 8: untranspose<8>(src, elements, dst); break;
    default: std::memcpy(dst, src, elements); break;
  }
  std::memcpy(dst + elements * w, src + elements * w, bytes - elements * w);
}

}  // namespace

bool valid_element_bytes(std::size_t element_bytes) noexcept {
  return element_bytes == 1 || element_bytes == 2 || element_bytes == 4 || element_bytes == 8;
}

std::size_t delta_element_bytes(const WeightLayout& layout) noexcept {
  std::size_t width = 0;
  for (const auto& t : layout.tensors()) {
    const std::size_t w = dtype_size(t.spec.dtype);
    if (width == 0) width = w;
    if (w != width) return 1;
  }
  return valid_element_bytes(width) ? width : 1;
}

void xor_into(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t a, b;
    std::memcpy(&a, dst + i, 8);
    std::memcpy(&b, src + i, 8);
    a ^= b;
    std::memcpy(dst + i, &a, 8);
  }
  for (; i < bytes; ++i) dst[i] ^= src[i];
}

Status encode_delta(const std::uint8_t* base, const std::uint8_t* target, std::size_t image_bytes,
                    std::size_t element_bytes, int level, std::vector<std::uint8_t>& scratch,
                    std::vector<std::uint8_t>& out) {
  if (!valid_element_bytes(element_bytes)) {
    return Status(ErrorCode::kInvalidArgument, "delta element width " + std::to_string(element_bytes));
  }
  scratch.resize(image_bytes);
  xor_transpose_any(base, target, image_bytes, element_bytes, scratch.data());
  out.resize(ZSTD_compressBound(image_bytes));
  const std::size_t n = ZSTD_compress(out.data(), out.size(), scratch.data(), image_bytes, level);
  if (ZSTD_isError(n)) {
    return Status(ErrorCode::kInternal, std::string("zstd could not compress a delta: ") + ZSTD_getErrorName(n));
  }
  out.resize(n);
  return Status();
}

Status decode_delta(const std::uint8_t* compressed, std::size_t compressed_bytes, std::size_t image_bytes,
                    std::size_t element_bytes, std::vector<std::uint8_t>& scratch, std::uint8_t* xor_out) {
  if (!valid_element_bytes(element_bytes)) {
    return Status(ErrorCode::kProtocolError, "a delta names element width " + std::to_string(element_bytes));
  }
  // The frame must say how big it is, and that must be the image: zstd then
  // never writes past the buffer, and a short frame is refused.
  const unsigned long long declared = ZSTD_getFrameContentSize(compressed, compressed_bytes);
  if (declared != image_bytes) {
    return Status(ErrorCode::kProtocolError,
                  "a delta frame does not declare the image's " + std::to_string(image_bytes) + " bytes");
  }
  scratch.resize(image_bytes);
  const std::size_t n = ZSTD_decompress(scratch.data(), image_bytes, compressed, compressed_bytes);
  if (ZSTD_isError(n) || n != image_bytes) {
    return Status(ErrorCode::kProtocolError,
                  std::string("a delta does not decompress: ") +
                      (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong size"));
  }
  untranspose_any(scratch.data(), image_bytes, element_bytes, xor_out);
  return Status();
}

}  // namespace weightsync::detail
