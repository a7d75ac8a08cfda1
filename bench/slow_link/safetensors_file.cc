#include "safetensors_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "common.h"

namespace slowlink {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // as the safetensors library

std::runtime_error sys_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw sys_error("cannot write", path);
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void read_all(int fd, void* data, std::size_t bytes, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw sys_error("cannot read", path);
    if (n == 0) throw std::runtime_error(path + ": file ends early (truncated checkpoint?)");
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

}  // namespace

std::uint64_t write_safetensors(const std::string& path, const std::string& tensor, const float* data,
                                std::uint64_t elements, std::uint64_t version) {
  const std::uint64_t data_bytes = elements * sizeof(float);
  nlohmann::json header;
  header["__metadata__"] = {{"format", "pt"}, {"version", std::to_string(version)}};
  header[tensor] = {{"dtype", "F32"}, {"shape", {elements}}, {"data_offsets", {0, data_bytes}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::uint8_t length[8];
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(n >> (8 * i));

  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw sys_error("cannot create", path);
  write_all(fd.get(), length, sizeof(length), path);
  write_all(fd.get(), text.data(), text.size(), path);
  write_all(fd.get(), data, data_bytes, path);
  if (::close(fd.release()) != 0) throw sys_error("cannot close", path);
  return sizeof(length) + text.size() + data_bytes;
}

void load_safetensors(const std::string& path, const std::string& tensor, float* dest,
                      std::uint64_t elements) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw sys_error("cannot open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw sys_error("cannot stat", path);
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  std::uint8_t length[8];
  read_all(fd.get(), length, sizeof(length), path);
  std::uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<std::uint64_t>(length[i]) << (8 * i);
  if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8) {
    throw std::runtime_error(path + ": header length " + std::to_string(header_bytes) +
                             " does not fit the file");
  }
  std::string text(header_bytes, '\0');
  read_all(fd.get(), text.data(), text.size(), path);
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    throw std::runtime_error(path + ": the header is not JSON");
  const auto it = header.find(tensor);
  if (it == header.end()) throw std::runtime_error(path + ": no tensor '" + tensor + "'");
  const nlohmann::json& t = *it;
  const std::uint64_t data_bytes = elements * sizeof(float);
  if (t.value("dtype", "") != "F32") throw std::runtime_error(path + ": '" + tensor + "' is not F32");
  if (t.at("shape") != nlohmann::json::array({elements})) {
    throw std::runtime_error(path + ": '" + tensor + "' has shape " + t.at("shape").dump() + ", expected [" +
                             std::to_string(elements) + "]");
  }
  const auto begin = t.at("data_offsets").at(0).get<std::uint64_t>();
  const auto end = t.at("data_offsets").at(1).get<std::uint64_t>();
  const std::uint64_t data_start = 8 + header_bytes;
  if (end < begin || end - begin != data_bytes || end > file_bytes - data_start) {
    throw std::runtime_error(path + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                             "] do not fit " + std::to_string(data_bytes) + " bytes in the file");
  }
  auto* p = reinterpret_cast<char*>(dest);
  std::uint64_t done = 0;
  while (done < data_bytes) {
    const ssize_t n =
        ::pread(fd.get(), p + done, data_bytes - done, static_cast<off_t>(data_start + begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw sys_error("cannot read", path);
    if (n == 0) throw std::runtime_error(path + ": file ends early");
    done += static_cast<std::uint64_t>(n);
  }
}

}  // namespace slowlink
