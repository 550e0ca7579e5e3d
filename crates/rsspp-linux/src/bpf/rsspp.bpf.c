// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} smoke SEC(".maps");

SEC("xdp")
int xdp_smoke(struct xdp_md *ctx)
{
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&smoke, &k);
	if (v)
		*v += 1;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
