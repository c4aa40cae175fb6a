/* Copy segments and digest the copied bytes in the same pass over memory. Each segment moves in
 * chunks small enough to stay in the core's cache: the digest reads a chunk from memory, and the
 * copy then streams it from cache to the destination, so each byte is read from DRAM once. A segment with no destination is digested in
 * place. Objects are digested one after another: object k is prefix k, then its segments in order.
 * XXH3-128 is an xxHash library's (the Python xxhash module's, or the system's libxxhash), bound
 * by hc_dc_init; its streaming state is opaque here. */
#include <dlfcn.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdint.h>
#include <string.h>

typedef struct {
  uint64_t low64, high64;
} hc_h128; /* XXH128_hash_t */

static void *(*x_create)(void);
static int (*x_free)(void *);
static int (*x_reset)(void *);
static int (*x_update)(void *, const void *, size_t);
static hc_h128 (*x_digest)(const void *);

int hc_dc_init(const char *library) {
  void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  x_create = (void *(*)(void))dlsym(h, "XXH3_createState");
  x_free = (int (*)(void *))dlsym(h, "XXH3_freeState");
  x_reset = (int (*)(void *))dlsym(h, "XXH3_128bits_reset");
  /* the x86 dispatching update picks AVX2/AVX-512 where the CPU has it; the plain one may be SSE2 */
  x_update = (int (*)(void *, const void *, size_t))dlsym(h, "XXH3_128bits_update_dispatch");
  if (!x_update) x_update = (int (*)(void *, const void *, size_t))dlsym(h, "XXH3_128bits_update");
  x_digest = (hc_h128(*)(const void *))dlsym(h, "XXH3_128bits_digest");
  return x_create && x_free && x_reset && x_update && x_digest ? 0 : -2;
}

/* The chunk was just digested, so its source is in cache: stream it to the destination without
 * reading the destination's lines first (what a plain memcpy of a small chunk would do). */
static void stream_copy(uint8_t *d, const uint8_t *s, size_t n) {
#ifdef __SSE2__
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (n < 256 || head > n) {
    memcpy(d, s, n);
    return;
  }
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  memcpy(d, s, n);
#else
  memcpy(d, s, n);
#endif
}

static void put_be64(uint8_t *out, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8) out[i] = (uint8_t)v;
}

/* counts[k] segments for object k; prefixes: concatenated, prefix k at prefix_at[k], prefix_len[k]
 * bytes; out: 16 bytes per object, canonical (big-endian high then low half, as XXH128_canonical). */
int hc_copy_digest(const uint64_t *src, const uint64_t *dst, const uint64_t *len, const int64_t *counts,
                   int64_t objects, const uint8_t *prefixes, const uint64_t *prefix_at,
                   const uint64_t *prefix_len, uint64_t chunk, uint8_t *out) {
  if (!x_create) return -1;
  void *state = x_create();
  if (!state) return -2;
  if (chunk == 0) chunk = 64 << 10;
  int64_t seg = 0;
  for (int64_t k = 0; k < objects; k++) {
    x_reset(state);
    x_update(state, prefixes + prefix_at[k], (size_t)prefix_len[k]);
    for (int64_t end = seg + counts[k]; seg < end; seg++) {
      const uint8_t *s = (const uint8_t *)(uintptr_t)src[seg];
      uint8_t *d = (uint8_t *)(uintptr_t)dst[seg];
      for (uint64_t at = 0; at < len[seg]; at += chunk) {
        size_t n = (size_t)(len[seg] - at < chunk ? len[seg] - at : chunk);
        x_update(state, s + at, n);
        if (d) stream_copy(d + at, s + at, n);
      }
    }
    hc_h128 h = x_digest(state);
    put_be64(out + 16 * k, h.high64);
    put_be64(out + 16 * k + 8, h.low64);
  }
  x_free(state);
#ifdef __SSE2__
  _mm_sfence(); /* streamed stores visible before the caller reads the destination */
#endif
  return 0;
}
