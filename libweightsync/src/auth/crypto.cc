// OpenSSL-backed primitives for the handshake (crypto.h).
#include "auth/crypto.h"

#include <climits>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace weightsync::detail {

Result<Mac> hmac_sha256(const std::string& key, const std::vector<std::uint8_t>& message) {
  Mac out{};
  unsigned int len = 0;
  if (key.size() > static_cast<std::size_t>(INT_MAX)) {
    return Status(ErrorCode::kInvalidConfig, "the shared secret is too long for HMAC; use a shorter secret");
  }
  const unsigned char* mac = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(),
                                  message.size(), out.data(), &len);
  if (mac == nullptr || len != out.size()) {
    return Status(ErrorCode::kInternal,
                  "OpenSSL could not compute HMAC-SHA256 (check the OpenSSL installation, e.g. a FIPS "
                  "configuration that disables SHA-256); refusing to authenticate without it");
  }
  return out;
}

bool constant_time_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace weightsync::detail
