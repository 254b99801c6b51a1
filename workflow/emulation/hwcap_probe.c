/* ladder: what an emulated aarch64 CPU offers, read from inside the guest.
 * Run under `qemu-aarch64-static -cpu <model>`; /proc/cpuinfo there shows the x86 host.
 * Prints one JSON object: AT_HWCAP, AT_HWCAP2 and the SVE/SME vector lengths (bytes, 0 = none). */
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/prctl.h>

#ifndef PR_SVE_GET_VL
#define PR_SVE_GET_VL 51
#endif
#ifndef PR_SME_GET_VL
#define PR_SME_GET_VL 64
#endif
#define HWCAP_SVE_BIT (1UL << 22)
#define HWCAP2_SME_BIT (1UL << 23)

int main(void) {
    unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    long sve = (hwcap & HWCAP_SVE_BIT) ? prctl(PR_SVE_GET_VL) : 0;
    long sme = (hwcap2 & HWCAP2_SME_BIT) ? prctl(PR_SME_GET_VL) : 0;
    printf("{\"hwcap\": %lu, \"hwcap2\": %lu, \"sve_vl\": %ld, \"sme_vl\": %ld}\n", hwcap, hwcap2,
           sve < 0 ? -1 : (sve & 0xffff), sme < 0 ? -1 : (sme & 0xffff));
    return 0;
}
