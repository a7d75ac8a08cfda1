// weightsync-integrity-rates: what the integrity layer costs per core, beside
// the link speeds it is meant for (docs/slow_links.md, "Integrity").
// Single-threaded throughput over one buffer, medians of --runs runs:
// xxHash3-64 (the plain checksum), the keyed version tag (HMAC-SHA256, as the
// publisher and subscribers compute it), and, for an encryption layer,
// AES-128-GCM and ChaCha20-Poly1305 from OpenSSL (seal in place).
#include <openssl/evp.h>

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

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: weightsync-integrity-rates [--mib N] [--runs R]\n"
          "Single-core throughput of the plain checksum (xxHash3), the integrity layer's keyed\n"
          "version tag (HMAC-SHA256), and AES-128-GCM / ChaCha20-Poly1305 encryption, over an\n"
          "N MiB buffer (default 256), median of R runs (default 5), beside link speeds.\n");
      return 0;
    } else if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "weightsync-integrity-rates: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (mib == 0 || runs < 1) {
    std::fprintf(stderr, "weightsync-integrity-rates: --mib and --runs must be positive\n");
    return 2;
  }
  std::vector<unsigned char> data(mib << 20);
  std::mt19937 rng(1);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  auto key = weightsync::detail::derive_version_key("integrity-rates");
  if (!key.ok()) {
    std::fprintf(stderr, "weightsync-integrity-rates: %s\n", key.status().to_string().c_str());
    return 1;
  }
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
