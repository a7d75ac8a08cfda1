#include "zorplex/keys.h"

#include <openssl/evp.h>

namespace zorplex {

Result<std::string> make_key(std::string_view word, std::int64_t seed) {
  const std::string text = std::string(word) + "_" + std::to_string(seed);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_length = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &digest_length, EVP_md5(), nullptr) != 1 ||
      digest_length < 3) {
    return Error{"MD5 is unavailable in this OpenSSL configuration (multi_step keys need it)"};
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string key(kKeyPrefix);
  for (int i = 0; i < 3; ++i) {
    key += kHex[digest[i] >> 4];
    key += kHex[digest[i] & 0x0f];
  }
  return key;
}

}  // namespace zorplex
