// policy/safetensors.cc: see safetensors.h.
#include "policy/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <utility>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little endian; so must the host be");

namespace policy {

const char* const kPolicyFormat = "weightsync-policy/1";

namespace {

using Json = nlohmann::ordered_json;

constexpr std::uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // the reference implementation's limit

struct DTypeInfo {
  const char* name;
  torch::ScalarType type;
  std::uint64_t size;
};
constexpr DTypeInfo kDTypes[] = {{"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4},
                                 {"F16", torch::kFloat16, 2}, {"BF16", torch::kBFloat16, 2},
                                 {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
                                 {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},
                                 {"U8", torch::kUInt8, 1},    {"BOOL", torch::kBool, 1}};

const DTypeInfo* dtype_by_type(torch::ScalarType type) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

const DTypeInfo* dtype_by_name(const std::string& name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

// The 8-byte length and the padded JSON header, and the CPU tensors whose
// bytes follow in order.
zorplex::Result<std::string> build_header(const std::vector<NamedTensor>& tensors, const Metadata& metadata,
                                          std::vector<torch::Tensor>* cpu) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (const NamedTensor& nt : tensors) {
    if (nt.name.empty() || nt.name == "__metadata__") {
      return zorplex::Error{"tensor name '" + nt.name + "' is not allowed (empty or __metadata__)"};
    }
    if (header.contains(nt.name)) return zorplex::Error{"tensor name '" + nt.name + "' appears twice"};
    if (!nt.tensor.defined()) return zorplex::Error{"tensor '" + nt.name + "' is undefined"};
    const DTypeInfo* dtype = dtype_by_type(nt.tensor.scalar_type());
    if (dtype == nullptr) {
      return zorplex::Error{"tensor '" + nt.name + "' has dtype " +
                            std::string(c10::toString(nt.tensor.scalar_type())) +
                            ", which safetensors cannot hold here"};
    }
    torch::Tensor t = nt.tensor.detach().to(torch::kCPU).contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * dtype->size;
    Json shape = Json::array();
    for (std::int64_t d : t.sizes()) shape.push_back(static_cast<std::uint64_t>(d));
    header[nt.name] = Json{
        {"dtype", dtype->name}, {"shape", shape}, {"data_offsets", Json::array({offset, offset + bytes})}};
    offset += bytes;
    cpu->push_back(std::move(t));
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  std::uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  out += json;
  return out;
}

bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t w = ::write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    size -= static_cast<std::size_t>(w);
  }
  return true;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

zorplex::Result<std::int64_t> copy_into_model(const SafetensorsContents& contents, Transformer& model,
                                              const std::string& where) {
  const auto& specs = model.specs();
  if (contents.tensors.size() != specs.size()) {
    return zorplex::Error{where + ": holds " + std::to_string(contents.tensors.size()) +
                          " tensors; the model has " + std::to_string(specs.size()) + " parameters"};
  }
  std::map<std::string, const torch::Tensor*> by_name;
  for (const NamedTensor& nt : contents.tensors) by_name[nt.name] = &nt.tensor;
  // Check everything before writing anything.
  for (const ParamSpec& spec : specs) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end()) return zorplex::Error{where + ": parameter '" + spec.name + "' is missing"};
    const torch::Tensor& t = *it->second;
    if (t.scalar_type() != torch::kFloat32) {
      return zorplex::Error{where + ": parameter '" + spec.name + "' is not F32"};
    }
    if (t.sizes().vec() != spec.shape) {
      return zorplex::Error{where + ": parameter '" + spec.name + "' has shape " + c10::str(t.sizes()) +
                            ", expected " + c10::str(c10::IntArrayRef(spec.shape))};
    }
  }
  torch::NoGradGuard no_grad;
  torch::Tensor flat = model.flat_parameters();
  for (const ParamSpec& spec : specs) {
    flat.narrow(0, spec.offset, spec.numel).copy_(by_name[spec.name]->reshape({-1}));
  }
  return static_cast<std::int64_t>(specs.size());
}

}  // namespace

zorplex::Result<std::string> serialize_safetensors(const std::vector<NamedTensor>& tensors,
                                                   const Metadata& metadata) try {
  std::vector<torch::Tensor> cpu;
  auto header = build_header(tensors, metadata, &cpu);
  if (!header.ok()) return header.error();
  std::string out = std::move(header).value();
  for (const torch::Tensor& t : cpu) {
    out.append(static_cast<const char*>(t.data_ptr()),
               static_cast<std::size_t>(t.numel() * t.element_size()));
  }
  return zorplex::Result<std::string>(std::move(out));
} catch (const std::exception& e) {
  return zorplex::Error{std::string("serializing safetensors failed: ") + e.what()};
}

zorplex::Result<SafetensorsContents> parse_safetensors(std::string_view bytes) try {
  if (bytes.size() < 8) {
    return zorplex::Error{"truncated: " + std::to_string(bytes.size()) +
                          " bytes, less than the 8-byte header length"};
  }
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes) return zorplex::Error{"header length " + std::to_string(n) + " exceeds 100 MB"};
  if (n > bytes.size() - 8) {
    return zorplex::Error{"truncated: the header says " + std::to_string(n) + " bytes, the file has " +
                          std::to_string(bytes.size() - 8) + " after the length"};
  }
  const std::string_view text = bytes.substr(8, n);
  Json header = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return zorplex::Error{"the header is not a JSON object"};
  const std::string_view data = bytes.substr(8 + n);

