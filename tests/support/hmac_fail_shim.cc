// ws_hmac_fail_shim: an LD_PRELOAD library for the hardening test
// ("[hmac-shim]" in tests/integration/hardening_test.cc). It interposes
// OpenSSL's one-shot HMAC() and makes every call fail (NULL, no output), as
// OpenSSL does when the digest is unavailable (e.g. a FIPS configuration).
// The test looks up ws_hmac_fail_shim_active to know the shim is loaded.
#include <cstddef>

extern "C" {

struct evp_md_st;

__attribute__((visibility("default"))) int ws_hmac_fail_shim_active = 1;

__attribute__((visibility("default"))) unsigned char* HMAC(const evp_md_st* /*evp_md*/, const void* /*key*/,
                                                           int /*key_len*/, const unsigned char* /*data*/,
                                                           std::size_t /*data_len*/, unsigned char* /*md*/,
                                                           unsigned int* md_len) {
  if (md_len != nullptr) *md_len = 0;
  return nullptr;
}

}  // extern "C"
