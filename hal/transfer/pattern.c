/* Deterministic stand-in KV bytes, written in one pass: row i of `out` (item bytes) is a mix of
 * token i, position i and a per-(layer, part) salt, spread over the row's columns. The same
 * arithmetic as hicache_ref.core.synthetic_kv's numpy form (uint64 wrap-around), so either
 * writes identical bytes; this one touches each output byte once instead of eight-byte temporaries. */
#include <stdint.h>

void hc_pattern(uint8_t *out, const uint64_t *tokens, const uint64_t *positions, int64_t n, int64_t item,
                uint64_t salt) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t mix = (tokens[i] * 0x9E3779B97F4A7C15ull) ^ (positions[i] * 0xC2B2AE3D27D4EB4Full) ^ salt;
    uint8_t *row = out + i * item;
    for (int64_t j = 0; j < item; j++) {
      uint64_t x = mix ^ ((uint64_t)j * 0xD6E8FEB86659FD93ull);
      x ^= x >> 29;
      x *= 0xBF58476D1CE4E5B9ull;
      row[j] = (uint8_t)(x >> 56);
    }
  }
}
