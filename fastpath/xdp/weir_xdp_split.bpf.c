// weir's XDP split for net_af_xdp ports (exception = "kernel"): UDP to the
// DNS port goes to the poll-mode worker's AF_XDP socket of the receive
// queue, everything else (ARP, ND, ICMP, TCP, fragments, IP options, IPv6
// extension headers, other ports) stays with the kernel, which owns the
// port's addresses. The net_af_xdp PMD loads it with its xdp_prog devarg
// and puts its sockets into the map, which must be called xsks_map.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define WEIR_DNS_PORT 53

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

struct vlan_tag {
  __be16 tci;
  __be16 proto;
};

SEC("xdp")
int weir_xdp_split(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return XDP_PASS;
  __u16 proto = eth->h_proto;
  void* l3 = eth + 1;
  if (proto == bpf_htons(ETH_P_8021Q)) {  // one tag, as the worker parses
    struct vlan_tag* tag = l3;
    if ((void*)(tag + 1) > end) return XDP_PASS;
    proto = tag->proto;
    l3 = tag + 1;
  }
  struct udphdr* udp;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = l3;
    if ((void*)(ip + 1) > end) return XDP_PASS;
    if (ip->ihl != 5 || ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x3fff)) != 0) return XDP_PASS;
    udp = (void*)(ip + 1);
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = l3;
    if ((void*)(ip6 + 1) > end) return XDP_PASS;
    if (ip6->nexthdr != IPPROTO_UDP) return XDP_PASS;
    udp = (void*)(ip6 + 1);
  } else {
    return XDP_PASS;
  }
  if ((void*)(udp + 1) > end) return XDP_PASS;
  if (udp->dest != bpf_htons(WEIR_DNS_PORT)) return XDP_PASS;
  return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