  SafetensorsContents contents;
  struct Range {
    std::uint64_t begin, end;
    std::size_t index;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return zorplex::Error{"__metadata__ is not an object"};
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          return zorplex::Error{"__metadata__ value of '" + m.key() + "' is not a string"};
        contents.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!entry.is_object()) return zorplex::Error{where + "entry is not an object"};
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) return zorplex::Error{where + "no dtype string"};
    const DTypeInfo* dtype = dtype_by_name(dtype_it->get<std::string>());
    if (dtype == nullptr)
      return zorplex::Error{where + "unsupported dtype '" + dtype_it->get<std::string>() + "'"};
    if (shape_it == entry.end() || !shape_it->is_array()) return zorplex::Error{where + "no shape array"};
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 1;
    for (const Json& d : *shape_it) {
      if (!d.is_number_unsigned()) return zorplex::Error{where + "shape holds something other than a count"};
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel)) {
        return zorplex::Error{where + "shape overflows"};
      }
      shape.push_back(static_cast<std::int64_t>(dim));
    }
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, dtype->size, &nbytes)) return zorplex::Error{where + "size overflows"};
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return zorplex::Error{where + "data_offsets is not [begin, end]"};
    }
    const std::uint64_t begin = (*offsets_it)[0].get<std::uint64_t>();
    const std::uint64_t end = (*offsets_it)[1].get<std::uint64_t>();
    if (begin > end || end > data.size()) {
      return zorplex::Error{where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            "] lie outside the " + std::to_string(data.size()) +
                            " data bytes (truncated file?)"};
    }
    if (end - begin != nbytes) {
      return zorplex::Error{where + "data_offsets span " + std::to_string(end - begin) +
                            " bytes; dtype and shape need " + std::to_string(nbytes)};
    }
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dtype->type));
    if (nbytes > 0) std::memcpy(t.data_ptr(), data.data() + begin, nbytes);
    ranges.push_back({begin, end, contents.tensors.size()});
    contents.tensors.push_back({name, std::move(t)});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  for (const Range& r : ranges) {
    if (r.begin != expected) {
      return zorplex::Error{"tensor '" + contents.tensors[r.index].name + "' starts at data byte " +
                            std::to_string(r.begin) + ", expected " + std::to_string(expected) +
                            " (hole or overlap)"};
    }
    expected = r.end;
  }
  if (expected != data.size()) {
    return zorplex::Error{"the tensors cover " + std::to_string(expected) + " data bytes; the file has " +
                          std::to_string(data.size())};
  }
  return zorplex::Result<SafetensorsContents>(std::move(contents));
} catch (const std::exception& e) {
  return zorplex::Error{std::string("parsing safetensors failed: ") + e.what()};
}

