/* Copy segments and digest the copied bytes in the same pass over memory. Each segment moves in
 * chunks small enough to stay in the core's cache: the digest reads a chunk from memory, and the
 * copy then streams it from cache to the destination, so each byte is read from DRAM once. A segment with no destination is digested in
 * place. Object k's digest is prefix k, then its segments in order.
 * Objects are split across up to `nthreads` threads by bytes (an object's digest is one stream, so
 * it stays on one thread): one core's copy does not reach the machine's memory bandwidth.
 * XXH3-128 is an xxHash library's (the Python xxhash module's, or the system's libxxhash), bound
 * by hc_dc_init; its streaming state is opaque here. */
#include <dlfcn.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdint.h>
#include <string.h>

#include "threads.h"

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
  if (!(x_create && x_free && x_reset && x_update && x_digest)) return -2;
  /* one update here, on one thread: the dispatching update picks its kernel on first use */
  void *state = x_create();
  if (!state) return -3;
  x_reset(state);
  x_update(state, "", 0);
  x_update(state, library, strlen(library));
  x_free(state);
  return 0;
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

typedef struct {
  const uint64_t *src, *dst, *len, *seg_at;
  const int64_t *counts;
  const uint8_t *prefixes;
  const uint64_t *prefix_at, *prefix_len;
  uint64_t chunk;
  uint8_t *out;
  int64_t lo, hi; /* objects [lo, hi) */
  int rc;
} hc_dc_job;

static void *hc_dc_run(void *arg) {
  hc_dc_job *j = (hc_dc_job *)arg;
  void *state = x_create();
  if (!state) {
    j->rc = -2;
    return 0;
  }
  for (int64_t k = j->lo; k < j->hi; k++) {
    x_reset(state);
    x_update(state, j->prefixes + j->prefix_at[k], (size_t)j->prefix_len[k]);
    for (int64_t seg = (int64_t)j->seg_at[k], end = seg + j->counts[k]; seg < end; seg++) {
      const uint8_t *s = (const uint8_t *)(uintptr_t)j->src[seg];
      uint8_t *d = (uint8_t *)(uintptr_t)j->dst[seg];
      for (uint64_t at = 0; at < j->len[seg]; at += j->chunk) {
        size_t n = (size_t)(j->len[seg] - at < j->chunk ? j->len[seg] - at : j->chunk);
        x_update(state, s + at, n);
        if (d) stream_copy(d + at, s + at, n);
      }
    }
    hc_h128 h = x_digest(state);
    put_be64(j->out + 16 * k, h.high64);
    put_be64(j->out + 16 * k + 8, h.low64);
  }
  x_free(state);
#ifdef __SSE2__
  _mm_sfence(); /* this thread's streamed stores visible before the caller reads the destination */
#endif
  j->rc = 0;
  return 0;
}

/* counts[k] segments for object k, from segment seg_at[k]; obj_bytes[k]: its payload bytes;
 * prefixes: concatenated, prefix k at prefix_at[k], prefix_len[k] bytes; out: 16 bytes per object,
 * canonical (big-endian high then low half, as XXH128_canonical). Returns the threads used, or a
 * negative code. */
int hc_copy_digest(const uint64_t *src, const uint64_t *dst, const uint64_t *len, const int64_t *counts,
                   const uint64_t *seg_at, const uint64_t *obj_bytes, int64_t objects, const uint8_t *prefixes,
                   const uint64_t *prefix_at, const uint64_t *prefix_len, uint64_t chunk, int nthreads,
                   uint8_t *out) {
  if (!x_create) return -1;
  if (objects <= 0) return 0;
  if (chunk == 0) chunk = 64 << 10;
  int64_t lo[HC_MAX_THREADS], hi[HC_MAX_THREADS];
  int n = hc_split(obj_bytes, objects, nthreads, lo, hi);
  hc_dc_job jobs[HC_MAX_THREADS];
  for (int t = 0; t < n; t++)
    jobs[t] = (hc_dc_job){src, dst, len, seg_at, counts, prefixes, prefix_at, prefix_len, chunk, out, lo[t], hi[t], 0};
  int started = hc_run_all(hc_dc_run, jobs, sizeof jobs[0], n);
  int rc = 0;
  for (int t = 0; t < n; t++)
    if (jobs[t].rc) rc = jobs[t].rc;
  return rc ? rc : started;
}
