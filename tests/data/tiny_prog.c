/* tiny_prog N THREADS [SLEEP_S]: each thread calls vexfirst() and plain() N times. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

int vexfirst(int);
int plain(int);
static int n;

static void *worker(void *arg) {
    volatile int s = 0;
    (void)arg;
    for (int i = 0; i < n; i++) {
        s += vexfirst(i);
        s += plain(i);
    }
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 1;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int sleep_s = argc > 3 ? atoi(argv[3]) : 0;
    pthread_t t[16];
    if (threads > 16) threads = 16;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    if (sleep_s) sleep(sleep_s);
    return 0;
}
