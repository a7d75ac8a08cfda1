// The checkpoint-file path of weightsync-slowlink: a safetensors file of one
// float32 tensor, written by the trainer, loaded by the generator.
//
// Contract
// - Format (https://github.com/huggingface/safetensors): 8-byte little-endian
//   header length N, N bytes of JSON {"__metadata__": {...}, "<name>":
//   {"dtype": "F32", "shape": [n], "data_offsets": [0, 4n]}} padded with
//   spaces to a multiple of 8, then the data.
// - write_safetensors() creates (or truncates) the file, writes it and closes
//   it without fsync (as safetensors' save_file does); returns its size.
// - load_safetensors() opens the file, reads and parses the header, checks
//   the tensor's dtype, shape and offsets against `elements` and the file's
//   size, and reads its data into `dest` (elements floats).
// - Errors throw std::runtime_error naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <string>

namespace slowlink {

std::uint64_t write_safetensors(const std::string& path, const std::string& tensor, const float* data,
                                std::uint64_t elements, std::uint64_t version);
void load_safetensors(const std::string& path, const std::string& tensor, float* dest,
                      std::uint64_t elements);

}  // namespace slowlink
