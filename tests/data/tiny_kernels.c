/* A tiny stand-in for a kernel library, compiled by tests/test_dispatch_probes.py.
 * vexfirst's first instruction is VEX-encoded (a uprobe placed there never fires);
 * plain is an ordinary function. The program calls both through its PLT. */
__asm__(".text\n"
        ".globl vexfirst\n"
        ".type vexfirst,@function\n"
        "vexfirst:\n"
        "  vpxor %xmm1, %xmm1, %xmm1\n"
        "  lea 1(%rdi), %eax\n"
        "  ret\n"
        ".size vexfirst, .-vexfirst\n");

__attribute__((noinline)) int plain(int x) {
    __asm__ volatile("");
    return x + 2;
}
