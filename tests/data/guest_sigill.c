/* A guest crash for the emulated lane: an SVE instruction; -cpu neoverse-n1 has no SVE. */
int main(void){ __asm__ volatile("ptrue p0.b" ::: "p0"); return 0; }
