/* Work spread over threads by bytes, shared by the copy engines (segcopy.c, digestcopy.c): items
 * (segments, objects) are cut into at most `nthreads` runs of about equal bytes, one run a thread,
 * the first on the calling thread. Included by each engine's source (static: one copy each). */
#ifndef HC_THREADS_H
#define HC_THREADS_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define HC_MAX_THREADS 64

/* Cut items [0, n), item i weighing w[i] bytes, into runs [lo[t], hi[t]) of about total/nthreads
 * bytes each; returns their count (1..min(nthreads, n), none empty; n > 0). A run ends where the
 * running total meets its share, or before the item that would overshoot the share by more than
 * stopping short of it does, so two equal items go to two threads and one large item stands alone. */
static int hc_split(const uint64_t *w, int64_t n, int nthreads, int64_t *lo, int64_t *hi) {
  if (nthreads < 1) nthreads = 1;
  if (nthreads > HC_MAX_THREADS) nthreads = HC_MAX_THREADS;
  if (nthreads > n) nthreads = (int)n;
  uint64_t total = 0;
  for (int64_t i = 0; i < n; i++) total += w[i];
  uint64_t acc = 0, t = (uint64_t)nthreads; /* compared scaled by nthreads: no division */
  int64_t start = 0;
  int k = 0;
  for (int64_t i = 0; i + 1 < n && k < nthreads - 1; i++) {
    acc += w[i];
    uint64_t share = total * (uint64_t)(k + 1), here = acc * t, next = (acc + w[i + 1]) * t;
    if (here >= share || (next > share && share - here <= next - share)) {
      lo[k] = start, hi[k] = i + 1;
      start = i + 1;
      k++;
    }
  }
  lo[k] = start, hi[k] = n;
  return k + 1;
}

/* fn(job t) for t in [0, k), jobs `size` bytes apart: 1.. on new threads (on this one where no
 * thread is to be had), 0 here; returns once all are done, with the threads used. */
static int hc_run_all(void *(*fn)(void *), void *jobs, size_t size, int k) {
  pthread_t tids[HC_MAX_THREADS];
  int started = 1;
  for (int t = 1; t < k; t++) {
    if (pthread_create(&tids[t], 0, fn, (char *)jobs + (size_t)t * size) != 0) {
      fn((char *)jobs + (size_t)t * size);
      tids[t] = 0;
    } else {
      started++;
    }
  }
  fn(jobs);
  for (int t = 1; t < k; t++)
    if (tids[t]) pthread_join(tids[t], 0);
  return started;
}
#endif
