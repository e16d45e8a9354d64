/* Kilobyte test firmware (targets stage): Arm semihosting, the firmware's only I/O under QEMU.
 *
 * A call is `bkpt 0xAB` with the operation in r0 and a pointer to its argument block in r1; the result comes back
 * in r0. QEMU (-semihosting-config enable=on,target=native) serves files from its working directory. */
#include <stdint.h>

#include "fw.h"

#define SYS_OPEN 0x01
#define SYS_CLOSE 0x02
#define SYS_WRITE0 0x04
#define SYS_WRITE 0x05
#define SYS_READ 0x06
#define SYS_EXIT_EXTENDED 0x20
#define ADP_STOPPED_APPLICATION_EXIT 0x20026

static int sh_call(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static uint32_t sh_strlen(const char *s)
{
    uint32_t n = 0;
    while (s[n] != '\0') {
        n++;
    }
    return n;
}

int sh_open(const char *name, int mode)
{
    uint32_t block[3] = {(uint32_t)(uintptr_t)name, (uint32_t)mode, sh_strlen(name)};
    return sh_call(SYS_OPEN, block);
}

int sh_read(int handle, void *buf, uint32_t n)
{
    uint32_t block[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)buf, n};
    return sh_call(SYS_READ, block);
}

int sh_write(int handle, const void *buf, uint32_t n)
{
    uint32_t block[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)buf, n};
    return sh_call(SYS_WRITE, block);
}

int sh_close(int handle)
{
    uint32_t block[1] = {(uint32_t)handle};
    return sh_call(SYS_CLOSE, block);
}

void sh_write0(const char *text)
{
    sh_call(SYS_WRITE0, text);
}

void sh_exit(int code)
{
    uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
    for (;;) {  /* SYS_EXIT_EXTENDED does not return; loop should a debugger ignore it */
        sh_call(SYS_EXIT_EXTENDED, block);
    }
}

char *sh_format_u32(char *out, uint32_t value, int base)
{
    char digits[12];
    int n = 0;
    do {
        uint32_t d = value % (uint32_t)base;
        digits[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
        value /= (uint32_t)base;
    } while (value != 0);
    while (n > 0) {
        *out++ = digits[--n];
    }
    *out = '\0';
    return out;
}
