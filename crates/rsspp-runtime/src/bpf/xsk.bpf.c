/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The XDP program of rsspp-runtime's afxdp backend: for each received
 * frame, the Toeplitz hash of its flow (rsspp-linux's toeplitz.h, the same
 * hash as rsspp_core::Toeplitz::hash_flow), its bucket, the bucket's owner,
 * and a redirect into that worker's AF_XDP socket on the queue the frame
 * came in on (xsks index = rx_queue_index * workers + worker).
 *
 * The per-bucket words are those of the fanout program (fanout.bpf.c), in
 * the same format: the owner in the top 16 bits (0: nobody, w + 1: worker
 * w), the number of the bucket's frames steered so far in the low 48, both
 * taken and advanced by one fetch-and-add, so that the controller's
 * compare-and-swap that changes the owner returns the mark of
 * rsspp_core::state::marks. The steering is done here, per bucket, rather
 * than by the NIC's indirection table: every worker has a socket on every
 * queue, all of a queue's sockets sharing one UMEM.
 *
 * The classification is the fanout program's (one function set, read
 * through bpf_xdp_load_bytes instead of bpf_skb_load_bytes), with up to two
 * VLAN tags in the frame skipped (nothing has taken one out before XDP).
 * Frames that are not IP, or malformed, are not counted; they and those of
 * a bucket nobody owns (before the start, during the final drain: counted,
 * as the fanout program's member 0) go on to the kernel's stack (XDP_PASS).
 */
#include "toeplitz.h"

#define WORD_OWNER_SHIFT 48

/* Table size - 1 (a power of two - 1); set before load. */
const volatile __u32 bucket_mask = 0;
/* Workers, each with a socket on every queue; set before load. */
const volatile __u32 workers = 1;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key_table);
} rsspp_xsk_key SEC(".maps");

/* One word per bucket (see above); sized by the loader, mapped by it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_words SEC(".maps");

/* The sockets, queue-major; sized by the loader (queues * workers). */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_xsks SEC(".maps");

/* Hash input: addresses, then ports; filled by the parse below. */
struct hash_input {
	__u8 bytes[HASH_INPUT_MAX];
};

static __always_inline int load_ports(struct xdp_md *ctx, __u32 off,
				      __u8 proto, __u8 *to, int *has_ports)
{
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return PARSE_IP;
	/* The whole fixed header, as parse.h demands. */
	if (off + (proto == IPPROTO_TCP ? sizeof(struct tcphdr)
					: sizeof(struct udphdr)) > bpf_xdp_get_buff_len(ctx))
		return PARSE_MALFORMED;
	if (bpf_xdp_load_bytes(ctx, off, to, 4))
		return PARSE_MALFORMED;
	*has_ports = 1;
	return PARSE_IP;
}

/*
 * An ICMPv4 error (destination unreachable, time exceeded, parameter
 * problem) at off is hashed as the reply to the packet it quotes: the
 * quoted addresses and ports swapped, so that it reaches the bucket of that
 * flow's state (rsspp-runtime's nf::headers::steering_key does the same, and the fanout program).
 * Returns 1 when it filled the input, 0 to hash the frame as any other.
 */
static __always_inline int icmp_error_v4(struct xdp_md *ctx, __u32 off,
					 struct hash_input *in, int *has_ports)
{
	struct iphdr inner;
	__u8 type;
	__u8 ports[4];
	__u32 l4;

	if (bpf_xdp_load_bytes(ctx, off, &type, 1))
		return 0;
	if (type != 3 && type != 11 && type != 12)
		return 0;
	if (bpf_xdp_load_bytes(ctx, off + 8, &inner, sizeof(inner)))
		return 0;
	if (inner.version != 4 || inner.ihl < 5)
		return 0;
	__builtin_memcpy(in->bytes, &inner.daddr, 4);
	__builtin_memcpy(in->bytes + 4, &inner.saddr, 4);
	if (inner.frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return 1;
	if (inner.protocol != IPPROTO_TCP && inner.protocol != IPPROTO_UDP)
		return 1;
	l4 = off + 8 + inner.ihl * 4;
	if (bpf_xdp_load_bytes(ctx, l4, ports, 4))
		return 1;
	in->bytes[8] = ports[2];
	in->bytes[9] = ports[3];
	in->bytes[10] = ports[0];
	in->bytes[11] = ports[1];
	*has_ports = 1;
	return 1;
}

static __always_inline int parse_v4(struct xdp_md *ctx, __u32 off,
				    struct hash_input *in, int *has_ports)
{
	struct iphdr iph;
	__u32 hdr_len;

