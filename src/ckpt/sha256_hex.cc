#include "sha256_hex.h"

#include <cstdio>

namespace paladin::ckpt {

std::string FinishSha256Hex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < len; ++i) {
    snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

}  // namespace paladin::ckpt
