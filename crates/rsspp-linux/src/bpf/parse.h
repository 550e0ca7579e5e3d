/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Packet parsing for the rsspp XDP programs: Ethernet, up to two VLAN tags,
 * IPv4 (options skipped with IHL) or IPv6 (a bounded number of extension
 * headers skipped), then the TCP/UDP ports. Every read is checked against
 * data_end first, as the verifier demands.
 *
 * The result says where the Toeplitz input lies in the packet: the source
 * and destination addresses are contiguous in both IP headers, and so are
 * the two ports in TCP and UDP, so no copy is needed.
 */
#ifndef RSSPP_PARSE_H
#define RSSPP_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* 802.1Q and 802.1ad tags are skipped, at most this many (QinQ). */
#define VLAN_MAX_DEPTH 2
/* IPv6 extension headers skipped before giving up on the ports. */
#define IPV6_EXT_MAX_DEPTH 4

/* From the kernel's <net/ip.h>, not exported to userspace headers. */
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
/* IPv6 fragment header: offset (13 bits) and the More Fragments flag. */
#define IP6_FRAG_OFFSET_MF 0xfff9

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* The IPv6 fragment header (the kernel's struct frag_hdr is not in uapi). */
struct ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 identification;
};

enum parse_result {
	/* An IP packet: `addrs` (and `ports` unless NULL) are the hash input. */
	PARSE_IP = 0,
	/* Not IPv4 or IPv6 (ARP, LLDP, more than two VLAN tags, ...). */
	PARSE_NOT_IP,
	/* Too short for the headers it announces, or a bad IP version/IHL. */
	PARSE_MALFORMED,
};

struct flow_input {
	const __u8 *addrs; /* source then destination address */
	const __u8 *ports; /* source then destination port, or NULL */
	int ipv6;	  /* 16-byte addresses instead of 4 */
};

/* TCP and UDP give their ports; other protocols are hashed on addresses
 * only, as NICs do. A TCP/UDP header shorter than its fixed part is a
 * truncated packet. */
static __always_inline int parse_ports(void *pos, void *end, __u8 proto,
				       struct flow_input *f)
{
	if (proto == IPPROTO_TCP) {
		if (pos + sizeof(struct tcphdr) > end)
			return PARSE_MALFORMED;
		f->ports = pos;
	} else if (proto == IPPROTO_UDP) {
		if (pos + sizeof(struct udphdr) > end)
			return PARSE_MALFORMED;
		f->ports = pos;
	}
	return PARSE_IP;
}

static __always_inline int parse_ipv4(void *pos, void *end,
				      struct flow_input *f)
{
	struct iphdr *iph = pos;
	__u32 hdr_len;

	if ((void *)(iph + 1) > end)
		return PARSE_MALFORMED;
	if (iph->version != 4 || iph->ihl < 5)
		return PARSE_MALFORMED;
	/* Options included: the ports follow the full header. */
	hdr_len = iph->ihl * 4;
	if (pos + hdr_len > end)
		return PARSE_MALFORMED;
	f->addrs = (const __u8 *)&iph->saddr;
	/* Every fragment, the first included, is hashed on its addresses only,
	 * so all fragments of a datagram land in the same bucket. */
	if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return PARSE_IP;
	return parse_ports(pos + hdr_len, end, iph->protocol, f);
}

static __always_inline int ipv6_is_ext(__u8 nh)
{
	return nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING ||
	       nh == IPPROTO_DSTOPTS || nh == IPPROTO_FRAGMENT ||
	       nh == IPPROTO_AH;
}

static __always_inline int parse_ipv6(void *pos, void *end,
				      struct flow_input *f)
{
	struct ipv6hdr *ip6 = pos;
	__u8 nh;

	if ((void *)(ip6 + 1) > end)
		return PARSE_MALFORMED;
	if (ip6->version != 6)
		return PARSE_MALFORMED;
	f->addrs = (const __u8 *)&ip6->saddr;
	f->ipv6 = 1;
	nh = ip6->nexthdr;
	pos = ip6 + 1;

#pragma unroll
	for (int i = 0; i < IPV6_EXT_MAX_DEPTH; i++) {
		if (nh == IPPROTO_FRAGMENT) {
			struct ipv6_frag_hdr *fh = pos;

			if ((void *)(fh + 1) > end)
				return PARSE_MALFORMED;
			/* A real fragment: addresses only. An atomic fragment
			 * (offset 0, no more fragments) is a whole datagram. */
			if (fh->frag_off & bpf_htons(IP6_FRAG_OFFSET_MF))
				return PARSE_IP;
			nh = fh->nexthdr;
			pos = fh + 1;
		} else if (ipv6_is_ext(nh)) {
			struct ipv6_opt_hdr *oh = pos;

			if ((void *)(oh + 1) > end)
				return PARSE_MALFORMED;
			/* AH counts its length in 4-byte words minus 2, the
			 * others in 8-byte words minus 1 (RFC 4302, 8200). */
			if (nh == IPPROTO_AH)
				pos += (oh->hdrlen + 2) * 4;
			else
				pos += (oh->hdrlen + 1) * 8;
			nh = oh->nexthdr;
		} else {
			break;
		}
	}
	/* More extension headers than we skip: hash the addresses only. */
	if (ipv6_is_ext(nh))
		return PARSE_IP;
	return parse_ports(pos, end, nh, f);
}

/* Classifies the frame and, for IP, finds the hash input. */
static __always_inline int parse_flow(struct xdp_md *ctx, struct flow_input *f)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *pos = eth + 1;
	__be16 proto;

	f->addrs = NULL;
	f->ports = NULL;
	f->ipv6 = 0;
	if (pos > end)
		return PARSE_MALFORMED;
	proto = eth->h_proto;

#pragma unroll
	for (int i = 0; i < VLAN_MAX_DEPTH; i++) {
		struct vlan_hdr *vh = pos;

		if (proto != bpf_htons(ETH_P_8021Q) &&
		    proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(vh + 1) > end)
			return PARSE_MALFORMED;
		proto = vh->encap_proto;
		pos = vh + 1;
	}

	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(pos, end, f);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(pos, end, f);
	return PARSE_NOT_IP;
}

#endif /* RSSPP_PARSE_H */
