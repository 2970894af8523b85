// The end of a SHA-256 computed with OpenSSL's EVP interface, as the image's manifest spells it.
#ifndef PALADIN_SRC_CKPT_SHA256_HEX_H_
#define PALADIN_SRC_CKPT_SHA256_HEX_H_

#include <openssl/evp.h>

#include <string>

namespace paladin::ckpt {

// Finishes the digest of `ctx` (from EVP_MD_CTX_new, initialised with EVP_sha256), frees `ctx`
// and returns the digest in lower-case hex.
std::string FinishSha256Hex(EVP_MD_CTX* ctx);

}  // namespace paladin::ckpt

#endif  // PALADIN_SRC_CKPT_SHA256_HEX_H_
