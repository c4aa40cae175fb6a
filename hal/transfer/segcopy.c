/* One memcpy per segment: the CPU stand-in for a DMA engine walking a descriptor list.
 * Segments are split across up to `nthreads` threads by bytes, so a plan of many small
 * descriptors and a plan of a few large ones both use the machine's memory bandwidth. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define HC_MAX_THREADS 64

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
  if (nthreads < 1) nthreads = 1;
  if (nthreads > HC_MAX_THREADS) nthreads = HC_MAX_THREADS;
  if (nthreads > n) nthreads = (int)n;
  uint64_t total = 0;
  for (int64_t i = 0; i < n; i++) total += len[i];
  hc_job jobs[HC_MAX_THREADS];
  pthread_t tids[HC_MAX_THREADS];
  uint64_t share = total / (uint64_t)nthreads + 1, acc = 0;
  int64_t start = 0;
  int k = 0;
  for (int64_t i = 0; i < n && k < nthreads - 1; i++) {
    acc += len[i];
    if (acc >= share * (uint64_t)(k + 1)) {
      jobs[k] = (hc_job){src, dst, len, start, i + 1};
      start = i + 1;
      k++;
    }
  }
  jobs[k++] = (hc_job){src, dst, len, start, n};
  int started = 1;
  for (int t = 1; t < k; t++) {
    if (pthread_create(&tids[t], 0, hc_run, &jobs[t]) != 0) {
      hc_run(&jobs[t]); /* no thread to be had: do that share here */
      tids[t] = 0;
    } else {
      started++;
    }
  }
  hc_run(&jobs[0]);
  for (int t = 1; t < k; t++)
    if (tids[t]) pthread_join(tids[t], 0);
  return started;
}