	if (bpf_xdp_load_bytes(ctx, off, &iph, sizeof(iph)))
		return PARSE_MALFORMED;
	if (iph.version != 4 || iph.ihl < 5)
		return PARSE_MALFORMED;
	hdr_len = iph.ihl * 4;
	if (off + hdr_len > bpf_xdp_get_buff_len(ctx))
		return PARSE_MALFORMED;
	__builtin_memcpy(in->bytes, &iph.saddr, 8);
	if (iph.frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return PARSE_IP;
	if (iph.protocol == IPPROTO_ICMP &&
	    icmp_error_v4(ctx, off + hdr_len, in, has_ports))
		return PARSE_IP;
	return load_ports(ctx, off + hdr_len, iph.protocol, in->bytes + 8,
			  has_ports);
}

static __always_inline int parse_v6(struct xdp_md *ctx, __u32 off,
				    struct hash_input *in, int *has_ports)
{
	struct ipv6hdr ip6;
	__u8 nh;

	if (bpf_xdp_load_bytes(ctx, off, &ip6, sizeof(ip6)))
		return PARSE_MALFORMED;
	if (ip6.version != 6)
		return PARSE_MALFORMED;
	__builtin_memcpy(in->bytes, &ip6.saddr, 32);
	nh = ip6.nexthdr;
	off += sizeof(ip6);

#pragma unroll
	for (int i = 0; i < IPV6_EXT_MAX_DEPTH; i++) {
		if (nh == IPPROTO_FRAGMENT) {
			struct ipv6_frag_hdr fh;

			if (bpf_xdp_load_bytes(ctx, off, &fh, sizeof(fh)))
				return PARSE_MALFORMED;
			if (fh.frag_off & bpf_htons(IP6_FRAG_OFFSET_MF))
				return PARSE_IP;
			nh = fh.nexthdr;
			off += sizeof(fh);
		} else if (ipv6_is_ext(nh)) {
			struct ipv6_opt_hdr oh;

			if (bpf_xdp_load_bytes(ctx, off, &oh, sizeof(oh)))
				return PARSE_MALFORMED;
			if (nh == IPPROTO_AH)
				off += (oh.hdrlen + 2) * 4;
			else
				off += (oh.hdrlen + 1) * 8;
			nh = oh.nexthdr;
		} else {
			break;
		}
	}
	if (ipv6_is_ext(nh))
		return PARSE_IP;
	return load_ports(ctx, off, nh, in->bytes + 32, has_ports);
}

SEC("xdp")
int rsspp_xsk(struct xdp_md *ctx)
{
	struct hash_input in = {};
	struct flow_input f = {};
	__be16 proto;
	__u32 off = 12, zero = 0, bucket, owner, slot;
	int has_ports = 0, r;
	struct key_table *t;
	__u64 *word, old;

	if (bpf_xdp_load_bytes(ctx, off, &proto, sizeof(proto)))
		return XDP_PASS;
	off += sizeof(proto);
#pragma unroll
	for (int i = 0; i < VLAN_MAX_DEPTH; i++) {
		struct vlan_hdr vh;

		if (proto != bpf_htons(ETH_P_8021Q) &&
		    proto != bpf_htons(ETH_P_8021AD))
			break;
		/* The tag's TCI, then the protocol it encloses. */
		if (bpf_xdp_load_bytes(ctx, off, &vh, sizeof(vh)))
			return XDP_PASS;
		proto = vh.encap_proto;
		off += sizeof(vh);
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		r = parse_v4(ctx, off, &in, &has_ports);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		r = parse_v6(ctx, off, &in, &has_ports);
		f.ipv6 = 1;
	} else {
		return XDP_PASS;
	}
	if (r != PARSE_IP)
		return XDP_PASS;
	f.addrs = in.bytes;
	if (has_ports)
		f.ports = f.ipv6 ? in.bytes + 32 : in.bytes + 8;

	t = bpf_map_lookup_elem(&rsspp_xsk_key, &zero);
	if (!t)
		return XDP_PASS;
	bucket = toeplitz_flow(t, &f) & bucket_mask;
	word = bpf_map_lookup_elem(&rsspp_words, &bucket);
	if (!word)
		return XDP_PASS;
	old = __sync_fetch_and_add(word, 1);
	owner = (__u32)(old >> WORD_OWNER_SHIFT);
	/* Nobody owns it (before the start, in the final drain). */
	if (owner == 0)
		return XDP_PASS;
	slot = ctx->rx_queue_index * workers + (owner - 1);
	/* A missing socket is the loader's bug: dropped, never passed, so
	 * that the frame counted for its owner is not seen twice. */
	return bpf_redirect_map(&rsspp_xsks, slot, XDP_DROP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
