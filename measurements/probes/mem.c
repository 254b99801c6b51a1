// Fresh memory per process (measurements/host_noise.py): malloc MB, touch it, then stream-read it
// with 2 threads PASSES times; prints each pass's bandwidth in GiB/s on one line.
// usage: mem MB PASSES
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t *buf;
static volatile uint64_t sink;
typedef struct { size_t a, b; } span;

static void *reader(void *p) {
  span *s = p;
  uint64_t acc = 0;
  for (size_t i = s->a; i < s->b; i++) acc += buf[i];
  sink += acc;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: mem MB PASSES\n"); return 2; }
  size_t mb = strtoul(argv[1], 0, 10), n = mb * 1024 * 1024 / 8;
  int passes = atoi(argv[2]);
  buf = malloc(n * 8);
  if (!buf) return 1;
  memset(buf, 1, n * 8);
  for (int p = 0; p < passes; p++) {
    double t0 = now();
    pthread_t t[2];
    span s[2] = {{0, n / 2}, {n / 2, n}};
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, reader, &s[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    printf("%.2f ", mb / 1024.0 / (now() - t0));
  }
  printf("\n");
  return 0;
}
