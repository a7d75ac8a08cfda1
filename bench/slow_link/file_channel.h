// The copy step of the checkpoint-file path: the trainer serves a checkpoint
// file over a plain TCP socket, the generator receives it into a file.
//
// Contract
// - Wire (one request per connection, little-endian): the client sends
//   "WSCQ" u32, 0 u32, version u64; the server makes the file for that
//   version (FileMaker: writes it to its local disk), then answers "WSCA" u32,
//   status u32 (0: ok), write_ns u64 (the FileMaker's time), size u64, then
//   `size` bytes: the file (sendfile), or the error message when status != 0.
//   Then it closes the connection and removes the file.
// - Plain TCP, no authentication: a benchmark's stand-in for scp or a shared
//   filesystem copy; bind it to the test bed's address only.
// - FileServer: IPv4, port 0 (a free one), one thread that accepts and serves
//   one connection at a time; every socket call bounded by `io_timeout_s`.
//   The destructor stops the thread (within 100 ms) and joins it.
// - fetch_file(): connects (bounded), sends the request, receives the file
//   into `dest_path` (created or truncated), fsyncs and closes it. Throws
//   std::runtime_error on any failure, the server's message included.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace slowlink {

struct MadeFile {
  std::string path;
  double write_seconds = 0;
};
using FileMaker = std::function<MadeFile(std::uint64_t version)>;

class FileServer {
 public:
  FileServer(const std::string& bind_host, FileMaker maker, double io_timeout_s);
  ~FileServer();
  FileServer(const FileServer&) = delete;
  FileServer& operator=(const FileServer&) = delete;

  std::string address() const { return address_; }
  std::uint64_t served() const { return served_.load(); }
  // The last error met while serving ("" if none).
  std::string last_error() const;

 private:
  void run();
  void serve(int fd);

  FileMaker maker_;
  double io_timeout_s_;
  int listen_fd_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> served_{0};
  mutable std::mutex mu_;
  std::string last_error_;
  std::thread thread_;
};

struct FetchResult {
  double write_seconds = 0;  // the server's FileMaker (the checkpoint write)
  std::uint64_t bytes = 0;   // file size, as received
};

FetchResult fetch_file(const std::string& address, std::uint64_t version, const std::string& dest_path,
                       double timeout_s);

}  // namespace slowlink
