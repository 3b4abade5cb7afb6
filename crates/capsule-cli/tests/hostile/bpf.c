/* Attack 12: bpf (a map, a socket filter program). */
#include "hostile.h"
#include <linux/bpf.h>
int main(void) {
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.map_type = BPF_MAP_TYPE_ARRAY;
    a.key_size = 4;
    a.value_size = 8;
    a.max_entries = 1;
    surface("bpf-map-create", syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a));
    struct bpf_insn insns[] = {{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 0}, {.code = BPF_JMP | BPF_EXIT}};
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
    a.insns = (unsigned long)insns;
    a.insn_cnt = 2;
    a.license = (unsigned long)"GPL";
    surface("bpf-prog-load", syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a));
    DONE();
    return 0;
}
