// channel/channel_keys.cc: see channel_keys.h.
#include "channel/channel_keys.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <zmq.h>

namespace channel {
namespace {

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &length);
  return std::string(reinterpret_cast<const char*>(out), length);
}

// HKDF-SHA256 with a 32-byte output: one block of HKDF-Expand.
std::string hkdf32(const std::string& secret, const std::string& info) {
  const std::string prk = hmac_sha256("weightsync trajectory channel/1", secret);
  return hmac_sha256(prk, info + '\x01');
}

zorplex::Result<std::string> public_of(const std::string& secret_key) {
  char secret_z85[41] = {};
  char public_z85[41] = {};
  std::string public_key(32, '\0');
  if (zmq_z85_encode(secret_z85, reinterpret_cast<const std::uint8_t*>(secret_key.data()), 32) == nullptr ||
      zmq_curve_public(public_z85, secret_z85) != 0 ||
      zmq_z85_decode(reinterpret_cast<std::uint8_t*>(public_key.data()), public_z85) == nullptr) {
    return zorplex::Error{"trajectory channel: cannot make a CURVE public key (ZeroMQ without CURVE?)"};
  }
  return public_key;
}

}  // namespace

zorplex::Result<ChannelKeys> derive_channel_keys(const std::string& secret) {
  if (secret.empty()) return zorplex::Error{"trajectory channel: no secret to derive CURVE keys from"};
  if (!zmq_has("curve")) return zorplex::Error{"trajectory channel: this ZeroMQ has no CURVE"};
  ChannelKeys keys;
  keys.server_secret = hkdf32(secret, "curve server");
  keys.client_secret = hkdf32(secret, "curve client");
  auto server = public_of(keys.server_secret);
  auto client = public_of(keys.client_secret);
  if (!server) return server.error();
  if (!client) return client.error();
  keys.server_public = server.value();
  keys.client_public = client.value();
  return keys;
}

std::string z85_key(const std::string& key) {
  char text[41] = {};
  if (key.size() != 32 ||
      zmq_z85_encode(text, reinterpret_cast<const std::uint8_t*>(key.data()), 32) == nullptr)
    return "";
  return text;
}

}  // namespace channel
