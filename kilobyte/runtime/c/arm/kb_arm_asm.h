/* Kilobyte runtime, Cortex-M DSP kernels: what the assembly files of arm/ share (kb_arm_wide.S, kb_arm_dw3.S),
 * assembler-only: the syntax and a function's section, alignment and symbol. Included after a file's own header; C
 * files never need it (empty outside the assembler). */
#ifndef KB_ARM_ASM_H
#define KB_ARM_ASM_H

#ifdef __ASSEMBLER__

    .syntax unified
    .thumb

/* A global Thumb function in its own section (so that --gc-sections drops it when unused), word-aligned. */
.macro FUNCTION name
    .section .text.\name, "ax", %progbits
    .p2align 2
    .global \name
    .thumb_func
    .type \name, %function
\name:
.endm

.macro END_FUNCTION name
    .size \name, . - \name
.endm

#endif /* __ASSEMBLER__ */

#endif /* KB_ARM_ASM_H */
