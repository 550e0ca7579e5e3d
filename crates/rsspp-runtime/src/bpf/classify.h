/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The flow classification shared by rsspp-runtime's programs (the fanout
 * program and the afxdp backend's XDP program): IPv4 with its options,
 * fragments hashed on their addresses, IPv6 with up to four extension
 * headers, ports of TCP and UDP when their whole fixed header is there, an
 * unfragmented ICMPv4 error by the flow it quotes, reversed. It follows
 * rsspp-linux's parse.h, but reads the headers through a helper that copies
 * them out (neither program may, or can always, read packet memory
 * directly). The including program defines, before including it:
 *   CTX                        its context type (struct __sk_buff, struct xdp_md)
 *   LOAD(ctx, off, to, len)    the copy (bpf_skb_load_bytes, bpf_xdp_load_bytes)
 *   CTX_LEN(ctx)               the frame's length, counted as the offsets are
 */
#ifndef RSSPP_RUNTIME_CLASSIFY_H
#define RSSPP_RUNTIME_CLASSIFY_H

/* Hash input: addresses, then ports; filled by the parse below. */
struct hash_input {
	__u8 bytes[HASH_INPUT_MAX];
};

/* The Toeplitz key's table (toeplitz.h's), written by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key_table);
} rsspp_key SEC(".maps");

static __always_inline int load_ports(CTX *ctx, __u32 off,
				      __u8 proto, __u8 *to, int *has_ports)
{
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return PARSE_IP;
	/* The whole fixed header, as parse.h demands. */
	if (off + (proto == IPPROTO_TCP ? sizeof(struct tcphdr)
					: sizeof(struct udphdr)) > CTX_LEN(ctx))
		return PARSE_MALFORMED;
	if (LOAD(ctx, off, to, 4))
		return PARSE_MALFORMED;
	*has_ports = 1;
	return PARSE_IP;
}

/*
 * An ICMPv4 error (destination unreachable, time exceeded, parameter
 * problem) at off is hashed as the reply to the packet it quotes: the
 * quoted addresses and ports swapped, so that it reaches the bucket of that
 * flow's state (rsspp-runtime's nf::headers::steering_key does the same).
 * Returns 1 when it filled the input, 0 to hash the frame as any other.
 */
static __always_inline int icmp_error_v4(CTX *ctx, __u32 off,
					 struct hash_input *in, int *has_ports)
{
	struct iphdr inner;
	__u8 type;
	__u8 ports[4];
	__u32 l4;

	if (LOAD(ctx, off, &type, 1))
		return 0;
	if (type != 3 && type != 11 && type != 12)
		return 0;
	if (LOAD(ctx, off + 8, &inner, sizeof(inner)))
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
	if (LOAD(ctx, l4, ports, 4))
		return 1;
	in->bytes[8] = ports[2];
	in->bytes[9] = ports[3];
	in->bytes[10] = ports[0];
	in->bytes[11] = ports[1];
	*has_ports = 1;
	return 1;
}

static __always_inline int parse_v4(CTX *ctx, __u32 off,
				    struct hash_input *in, int *has_ports)
{
	struct iphdr iph;
	__u32 hdr_len;

	if (LOAD(ctx, off, &iph, sizeof(iph)))
		return PARSE_MALFORMED;
	if (iph.version != 4 || iph.ihl < 5)
		return PARSE_MALFORMED;
	hdr_len = iph.ihl * 4;
	if (off + hdr_len > CTX_LEN(ctx))
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

static __always_inline int parse_v6(CTX *ctx, __u32 off,
				    struct hash_input *in, int *has_ports)
{
	struct ipv6hdr ip6;
	__u8 nh;

	if (LOAD(ctx, off, &ip6, sizeof(ip6)))
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

			if (LOAD(ctx, off, &fh, sizeof(fh)))
				return PARSE_MALFORMED;
			if (fh.frag_off & bpf_htons(IP6_FRAG_OFFSET_MF))
				return PARSE_IP;
			nh = fh.nexthdr;
			off += sizeof(fh);
		} else if (ipv6_is_ext(nh)) {
			struct ipv6_opt_hdr oh;

			if (LOAD(ctx, off, &oh, sizeof(oh)))
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


#endif
