// Per-vCPU speed over time (measurements/host_noise.py): one thread pinned to each CPU runs fixed
// chunks of integer work (L1-resident: no memory traffic) in bursts of BURST_MS, sleeping GAP_MS
// between bursts; prints one line per burst: its index, then each CPU's speed in millions of
// steps per second.
// usage: spin BURSTS BURST_MS GAP_MS [THREADS]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { CHUNK = 200000 };
static int bursts, burst_ms, gap_ms;
static double *speed[2];
static volatile uint64_t sink;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
  int cpu = (int)(intptr_t)arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  uint64_t x = 88172645463325252ull;
  for (int b = 0; b < bursts; b++) {
    double end = now() + burst_ms / 1000.0, busy = 0;
    int chunks = 0;
    while (now() < end) {
      double t0 = now();
      for (long i = 0; i < CHUNK; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
      busy += now() - t0;
      chunks++;
    }
    speed[cpu][b] = chunks * (double)CHUNK / busy / 1e6;
    if (gap_ms) usleep(gap_ms * 1000);
  }
  sink = x;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: spin BURSTS BURST_MS GAP_MS [THREADS]\n"); return 2; }
  bursts = atoi(argv[1]);
  burst_ms = atoi(argv[2]);
  gap_ms = atoi(argv[3]);
  int threads = argc > 4 ? atoi(argv[4]) : 2;
  if (threads < 1 || threads > 2) threads = 2;
  for (int i = 0; i < 2; i++) speed[i] = calloc(bursts, sizeof(double));
  pthread_t t[2];
  for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, (void *)(intptr_t)i);
  for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
  for (int b = 0; b < bursts; b++) {
    printf("%d", b);
    for (int i = 0; i < threads; i++) printf(" %.0f", speed[i][b]);
    printf("\n");
  }
  return 0;
}
