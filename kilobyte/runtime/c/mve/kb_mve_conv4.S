/* Kilobyte runtime, Cortex-M55 Helium (MVE): the conv kernels' byte movers in Armv8.1-M assembly (GNU as):
 * tail-predicated (DLSTP / LETP) copies, fills and gathers, 16 (or 4) bytes a step. Interface: kb_mve_conv4.h. */
#include "kb_mve_conv4.h"
#include "kb_arm_asm.h"

/* kb_mve_copy(r0 dst, r1 src, r2 n): the loop count lives in lr, the return address in r12. */
FUNCTION kb_mve_copy
    cbz r2, 2f
    mov r12, lr
    dlstp.8 lr, r2
1:
    vldrb.u8 q0, [r1], #16
    vstrb.8 q0, [r0], #16
    letp lr, 1b
    bx r12
2:
    bx lr
END_FUNCTION kb_mve_copy

/* kb_mve_fill(r0 dst, r1 v, r2 n) */
FUNCTION kb_mve_fill
    cbz r2, 2f
    mov r12, lr
    vdup.8 q0, r1
    dlstp.8 lr, r2
1:
    vstrb.8 q0, [r0], #16
    letp lr, 1b
    bx r12
2:
    bx lr
END_FUNCTION kb_mve_fill

/* kb_mve_copy_rows(r0 dst, r1 src, r2 rows, r3 n, [sp] src_pitch): r12 the next row's source, lr the loop count. */
FUNCTION kb_mve_copy_rows
    push {r4, lr}
    ldr r4, [sp, #8]
1:
    add r12, r1, r4
    dlstp.8 lr, r3
2:
    vldrb.u8 q0, [r1], #16
    vstrb.8 q0, [r0], #16
    letp lr, 2b
    /* dst ran 16 * ceil(n / 16) bytes on: step back to just past the row's n bytes */
    add r1, r3, #15
    bic r1, r1, #15
    subs r1, r1, r3
    subs r0, r0, r1
    mov r1, r12
    subs r2, r2, #1
    bne 1b
    pop {r4, pc}
END_FUNCTION kb_mve_copy_rows

/* kb_mve_gather(r0 dst, r1 src, r2 n, r3 stride): q1 the lanes' offsets {0, s, 2s, 3s}, r3 then 4 s; the return
 * address in r12, the loop count in lr. */
FUNCTION kb_mve_gather
    cbz r2, 2f
    mov r12, lr
    movs lr, #0
    vidup.u32 q1, lr, #1  /* {0, 1, 2, 3} (lr advances; dlstp overwrites it) */
    vmul.i32 q1, q1, r3
    lsls r3, r3, #2
    dlstp.32 lr, r2
1:
    vldrb.s32 q0, [r1, q1]
    vstrb.32 q0, [r0], #4
    add r1, r1, r3
    letp lr, 1b
    bx r12
2:
    bx lr
END_FUNCTION kb_mve_gather

/* kb_mve_gather_t(r0 dst, r1 src, r2 n, r3 stride, [sp] dst_stride): q1 / q2 the source / destination lanes'
 * offsets, r3 / r4 then four strides of each. */
FUNCTION kb_mve_gather_t
    push {r4, lr}
    ldr r4, [sp, #8]
    cbz r2, 2f
    movs lr, #0
    vidup.u32 q1, lr, #1
    vmul.i32 q2, q1, r4
    vmul.i32 q1, q1, r3
    lsls r3, r3, #2
    lsls r4, r4, #2
    dlstp.32 lr, r2
1:
    vldrb.s32 q0, [r1, q1]
    vstrb.32 q0, [r0, q2]
    add r1, r1, r3
    add r0, r0, r4
    letp lr, 1b
2:
    pop {r4, pc}
END_FUNCTION kb_mve_gather_t
