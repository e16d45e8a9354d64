/* Kilobyte test firmware (targets stage): run one generated model on input.bin and write what it produced.
 *
 * Files go through semihosting, in QEMU's working directory: input.bin (FW_INPUT_BYTES, int8) in, output.bin
 * (FW_OUTPUT_BYTES) and stats.txt ("stack_bytes <n>" = the painted stack's high-water mark) out. fw_model.h,
 * written by firmware.py, names the model's header, sizes and invoke call, whatever the library's prefix.
 * A build with FW_INVOKE_FLOAT (a model's float entry point, asked for by firmware.py) then also runs that on
 * file_input.bin (FW_FILE_INPUT_BYTES, the file's input) and writes file_output.bin (its outputs as the file has
 * them); the stack high-water mark covers both calls. A detector's library (FW_DETECT) also decodes its boxes and
 * writes detections.bin: the count (4 bytes, little-endian), then FW_MAX_DETECTIONS kb_detection entries. */
#include <stdint.h>

#include "fw.h"
#include "fw_model.h"

/* Global so the ELF names them: the instruction counter writes the input here and reads the output back. */
int8_t fw_input[FW_INPUT_BYTES] __attribute__((aligned(8)));
int8_t fw_output[FW_OUTPUT_BYTES] __attribute__((aligned(8)));
#ifdef FW_DETECT
struct {
    int32_t count;
    kb_detection boxes[FW_MAX_DETECTIONS];
} fw_detections;
#endif
#ifdef FW_INVOKE_FLOAT
int8_t fw_file_input[FW_FILE_INPUT_BYTES] __attribute__((aligned(8)));
int8_t fw_file_output[FW_FILE_OUTPUT_BYTES] __attribute__((aligned(8)));
#endif

/* Read (SH_MODE_RB) or write (SH_MODE_WB) all n bytes of a host file: 0, or -1 when that fails. */
static int fw_transfer(const char *name, int mode, void *buf, uint32_t n)
{
    int handle = sh_open(name, mode);
    if (handle < 0) {
        return -1;
    }
    int missing = mode == SH_MODE_RB ? sh_read(handle, buf, n) : sh_write(handle, buf, n);
    sh_close(handle);
    return missing == 0 ? 0 : -1;
}

static int fw_read_file(const char *name, void *buf, uint32_t n)
{
    return fw_transfer(name, SH_MODE_RB, buf, n);
}

static int fw_write_file(const char *name, const void *buf, uint32_t n)
{
    return fw_transfer(name, SH_MODE_WB, (void *)buf, n);
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
#ifdef FW_DETECT
    fw_detections.count = FW_DETECT(fw_output, fw_detections.boxes);
    if (fw_write_file("detections.bin", &fw_detections, sizeof fw_detections) != 0) {
        sh_write0("kilobyte-fw: cannot write detections.bin\n");
        return FW_EXIT_IO;
    }
#endif
#ifdef FW_INVOKE_FLOAT
    if (fw_read_file("file_input.bin", fw_file_input, FW_FILE_INPUT_BYTES) != 0) {
        sh_write0("kilobyte-fw: cannot read FW_FILE_INPUT_BYTES bytes from file_input.bin\n");
        return FW_EXIT_IO;
    }
    FW_INVOKE_FLOAT(fw_file_input, fw_file_output);
    if (fw_write_file("file_output.bin", fw_file_output, FW_FILE_OUTPUT_BYTES) != 0) {
        sh_write0("kilobyte-fw: cannot write file_output.bin\n");
        return FW_EXIT_IO;
    }
#endif
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
