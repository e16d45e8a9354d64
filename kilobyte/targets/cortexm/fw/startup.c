/* Kilobyte test firmware (targets stage): vector table, reset handler, fault handler, stack high-water mark.
 *
 * Reset: paint the whole stack (nothing is on it yet), set MSPLIM on v8-M so an overflow faults at once, enable the
 * FPU (CPACR CP10/CP11, bits 20-23; also MVE on the M55) before any compiled code may use it, copy .data, zero
 * .bss, run main and exit through semihosting with its return value. Any fault ends the run with a one-line report
 * on the semihosting console and exit code FW_EXIT_FAULT, so a crash is a failure and never a hang. */
#include <stdint.h>

#include "fw.h"

extern uint32_t __data_start[], __data_end[], __data_load[], __bss_start[], __bss_end[];
int main(void);

void Reset_Handler(void);
void fw_fault_entry(void);
void fw_reset_c(void) __attribute__((noreturn, used));
void fw_fault_report(const uint32_t *frame, uint32_t exc_return) __attribute__((noreturn, used));

typedef void (*fw_vector)(void);

/* The 16 core exceptions; no external interrupt is ever enabled. */
__attribute__((section(".vectors"), used)) const fw_vector fw_vectors[16] = {
    (fw_vector)__stack_top, /* initial MSP */
    Reset_Handler,
    fw_fault_entry,         /* NMI */
    fw_fault_entry,         /* HardFault */
    fw_fault_entry,         /* MemManage */
    fw_fault_entry,         /* BusFault */
    fw_fault_entry,         /* UsageFault */
    fw_fault_entry,         /* SecureFault (v8-M) */
    0, 0, 0,
    fw_fault_entry,         /* SVCall */
    fw_fault_entry,         /* DebugMonitor */
    0,
    fw_fault_entry,         /* PendSV */
    fw_fault_entry,         /* SysTick */
};

/* Naked: runs before anything has a stack frame, so it may paint all of the stack. */
__attribute__((naked, noreturn)) void Reset_Handler(void)
{
    __asm__ volatile(
        "ldr r0, =__stack_bottom\n"
        "ldr r1, =__stack_top\n"
        "ldr r2, =0xC5ACCE55\n" /* FW_STACK_PAINT */
        "1: cmp r0, r1\n"
        "bhs 2f\n"
        "stmia r0!, {r2}\n"   /* a post-indexed store ARMv6-M (the M0+) has too */
        "b 1b\n"
        "2:\n"
#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
        "ldr r0, =__stack_bottom\n"
        "msr msplim, r0\n"
#endif
        "b fw_reset_c\n"
        ".ltorg\n");
}

static void fw_enable_fpu(void)
{
#if !defined(__ARM_ARCH_6M__) /* ARMv6-M (M0/M0+) has no FPU and no CPACR */
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= 0xFu << 20; /* CP10 and CP11: full access */
    __asm__ volatile("dsb\n isb" ::: "memory");
#endif
}

/* Separate from fw_enable_fpu so no (auto-vectorised) code of these loops can run before the FPU is on. */
__attribute__((noinline)) static void fw_init_memory(void)
{
    const uint32_t *src = __data_load;
    for (uint32_t *dst = __data_start; dst < __data_end; dst++) {
        *dst = *src++;
    }
    for (uint32_t *dst = __bss_start; dst < __bss_end; dst++) {
        *dst = 0;
    }
}

void fw_reset_c(void)
{
    fw_enable_fpu();
    fw_init_memory();
    sh_exit(main());
}

uint32_t fw_stack_used_bytes(void)
{
    const uint32_t *p = __stack_bottom;
    while (p < __stack_top && *p == FW_STACK_PAINT) {
        p++;
    }
    return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)p);
}

/* Without MSPLIM (M4, M7) an overflow runs below RAM's origin, which QEMU's mps2 boards do not always fault on;
 * the painted bottom word still tells. */
int fw_stack_overflowed(void)
{
    return __stack_bottom[0] != FW_STACK_PAINT;
}

/* Naked: the faulting stack may be unusable (overflow), so move MSP back to the top before calling C. */
__attribute__((naked, noreturn)) void fw_fault_entry(void)
{
    __asm__ volatile(
        "mrs r0, msp\n"
        "mov r1, lr\n"
        "ldr r2, =__stack_top\n"
        "mov sp, r2\n"
        "b fw_fault_report\n"
        ".ltorg\n");
}

static char *fw_append(char *out, const char *text)
{
    while (*text != '\0') {
        *out++ = *text++;
    }
    return out;
}

static char *fw_append_hex(char *out, const char *label, uint32_t value)
{
    out = fw_append(out, label);
    out = fw_append(out, "0x");
    return sh_format_u32(out, value, 16);
}

void fw_fault_report(const uint32_t *frame, uint32_t exc_return)
{
    uint32_t ipsr;
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    char line[200];
    char *p = fw_append(line, "kilobyte-fw: fault: exception ");
    p = sh_format_u32(p, ipsr & 0x1FFu, 10);
#if defined(__ARM_ARCH_6M__) /* ARMv6-M has no fault status registers: a HardFault is all it reports */
    const uint32_t cfsr = 0;
#else
    const uint32_t cfsr = *(volatile uint32_t *)0xE000ED28u;
    p = fw_append_hex(p, " CFSR=", cfsr);
    p = fw_append_hex(p, " HFSR=", *(volatile uint32_t *)0xE000ED2Cu);
    p = fw_append_hex(p, " BFAR=", *(volatile uint32_t *)0xE000ED38u);
#endif
    p = fw_append_hex(p, " EXC_RETURN=", exc_return);
    /* The stacked frame is r0-r3, r12, lr, pc, xpsr; read it only when it lies inside the stack. */
    if (frame >= __stack_bottom && frame + 8 <= __stack_top) {
        p = fw_append_hex(p, " PC=", frame[6]);
        p = fw_append_hex(p, " LR=", frame[5]);
    }
    if (cfsr & (1u << 20)) {
        p = fw_append(p, " (stack overflow: STKOF)");
    } else if (fw_stack_overflowed()) {
        p = fw_append(p, " (the whole stack reserve was used: likely a stack overflow)");
    }
    p = fw_append(p, "\n");
    *p = '\0';
    sh_write0(line);
    sh_exit(FW_EXIT_FAULT);
}
