/* One memcpy per segment: the CPU stand-in for a DMA engine walking a descriptor list.
 * Segments are split across up to `nthreads` threads by bytes, so a plan of many small
 * descriptors and a plan of a few large ones both use the machine's memory bandwidth. */
#include <stdint.h>
#include <string.h>

#include "threads.h"

typedef struct {
  const uint64_t *src, *dst, *len;
  int64_t lo, hi;
} hc_job;

static void *hc_run(void *arg) {
  const hc_job *j = (const hc_job *)arg;
  for (int64_t i = j->lo; i < j->hi; i++)
    memcpy((void *)(uintptr_t)j->dst[i], (const void *)(uintptr_t)j->src[i], (size_t)j->len[i]);
  return 0;
}

int hc_copy_segments(const uint64_t *src, const uint64_t *dst, const uint64_t *len, int64_t n, int nthreads) {
  if (n <= 0) return 0;
  int64_t lo[HC_MAX_THREADS], hi[HC_MAX_THREADS];
  int k = hc_split(len, n, nthreads, lo, hi);
  hc_job jobs[HC_MAX_THREADS];
  for (int t = 0; t < k; t++) jobs[t] = (hc_job){src, dst, len, lo[t], hi[t]};
  return hc_run_all(hc_run, jobs, sizeof jobs[0], k);
}

/* The split hc_copy_segments makes (hal/transfer/threads.h), for tests and tools: runs in lo/hi. */
int hc_split_runs(const uint64_t *w, int64_t n, int nthreads, int64_t *lo, int64_t *hi) {
  return n > 0 ? hc_split(w, n, nthreads, lo, hi) : 0;
}
