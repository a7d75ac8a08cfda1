// ByteWriter / ByteReader: little-endian encoding of fixed-width integers,
// length-prefixed strings and blobs. ByteReader never reads past its end:
// every getter returns false instead, leaving the output untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace weightsync::detail {

class ByteWriter {
 public:
  void u8(std::uint8_t v) { buf_.push_back(v); }
  void u16(std::uint16_t v) { put(v); }
  void u32(std::uint32_t v) { put(v); }
  void u64(std::uint64_t v) { put(v); }
  void i64(std::int64_t v) { put(static_cast<std::uint64_t>(v)); }
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  // Length-prefixed (u16) string; callers keep strings under 64 KiB.
  void str16(const std::string& s) {
    u16(static_cast<std::uint16_t>(s.size()));
    bytes(s.data(), s.size());
  }
  // Length-prefixed (u32) blob.
  void blob32(const std::vector<std::uint8_t>& b) {
    u32(static_cast<std::uint32_t>(b.size()));
    bytes(b.data(), b.size());
  }
  std::vector<std::uint8_t> take() { return std::move(buf_); }
  void reserve(std::size_t n) { buf_.reserve(n); }
  std::size_t size() const { return buf_.size(); }

 private:
  template <typename T>
  void put(T v) {  // little-endian, appended in one step
    std::uint8_t b[sizeof(T)];
    for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<std::uint8_t>(v >> (8 * i));
    const std::size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, b, sizeof(T));
  }
  std::vector<std::uint8_t> buf_;
};

class ByteReader {
 public:
  ByteReader(const void* data, std::size_t size) : p_(static_cast<const std::uint8_t*>(data)), left_(size) {}

  std::size_t remaining() const { return left_; }
  bool u8(std::uint8_t* v) { return get(v); }
  bool u16(std::uint16_t* v) { return get(v); }
  bool u32(std::uint32_t* v) { return get(v); }
  bool u64(std::uint64_t* v) { return get(v); }
  bool i64(std::int64_t* v) {
    std::uint64_t u = 0;
    if (!get(&u)) return false;
    *v = static_cast<std::int64_t>(u);
    return true;
  }
  bool bytes(void* out, std::size_t n) {
    if (n > left_) return false;
    if (n != 0) std::memcpy(out, p_, n);
    p_ += n;
    left_ -= n;
    return true;
  }
  bool str16(std::string* s, std::size_t max_len) {
    std::uint16_t n = 0;
    if (!get(&n) || n > max_len || n > left_) return false;
    s->assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return true;
  }
  bool blob32(std::vector<std::uint8_t>* b, std::size_t max_len) {
    std::uint32_t n = 0;
    if (!get(&n) || n > max_len || n > left_) return false;
    b->assign(p_, p_ + n);
    p_ += n;
    left_ -= n;
    return true;
  }

 private:
  template <typename T>
  bool get(T* v) {
    if (sizeof(T) > left_) return false;
    T out = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) out |= static_cast<T>(static_cast<T>(p_[i]) << (8 * i));
    *v = out;
    p_ += sizeof(T);
    left_ -= sizeof(T);
    return true;
  }
  const std::uint8_t* p_;
  std::size_t left_;
};

}  // namespace weightsync::detail
