// policy/safetensors.h: the safetensors file format, written and read by
// hand, and the policy checkpoint on top of it.
//
// Contract
// - Format (https://github.com/huggingface/safetensors): 8 bytes, little
//   endian, the header length N; N bytes of JSON, an object mapping each
//   tensor name to {"dtype", "shape", "data_offsets": [begin, end]} plus an
//   optional "__metadata__" object of string -> string; then the data, each
//   tensor row-major little endian at [begin, end) relative to the end of the
//   header. The writer pads the header with spaces to a multiple of 8 bytes,
//   keeps the tensors in the order given (header order = data order), and
//   writes to a temporary file in the same directory, fsyncs it and renames it
//   over path, so a reader never sees a partial file.
// - The reader checks everything before use: the file is at least 8 bytes,
//   N fits in the file and is at most 100 MB, the header is a JSON object,
//   each entry has a known dtype, a shape of non-negative integers and
//   offsets with begin <= end, end - begin == numel * element size (overflow
//   checked), and the entries cover the data exactly, without holes, overlaps
//   or trailing bytes. A truncated or corrupt file is an Error saying what is
//   wrong, never a crash. Tensors come back in header order, on the CPU.
// - dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL (torch's names for them).
// - save_model() writes every parameter as its own F32 entry, in
//   parameter_specs() order, with the ModelConfig (ModelConfig::to_map()) and
//   "format" = "weightsync-policy/1" in __metadata__, plus the caller's extra
//   metadata. load_model() rebuilds the model from that metadata and checks
//   that the entries are exactly the parameters (names, F32, shapes);
//   load_model_into() copies them into an existing model's buffer in place
//   after checking that the file's config equals the model's. A round trip is
//   bit-exact.
// - Functions are reentrant; distinct paths may be used concurrently. Every
//   failure (I/O, format, torch) is returned as an Error; nothing throws
//   except std::bad_alloc.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "policy/transformer.h"
#include "zorplex/result.h"

namespace policy {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

using Metadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  std::vector<NamedTensor> tensors;  // header order
  Metadata metadata;
};

// The format version save_model() writes into __metadata__["format"].
extern const char* const kPolicyFormat;

// The whole file as bytes (tensors on any device are copied to the CPU).
zorplex::Result<std::string> serialize_safetensors(const std::vector<NamedTensor>& tensors,
                                                   const Metadata& metadata = {});
// Parses a whole file held in memory.
zorplex::Result<SafetensorsContents> parse_safetensors(std::string_view bytes);

// Writes atomically (temporary file + rename); returns the bytes written.
zorplex::Result<std::uint64_t> write_safetensors(const std::string& path,
                                                 const std::vector<NamedTensor>& tensors,
                                                 const Metadata& metadata = {});
zorplex::Result<SafetensorsContents> read_safetensors(const std::string& path);

// Returns the bytes written. extra may not use the config's keys or "format".
zorplex::Result<std::uint64_t> save_model(const std::string& path, const Transformer& model,
                                          const Metadata& extra = {});
zorplex::Result<Transformer> load_model(const std::string& path, torch::Device device = torch::kCPU);
// Returns the number of parameters (entries) copied.
zorplex::Result<std::int64_t> load_model_into(const std::string& path, Transformer& model);

}  // namespace policy
