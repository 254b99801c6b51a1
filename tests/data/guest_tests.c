/* A guest shaped like llama-bench for the one-process dispatch path: a context per "test"
   (llama_init_from_model, as llama-bench calls it before each test), then that test's calls of
   a kernel (3 in the first test, 5 in the second). */
__attribute__((noinline)) int llama_init_from_model(int i) { return i + 1; }
__attribute__((noinline)) int kernel(int x) { return x * 3 + 1; }

int main(void) {
    volatile int acc = 0;
    int calls[2] = {3, 5};
    for (int t = 0; t < 2; t++) {
        acc += llama_init_from_model(t);
        for (int i = 0; i < calls[t]; i++) acc += kernel(i);
    }
    return acc == 0;
}
