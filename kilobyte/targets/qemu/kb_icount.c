/* Kilobyte's QEMU plugin: the instructions a guest executes from one address to another, for the Cortex-M (and
 * later other) firmware that kilobyte builds, counted as the unicorn counter counts them (targets/cortexm/icount.py):
 * every instruction of every block that runs, IT-skipped ones included, from the first execution of `start` (the
 * model's invoke function: counted) until execution first reaches `stop` (the instruction after the call: not
 * counted). The count goes to the file `out` when `stop` is reached ("<count>\n"), or with "-1" when the guest
 * exits without reaching it.
 *
 *   qemu-system-arm ... -plugin kb_icount.so,start=0x...,stop=0x...,out=count.txt
 *
 * Per translation block: one execution callback adding the block's instruction count while counting is on; a
 * block that holds `start` or `stop` gets one callback per instruction instead, so a marker in the middle of a
 * block splits it exactly. QEMU runs the guest on one vCPU (the Cortex-M boards have one), so no locking. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_qemu_plugin.h"

KB_QEMU_PLUGIN_EXPORT int qemu_plugin_version = KB_QEMU_PLUGIN_API_VERSION;

static uint64_t start_addr, stop_addr;
static const char *out_path;
static int counting, done;
static uint64_t count;

static void write_count(const char *text)
{
    FILE *f = fopen(out_path, "w");
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static void on_block(unsigned int vcpu, void *n_insns)
{
    (void)vcpu;
    if (counting) {
        count += (uint64_t)(uintptr_t)n_insns;
    }
}

enum { PLAIN, START, STOP };

static void on_insn(unsigned int vcpu, void *kind)
{
    (void)vcpu;
    const int k = (int)(uintptr_t)kind;
    if (k == START && !done) {
        counting = 1;
    } else if (k == STOP && counting) {
        char text[32];
        counting = 0, done = 1;
        snprintf(text, sizeof text, "%llu\n", (unsigned long long)count);
        write_count(text);
        return;
    }
    if (counting) {
        ++count;
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
    int marked = 0;
    for (size_t i = 0; i < n && !marked; ++i) {
        const uint64_t a = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i));
        marked = a == start_addr || a == stop_addr;
    }
    if (!marked) {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        const uint64_t a = qemu_plugin_insn_vaddr(insn);
        const int kind = a == start_addr ? START : a == stop_addr ? STOP : PLAIN;
        qemu_plugin_register_vcpu_insn_exec_cb(insn, on_insn, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)kind);
    }
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    (void)id, (void)userdata;
    if (!done) {
        write_count("-1\n");
    }
}

/* Arguments: start=ADDR, stop=ADDR (C integer syntax: 0x... or decimal) and out=PATH, all three. */
KB_QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    int have = 0;
    for (int i = 0; i < argc; ++i) {
        if (strncmp(argv[i], "start=", 6) == 0) {
            start_addr = strtoull(argv[i] + 6, NULL, 0), have |= 1;
        } else if (strncmp(argv[i], "stop=", 5) == 0) {
            stop_addr = strtoull(argv[i] + 5, NULL, 0), have |= 2;
        } else if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = argv[i] + 4, have |= 4;
        } else {
            qemu_plugin_outs("kb_icount: unknown argument (expected start=, stop=, out=)\n");
            return 1;
        }
    }
    if (have != 7) {
        qemu_plugin_outs("kb_icount: needs start=ADDR,stop=ADDR,out=PATH\n");
        return 1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
