/* Kilobyte's declarations of the QEMU TCG plugin API (plugin API version 1, QEMU 7.x), the subset kb_icount.c uses.
 *
 * Debian's qemu-system packages ship no qemu-plugin.h, so these are written from QEMU's documentation ("TCG
 * Plugins") and its API header: the plugin is a shared object that QEMU loads with `-plugin FILE.so,key=value,...`;
 * it exports `qemu_plugin_version` and `qemu_plugin_install`, and calls back into QEMU through the functions below,
 * which the QEMU binary itself exports (the plugin is linked without them and resolves them at load time). */
#ifndef KB_QEMU_PLUGIN_H
#define KB_QEMU_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KB_QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
#define KB_QEMU_PLUGIN_API_VERSION 1

typedef uint64_t qemu_plugin_id_t;

typedef struct {
    const char *target_name;
    struct {
        int min, cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus, max_vcpus;
        } system;
    };
} qemu_info_t;

struct qemu_plugin_tb;    /* opaque: a translation block */
struct qemu_plugin_insn;  /* opaque: one translated instruction */

enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };

typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_outs(const char *string);

#endif /* KB_QEMU_PLUGIN_H */
