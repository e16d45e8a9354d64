/* Kilobyte's QEMU plugin: the instructions a guest executes, split by address marks, for the firmware that kilobyte
 * builds, counted as the unicorn counter counts them (targets/cortexm/icount.py): every instruction of every block
 * that runs, IT-skipped ones included; and, per block, how often it ran and how often it was left by a taken
 * branch, which is what a cycle model prices (targets/cortexm/cycles.py, beats.py).
 *
 *   qemu-system-arm ... -plugin kb_icount.so,marks=marks.txt,out=profile.txt
 *
 * marks.txt: one "ADDRESS BUCKET" per line (C integer syntax). Executing a marked address makes its bucket the
 * current one, from that instruction on; bucket 0 stops counting for good and writes the profile. Before the first
 * mark nothing is counted. (kilobyte marks the invoke function's entry as bucket 1, each layer function's entry as
 * its own bucket and the instruction after each call of it as bucket 1 again, and the instruction after main's call
 * of the invoke function as 0: targets/cortexm/qemu.py, invoke_marks.)
 *
 * The profile, written when bucket 0 is reached, has one line per (block, bucket) that ran:
 *     BUCKET START END INSNS EXECS TAKEN
 * START/END: the block's first instruction's address and the address just past its last; INSNS its instruction
 * count; EXECS how often it ran in that bucket; TAKEN how often the block that ran next did not start at END.
 * A guest that exits before bucket 0 gets "-1" alone. A "block" is a QEMU translation block, or the part of one
 * before or from a marked instruction: a mark in the middle of a translation block splits it, so bucket switches
 * are exact. The same code translated twice gives two blocks with equal addresses (the reader adds them up).
 *
 * One execution callback per block, on its first instruction. QEMU runs the guest on one vCPU (the Cortex-M boards
 * have one), so no locking. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_qemu_plugin.h"

KB_QEMU_PLUGIN_EXPORT int qemu_plugin_version = KB_QEMU_PLUGIN_API_VERSION;

#define MAX_MARKS 4096
#define MAX_BUCKETS 4096
#define TABLE_BITS 19 /* (block, bucket) counters: 512 Ki slots, 12 MiB */

struct block {
    uint64_t start, end;
    uint32_t n_insns, index;
    int mark;                   /* the mark at its first instruction, or -1 */
    int cached_bucket;          /* the bucket of `cached`: blocks rarely change bucket */
    struct counter *cached;
};

struct counter {
    uint32_t block;  /* block index + 1; 0: an empty slot */
    uint32_t bucket;
    uint64_t execs, taken;
};

static uint64_t mark_addr[MAX_MARKS];
static int mark_bucket[MAX_MARKS];
static int n_marks;
static const char *out_path;
static int current = -1, done, overflow;  /* the bucket counted into (-1: none yet) */
static struct block **blocks;
static uint32_t n_blocks, cap_blocks;
static struct counter *table;
static struct counter *previous;  /* the counter of the block that ran last, while counting */
static uint64_t previous_end;

static void write_profile(void)
{
    FILE *f = fopen(out_path, "w");
    if (f == NULL) {
        return;
    }
    if (overflow) {
        fputs("-2\n", f);
    }
    for (uint32_t i = 0; i < (1u << TABLE_BITS) && !overflow; ++i) {
        const struct counter *c = &table[i];
        if (c->block) {
            const struct block *b = blocks[c->block - 1];
            fprintf(f, "%u %#llx %#llx %u %llu %llu\n", c->bucket, (unsigned long long)b->start,
                    (unsigned long long)b->end, b->n_insns, (unsigned long long)c->execs,
                    (unsigned long long)c->taken);
        }
    }
    fclose(f);
}

static struct counter *counter_of(struct block *b, int bucket)
{
    if (b->cached != NULL && b->cached_bucket == bucket) {
        return b->cached;
    }
    const uint32_t mask = (1u << TABLE_BITS) - 1;
    uint32_t i = (uint32_t)((b->index * 2654435761u) ^ ((uint32_t)bucket * 40503u)) & mask;
    for (uint32_t probes = 0; probes <= mask; ++probes, i = (i + 1) & mask) {
        struct counter *c = &table[i];
        if (c->block == 0) {
            c->block = b->index + 1, c->bucket = (uint32_t)bucket;
        }
        if (c->block == b->index + 1 && c->bucket == (uint32_t)bucket) {
            b->cached = c, b->cached_bucket = bucket;
            return c;
        }
    }
    overflow = 1;
    return NULL;
}

static void on_block(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    struct block *b = udata;
    if (done) {
        return;
    }
    if (b->mark >= 0) {
        current = mark_bucket[b->mark];
        if (current == 0) {
            done = 1;
            if (previous != NULL && previous_end != b->start) {
                ++previous->taken;
            }
            write_profile();
            return;
        }
    }
    if (current <= 0) {
        return;
    }
    if (previous != NULL && previous_end != b->start) {
        ++previous->taken;
    }
    struct counter *c = counter_of(b, current);
    if (c == NULL) {
        previous = NULL;
        return;
    }
    ++c->execs;
    previous = c, previous_end = b->end;
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

/* An instruction's length by the Thumb rule (a first halfword whose top five bits are 0b11101, 0b11110 or 0b11111
 * starts a 32-bit one). QEMU's own size of a block's last instruction also covers the first half of an instruction
 * that straddles the guest page after it (which a block of its own runs), so it is not used. */
static uint64_t thumb_size(struct qemu_plugin_insn *insn)
{
    const uint8_t *bytes = qemu_plugin_insn_data(insn);
    const unsigned top5 = (unsigned)(bytes[1] >> 3);  /* little-endian: bits 15..11 of the first halfword */
    return top5 == 0x1D || top5 == 0x1E || top5 == 0x1F ? 4 : 2;
}

static struct block *new_block(struct qemu_plugin_tb *tb, size_t first, size_t last, int mark)
{
    if (n_blocks == cap_blocks) {
        cap_blocks = cap_blocks ? 2 * cap_blocks : 4096;
        blocks = realloc(blocks, cap_blocks * sizeof *blocks);
        if (blocks == NULL) {
            abort();
        }
    }
    struct block *b = calloc(1, sizeof *b);
    if (b == NULL) {
        abort();
    }
    struct qemu_plugin_insn *end = qemu_plugin_tb_get_insn(tb, last - 1);
    b->start = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, first));
    b->end = qemu_plugin_insn_vaddr(end) + thumb_size(end);
    b->n_insns = (uint32_t)(last - first), b->index = n_blocks, b->mark = mark;
    blocks[n_blocks++] = b;
    return b;
}

/* A translation block becomes one block, or several split at its marked instructions. */
static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
    size_t first = 0;
    int mark = mark_at(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, 0)));
    for (size_t i = 1; i <= n; ++i) {
        const int next = i < n ? mark_at(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i))) : -1;
        if (i == n || next >= 0) {
            struct block *b = new_block(tb, first, i, mark);
            qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, first), on_block,
                                                   QEMU_PLUGIN_CB_NO_REGS, b);
            first = i, mark = next;
        }
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
    table = calloc((size_t)1 << TABLE_BITS, sizeof *table);
    if (table == NULL) {
        qemu_plugin_outs("kb_icount: out of memory\n");
        return 1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
