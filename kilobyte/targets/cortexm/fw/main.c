/* Kilobyte test firmware (targets stage): run one generated model on input.bin and write what it produced.
 *
 * Files go through semihosting, in QEMU's working directory: input.bin (FW_INPUT_BYTES, int8) in, output.bin
 * (FW_OUTPUT_BYTES) and stats.txt ("stack_bytes <n>" = the painted stack's high-water mark) out. fw_model.h,
 * written by firmware.py, names the model's header, sizes and invoke call, whatever the library's prefix. */
#include <stdint.h>

#include "fw.h"
#include "fw_model.h"

/* Global so the ELF names them: the instruction counter writes the input here and reads the output back. */
int8_t fw_input[FW_INPUT_BYTES] __attribute__((aligned(8)));
int8_t fw_output[FW_OUTPUT_BYTES] __attribute__((aligned(8)));

static int fw_read_file(const char *name, void *buf, uint32_t n)
{
    int handle = sh_open(name, SH_MODE_RB);
    if (handle < 0) {
        return -1;
    }
    int missing = sh_read(handle, buf, n);
    sh_close(handle);
    return missing == 0 ? 0 : -1;
}

static int fw_write_file(const char *name, const void *buf, uint32_t n)
{
    int handle = sh_open(name, SH_MODE_WB);
    if (handle < 0) {
        return -1;
    }
    int missing = sh_write(handle, buf, n);
    sh_close(handle);
    return missing == 0 ? 0 : -1;
}

static int fw_write_stats(void)
{
    char text[64];
    char *p = text;
    const char *label = "stack_bytes ";
    while (*label != '\0') {
        *p++ = *label++;
    }
    p = sh_format_u32(p, fw_stack_used_bytes(), 10);
    *p++ = '\n';
    return fw_write_file("stats.txt", text, (uint32_t)(p - text));
}

int main(void)
{
    if (fw_read_file("input.bin", fw_input, FW_INPUT_BYTES) != 0) {
        sh_write0("kilobyte-fw: cannot read FW_INPUT_BYTES bytes from input.bin\n");
        return FW_EXIT_IO;
    }
    FW_INVOKE(fw_input, fw_output);  /* int8 or uint8 (the model's header): bytes either way */
    if (fw_stack_overflowed()) {
        sh_write0("kilobyte-fw: stack overflow: the run used all of the stack reserve\n");
        return FW_EXIT_STACK;
    }
    if (fw_write_file("output.bin", fw_output, FW_OUTPUT_BYTES) != 0 || fw_write_stats() != 0) {
        sh_write0("kilobyte-fw: cannot write output.bin / stats.txt\n");
        return FW_EXIT_IO;
    }
    return FW_EXIT_OK;
}
