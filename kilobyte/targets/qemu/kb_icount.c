/* Kilobyte's QEMU plugin: the instructions a guest executes, split by address marks, for the firmware that kilobyte
 * builds, counted as the unicorn counter counts them (targets/cortexm/icount.py): every instruction of every block
 * that runs, IT-skipped ones included.
 *
 *   qemu-system-arm ... -plugin kb_icount.so,marks=marks.txt,out=count.txt
 *
 * marks.txt: one "ADDRESS BUCKET" per line (C integer syntax). Executing a marked address makes its bucket the
 * current one, from that instruction on; bucket 0 stops counting for good and writes the counts. Before the first
 * mark nothing is counted. The counts go to `out` as "BUCKET COUNT" lines, buckets in increasing order, when bucket 0
 * is reached, or "-1" alone when the guest exits before it. (kilobyte marks the invoke function's entry as bucket 1,
 * each layer function's entry as its own bucket and the instruction after each call of it as bucket 1 again, and
 * the instruction after main's call of the invoke function as 0: targets/cortexm/qemu.py, invoke_marks.)
 *
 * Per translation block: one execution callback adding the block's instruction count to the current bucket; a block
 * holding a mark gets one callback per instruction instead, so a mark in the middle of a block splits it exactly.
 * QEMU runs the guest on one vCPU (the Cortex-M boards have one), so no locking. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_qemu_plugin.h"

KB_QEMU_PLUGIN_EXPORT int qemu_plugin_version = KB_QEMU_PLUGIN_API_VERSION;

#define MAX_MARKS 4096
#define MAX_BUCKETS 4096

static uint64_t mark_addr[MAX_MARKS];
static int mark_bucket[MAX_MARKS];
static int n_marks;
static const char *out_path;
static int current = -1, done;  /* the bucket counted into (-1: none yet) */
static uint64_t counts[MAX_BUCKETS];

static void write_counts(void)
{
    FILE *f = fopen(out_path, "w");
    if (f == NULL) {
        return;
    }
    for (int b = 1; b < MAX_BUCKETS; ++b) {
        if (counts[b]) {
            fprintf(f, "%d %llu\n", b, (unsigned long long)counts[b]);
        }
    }
    fclose(f);
}

static void on_block(unsigned int vcpu, void *n_insns)
{
    (void)vcpu;
    if (current > 0) {
        counts[current] += (uint64_t)(uintptr_t)n_insns;
    }
}

/* udata: the instruction's mark + 1, or 0 for an unmarked one. */
static void on_insn(unsigned int vcpu, void *mark)
{
    (void)vcpu;
    const int m = (int)(uintptr_t)mark - 1;
    if (m >= 0 && !done) {
        current = mark_bucket[m];
        if (current == 0) {
            done = 1;
            write_counts();
        }
    }
    if (current > 0) {
        ++counts[current];
    }
}

static int mark_at(uint64_t address)
{
    for (int i = 0; i < n_marks; ++i) {
        if (mark_addr[i] == address) {
            return i;
        }
    }
    return -1;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
    int marked = 0;
    for (size_t i = 0; i < n && !marked; ++i) {
        marked = mark_at(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i))) >= 0;
    }
    if (!marked) {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        const int m = mark_at(qemu_plugin_insn_vaddr(insn));
        qemu_plugin_register_vcpu_insn_exec_cb(insn, on_insn, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)(m + 1));
    }
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    (void)id, (void)userdata;
    if (!done) {
        FILE *f = fopen(out_path, "w");
        if (f != NULL) {
            fputs("-1\n", f);
            fclose(f);
        }
    }
}

static int read_marks(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    unsigned long long address;
    int bucket;
    while (n_marks < MAX_MARKS && fscanf(f, "%lli %d", (long long *)&address, &bucket) == 2) {
        if (bucket < 0 || bucket >= MAX_BUCKETS) {
            fclose(f);
            return -1;
        }
        mark_addr[n_marks] = address, mark_bucket[n_marks] = bucket, ++n_marks;
    }
    const int complete = feof(f);
    fclose(f);
    return complete && n_marks > 0 ? 0 : -1;
}

/* Arguments: marks=PATH and out=PATH. */
KB_QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    const char *marks = NULL;
    for (int i = 0; i < argc; ++i) {
        if (strncmp(argv[i], "marks=", 6) == 0) {
            marks = argv[i] + 6;
        } else if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = argv[i] + 4;
        } else {
            qemu_plugin_outs("kb_icount: unknown argument (expected marks=PATH,out=PATH)\n");
            return 1;
        }
    }
    if (marks == NULL || out_path == NULL || read_marks(marks) != 0) {
        qemu_plugin_outs("kb_icount: needs marks=PATH (lines \"ADDRESS BUCKET\", at most 4096, buckets 0-4095) and "
                         "out=PATH\n");
        return 1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
