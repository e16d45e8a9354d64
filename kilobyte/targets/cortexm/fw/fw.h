/* Kilobyte test firmware (targets stage): what startup.c, semihosting.c and main.c share.
 *
 * The firmware runs one generated model under QEMU: read input.bin, kb_invoke, write output.bin and stats.txt,
 * exit with the code below (semihosting SYS_EXIT_EXTENDED makes it QEMU's exit code). */
#ifndef KB_FW_H
#define KB_FW_H

#include <stdint.h>

#define FW_EXIT_OK 0
#define FW_EXIT_IO 2     /* input.bin missing or short, output.bin / stats.txt not writable */
#define FW_EXIT_FAULT 3  /* a HardFault / MemManage / BusFault / UsageFault (see fw_fault_report) */
#define FW_EXIT_STACK 4  /* the model returned, but had used the whole stack reserve (an overflow) */

#define FW_STACK_PAINT 0xC5ACCE55u  /* painted over the whole stack at reset; the high-water mark is the first
                                       word from the bottom that no longer holds it */

/* Linker-script symbols (kb_sections.ld). */
extern uint32_t __stack_bottom[], __stack_top[];

uint32_t fw_stack_used_bytes(void);   /* startup.c: bytes of stack ever written, top down */
int fw_stack_overflowed(void);        /* startup.c: the bottom word of the stack reserve was overwritten */

/* semihosting.c: the Arm semihosting calls the firmware needs (bkpt 0xAB). */
#define SH_MODE_RB 1  /* "rb" */
#define SH_MODE_WB 5  /* "wb" */
int sh_open(const char *name, int mode);                  /* handle, or -1 */
int sh_read(int handle, void *buf, uint32_t n);           /* bytes NOT read (0 = all) */
int sh_write(int handle, const void *buf, uint32_t n);    /* bytes NOT written (0 = all) */
int sh_close(int handle);
void sh_write0(const char *text);                         /* to the debug console (QEMU's stderr) */
void sh_exit(int code) __attribute__((noreturn));         /* SYS_EXIT_EXTENDED {ApplicationExit, code} */
char *sh_format_u32(char *out, uint32_t value, int base); /* digits of value at out, NUL-terminated; returns end */

#endif
