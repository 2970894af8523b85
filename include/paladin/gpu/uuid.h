// GPU UUIDs as text, the way NVML and CUDA_VISIBLE_DEVICES write them:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lowercase hex of the 16 bytes). Header-only and
// allocation-free, for the preloaded libraries as well as Paladin's own programs.
#ifndef PALADIN_GPU_UUID_H_
#define PALADIN_GPU_UUID_H_

namespace paladin::gpu {

inline constexpr int kUuidTextSize = 41;  // with the terminating NUL

inline void FormatUuid(const void* bytes, char out[kUuidTextSize]) {
  const char* kHex = "0123456789abcdef";
  const auto* b = static_cast<const unsigned char*>(bytes);
  int o = 0;
  out[o++] = 'G';
  out[o++] = 'P';
  out[o++] = 'U';
  out[o++] = '-';
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
    out[o++] = kHex[b[i] >> 4];
    out[o++] = kHex[b[i] & 0xf];
  }
  out[o] = '\0';
}

// Parses the text form (hex digits in either case; dashes ignored). False on anything else.
inline bool ParseUuid(const char* text, void* bytes) {
  auto* out = static_cast<unsigned char*>(bytes);
  if (text == nullptr || text[0] != 'G' || text[1] != 'P' || text[2] != 'U' || text[3] != '-') {
    return false;
  }
  int nibbles = 0;
  for (const char* p = text + 4; *p != '\0'; ++p) {
    if (*p == '-') continue;
    const char c = static_cast<char>(*p | 0x20);
    int v = -1;
    if (*p >= '0' && *p <= '9') v = *p - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (v < 0 || nibbles >= 32) return false;
    out[nibbles / 2] = static_cast<unsigned char>(nibbles % 2 == 0 ? v << 4 : out[nibbles / 2] | v);
    ++nibbles;
  }
  return nibbles == 32;
}

}  // namespace paladin::gpu

#endif  // PALADIN_GPU_UUID_H_
