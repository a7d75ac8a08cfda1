// weightsync-integrity-rates: what the integrity layer costs per core, beside
// the link speeds it is meant for (docs/slow_links.md, "Integrity").
// Single-threaded throughput over one buffer, medians of --runs runs:
// xxHash3-64 (the plain checksum), the keyed version tag (HMAC-SHA256, as the
// publisher and subscribers compute it), and, for an encryption layer,
// AES-128-GCM and ChaCha20-Poly1305 from OpenSSL (seal in place), and the
// encryption layer's own record sealing (net/record_layer.h).
// With --pulls: whole pulls over loopback tcp, publisher and subscriber in
// this process, with checksums off, xxHash3 checksums, the integrity layer
// and encryption, each the median of --runs pulls, all in the same run.
#include <openssl/evp.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "auth/integrity.h"
#include "common/checksum.h"
#include "net/record_layer.h"
#include "weightsync/publisher.h"
#include "weightsync/subscriber.h"

namespace {

double seconds_of(const std::function<void()>& work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Encrypts `data` in place with an AEAD cipher (a fresh nonce per call, as
// a sealed record would have), returning nothing: only the time counts.
void aead_seal(const EVP_CIPHER* cipher, std::vector<unsigned char>& data) {
  unsigned char key[32] = {1}, iv[12] = {2}, tag[16];
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  EVP_EncryptInit_ex(ctx, cipher, nullptr, key, iv);
  // In records of 16 MiB (as kTLS would, in far smaller ones).
  for (std::size_t at = 0; at < data.size(); at += 16u << 20) {
    const int n = static_cast<int>(std::min<std::size_t>(16u << 20, data.size() - at));
    EVP_EncryptUpdate(ctx, data.data() + at, &len, data.data() + at, n);
  }
  EVP_EncryptFinal_ex(ctx, tag, &len);
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag);
  EVP_CIPHER_CTX_free(ctx);
}

// Seals `data` as the encryption layer sends it: records of 16 KiB, sealed
// 1 MiB at a time into a scratch buffer.
void record_seal(weightsync::detail::RecordLayer& records, const std::vector<unsigned char>& data,
                 std::vector<std::uint8_t>& out) {
  const std::size_t batch = 1u << 20;
  for (std::size_t at = 0; at < data.size(); at += batch) {
    const std::size_t n = std::min(batch, data.size() - at);
    iovec piece{const_cast<unsigned char*>(data.data()) + at, n};
    out.clear();
    if (!records.seal(&piece, 1, n, out).ok()) std::abort();
  }
}

// Median seconds of `runs` whole pulls of an `mib` MiB layout over loopback
// tcp, for one setting of the publisher and subscriber.
int measure_pulls(std::size_t mib, int runs) {
  using namespace weightsync;
  auto layout = WeightLayout::build({{"w", DType::kFloat32, {static_cast<std::int64_t>(mib << 18)}}});
  if (!layout.ok()) return 1;
  std::vector<std::uint8_t> image(layout->total_bytes());
  std::mt19937 rng(3);
  for (auto& b : image) b = static_cast<std::uint8_t>(rng());
  std::vector<std::uint8_t> dest(image.size());
  struct Setting {
    const char* name;
    bool checksum, integrity, encryption;
  };
  const Setting settings[] = {{"checksums off", false, false, false},
                              {"xxHash3 checksums", true, false, false},
                              {"integrity (HMAC tags, sealed frames)", true, true, false},
                              {"encryption (AES-128-GCM records)", true, true, true}};
  std::printf("whole pulls of %zu MiB over loopback tcp, publisher and subscriber in one process, median of %d\n",
              mib, runs);
  std::printf("%-42s %10s %10s\n", "", "seconds", "GB/s");
  double base = 0;
  for (const Setting& setting : settings) {
    PublisherOptions po;
    po.secret = "integrity-rates";
    po.checksum = setting.checksum;
    po.integrity = setting.integrity;
    po.encryption = setting.encryption;
    auto publisher = Publisher::create(*layout, po);
    if (!publisher.ok()) {
      std::fprintf(stderr, "weightsync-integrity-rates: %s\n", publisher.status().to_string().c_str());
      return 1;
    }
    SubscriberOptions so;
    so.secret = "integrity-rates";
    so.transport = "tcp";
    so.integrity = setting.integrity;
    so.encryption = setting.encryption;
    so.verify_checksum = setting.checksum;
    auto sub = Subscriber::connect((*publisher)->address(), so);
    if (!sub.ok()) {
      std::fprintf(stderr, "weightsync-integrity-rates: %s\n", sub.status().to_string().c_str());
      return 1;
    }
    std::vector<double> seconds;
    for (int r = 0; r <= runs; ++r) {  // the first pull warms up and is not counted
      if (!(*publisher)->publish(static_cast<std::uint64_t>(r + 1), image.data(), image.size()).ok()) return 1;
      const auto t0 = std::chrono::steady_clock::now();
      auto pulled = (*sub)->pull(Destination::contiguous(dest.data(), dest.size()));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!pulled.ok()) {
        std::fprintf(stderr, "weightsync-integrity-rates: %s\n", pulled.status().to_string().c_str());
        return 1;
      }
      if (r > 0) seconds.push_back(s);
    }
    const double m = median(seconds);
    if (base == 0) base = m;
    std::printf("%-42s %10.4f %10.2f   (%.2fx the time without checksums)\n", setting.name, m,
                static_cast<double>(image.size()) / m / 1e9, m / base);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  int runs = 5;
  bool pulls = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: weightsync-integrity-rates [--mib N] [--runs R] [--pulls]\n"
          "Single-core throughput of the plain checksum (xxHash3), the integrity layer's keyed\n"
          "version tag (HMAC-SHA256), and AES-128-GCM / ChaCha20-Poly1305 encryption (raw, and\n"
          "as the encryption layer's 16 KiB records), over an N MiB buffer (default 256), median\n"
          "of R runs (default 5), beside link speeds.\n"
          "--pulls: instead, whole N MiB pulls over loopback tcp with checksums off, xxHash3\n"
          "checksums, integrity and encryption, median of R pulls each, in one run.\n");
      return 0;
    } else if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--pulls") {
      pulls = true;
    } else {
      std::fprintf(stderr, "weightsync-integrity-rates: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (mib == 0 || runs < 1) {
    std::fprintf(stderr, "weightsync-integrity-rates: --mib and --runs must be positive\n");
    return 2;
  }
  if (pulls) return measure_pulls(mib, runs);
  std::vector<unsigned char> data(mib << 20);
  std::mt19937 rng(1);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  auto key = weightsync::detail::derive_version_key("integrity-rates");
  if (!key.ok()) {
    std::fprintf(stderr, "weightsync-integrity-rates: %s\n", key.status().to_string().c_str());
    return 1;
  }
  weightsync::detail::RecordKey record_key;
  record_key.key[0] = 1;
  auto records = weightsync::detail::RecordLayer::create(record_key, record_key);
  if (!records.ok()) {
    std::fprintf(stderr, "weightsync-integrity-rates: %s\n", records.status().to_string().c_str());
    return 1;
  }
  std::vector<std::uint8_t> sealed;
  volatile std::uint64_t sink = 0;
  struct Row {
    const char* name;
    std::function<void()> work;
  };
  std::vector<Row> rows = {
      {"xxHash3-64 (plain checksum)",
       [&] {
         weightsync::detail::StreamHasher h;
         h.update(data.data(), data.size());
         sink = sink + h.digest();
       }},
      {"HMAC-SHA256 version tag (integrity)",
       [&] {
         weightsync::detail::StreamHasher h(*key);
         h.update(data.data(), data.size());
         sink = sink + h.digest();
       }},
      {"AES-128-GCM (encryption, OpenSSL)", [&] { aead_seal(EVP_aes_128_gcm(), data); }},
      {"ChaCha20-Poly1305 (encryption, OpenSSL)", [&] { aead_seal(EVP_chacha20_poly1305(), data); }},
      {"AES-128-GCM 16 KiB records (encryption)", [&] { record_seal(**records, data, sealed); }},
  };
  std::printf("one core, %zu MiB buffer, median of %d runs\n", mib, runs);
  std::printf("%-42s %10s   %s\n", "", "GB/s", "fastest link it keeps up with (100 Mbit/s, 1, 10, 100 Gbit/s)");
  for (auto& row : rows) {
    std::vector<double> rates;
    row.work();  // warm up: page faults, OpenSSL dispatch
    for (int r = 0; r < runs; ++r) rates.push_back(static_cast<double>(data.size()) / seconds_of(row.work) / 1e9);
    const double gbs = median(rates);
    const char* link = gbs >= 12.5 ? "100 Gbit/s" : gbs >= 1.25 ? "10 Gbit/s" : gbs >= 0.125 ? "1 Gbit/s"
                                                                  : gbs >= 0.0125 ? "100 Mbit/s" : "none";
    std::printf("%-42s %10.2f   %s\n", row.name, gbs, link);
  }
  return 0;
}