zorplex::Result<std::uint64_t> write_safetensors(const std::string& path,
                                                 const std::vector<NamedTensor>& tensors,
                                                 const Metadata& metadata) try {
  std::vector<torch::Tensor> cpu;
  auto header = build_header(tensors, metadata, &cpu);
  if (!header.ok()) return header.error();
  static std::atomic<unsigned> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return zorplex::Error{"cannot create " + tmp + ": " + errno_text(errno)};
  std::uint64_t total = header.value().size();
  bool ok = write_all(fd, header.value().data(), header.value().size());
  for (std::size_t i = 0; ok && i < cpu.size(); ++i) {
    const auto size = static_cast<std::size_t>(cpu[i].numel() * cpu[i].element_size());
    ok = write_all(fd, cpu[i].data_ptr(), size);
    total += size;
  }
  int err = ok ? 0 : errno;
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    err = errno;
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return zorplex::Error{"writing " + path + " failed: " + errno_text(err)};
  }
  int dir = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // best effort: the rename is durable once the directory is
    ::close(dir);
  }
  return total;
} catch (const std::exception& e) {
  return zorplex::Error{"writing " + path + " failed: " + e.what()};
}

zorplex::Result<SafetensorsContents> read_safetensors(const std::string& path) try {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return zorplex::Error{"cannot open " + path + ": " + errno_text(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return zorplex::Error{"cannot stat " + path + ": " + errno_text(err)};
  }
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t r = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      return zorplex::Error{"reading " + path + " failed: " + errno_text(err)};
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
  bytes.resize(done);
  auto parsed = parse_safetensors(bytes);
  if (!parsed.ok()) return zorplex::Error{path + ": " + parsed.error().message};
  return parsed;
} catch (const std::exception& e) {
  return zorplex::Error{"reading " + path + " failed: " + e.what()};
}

zorplex::Result<std::uint64_t> save_model(const std::string& path, const Transformer& model,
                                          const Metadata& extra) try {
  Metadata metadata = model.config().to_map();
  metadata["format"] = kPolicyFormat;
  for (const auto& [key, value] : extra) {
    if (metadata.count(key) != 0) return zorplex::Error{"extra metadata key '" + key + "' is reserved"};
  }
  for (const auto& [key, value] : extra) metadata[key] = value;
  std::vector<NamedTensor> tensors;
  for (std::size_t i = 0; i < model.specs().size(); ++i) {
    tensors.push_back({model.specs()[i].name, model.parameters()[i].detach()});
  }
  return write_safetensors(path, tensors, metadata);
} catch (const std::exception& e) {
  return zorplex::Error{"saving the model to " + path + " failed: " + e.what()};
}

zorplex::Result<Transformer> load_model(const std::string& path, torch::Device device) try {
  auto contents = read_safetensors(path);
  if (!contents.ok()) return contents.error();
  const Metadata& metadata = contents.value().metadata;
  auto format = metadata.find("format");
  if (format == metadata.end() || format->second != kPolicyFormat) {
    return zorplex::Error{path + ": not a policy checkpoint (__metadata__ format is not " +
                          std::string(kPolicyFormat) + ")"};
  }
  auto config = ModelConfig::from_map(metadata);
  if (!config.ok()) return zorplex::Error{path + ": " + config.error().message};
  auto model = Transformer::create(config.value(), 0, device);
  if (!model.ok()) return model.error();
  auto copied = copy_into_model(contents.value(), model.value(), path);
  if (!copied.ok()) return copied.error();
  return model;
} catch (const std::exception& e) {
  return zorplex::Error{"loading the model from " + path + " failed: " + e.what()};
}

zorplex::Result<std::int64_t> load_model_into(const std::string& path, Transformer& model) try {
  auto contents = read_safetensors(path);
  if (!contents.ok()) return contents.error();
  auto config = ModelConfig::from_map(contents.value().metadata);
  if (!config.ok()) return zorplex::Error{path + ": " + config.error().message};
  if (config.value() != model.config())
    return zorplex::Error{path + ": the file's model config differs from the model's"};
  return copy_into_model(contents.value(), model, path);
} catch (const std::exception& e) {
  return zorplex::Error{"loading the model from " + path + " failed: " + e.what()};
}

}  // namespace policy
