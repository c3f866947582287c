#include "dpdk/kernel_iface.h"

#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "weir/common/text.h"

namespace weir::fastpath::dpdk {

using common::Cat;

namespace {

struct AddressRequest {
  nlmsghdr header;
  ifaddrmsg ifa;
  char attributes[64];
};

void AddAttribute(AddressRequest* r, uint16_t type, const void* data, size_t len) {
  auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(r) + NLMSG_ALIGN(r->header.nlmsg_len));
  a->rta_type = type;
  a->rta_len = static_cast<uint16_t>(RTA_LENGTH(len));
  std::memcpy(RTA_DATA(a), data, len);
  r->header.nlmsg_len = static_cast<uint32_t>(NLMSG_ALIGN(r->header.nlmsg_len) + RTA_ALIGN(a->rta_len));
}

// One RTM_NEWADDR and its acknowledgement; 0 or the negative errno.
int NewAddress(int fd, unsigned ifindex, const OwnedAddress& a, uint32_t seq) {
  AddressRequest r{};
  r.header.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  r.header.nlmsg_type = RTM_NEWADDR;
  r.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
  r.header.nlmsg_seq = seq;
  const bool v6 = a.address.family == 6;
  r.ifa.ifa_family = v6 ? AF_INET6 : AF_INET;
  r.ifa.ifa_prefixlen = static_cast<unsigned char>(a.prefix);
  r.ifa.ifa_flags = IFA_F_PERMANENT | (v6 ? IFA_F_NODAD : 0);
  r.ifa.ifa_scope = RT_SCOPE_UNIVERSE;
  r.ifa.ifa_index = ifindex;
  const size_t alen = v6 ? 16 : 4;
  AddAttribute(&r, IFA_LOCAL, a.address.bytes.data(), alen);
  AddAttribute(&r, IFA_ADDRESS, a.address.bytes.data(), alen);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &r, r.header.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    return -errno;
  char buf[4096];
  for (;;) {
    const ssize_t got = recv(fd, buf, sizeof(buf), 0);
    if (got < 0) return -errno;
    unsigned n = static_cast<unsigned>(got);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq != seq || h->nlmsg_type != NLMSG_ERROR) continue;
      return reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
    }
  }
}

}  // namespace

absl::Status AddInterfaceAddresses(const std::string& ifname, const std::vector<OwnedAddress>& addresses) {
  const unsigned ifindex = if_nametoindex(ifname.c_str());
  if (ifindex == 0) return absl::UnavailableError(Cat("interface ", ifname, ": ", std::strerror(errno)));
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return absl::UnavailableError(Cat("rtnetlink socket: ", std::strerror(errno)));
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  uint32_t seq = 1;
  for (const OwnedAddress& a : addresses) {
    const int e = NewAddress(fd, ifindex, a, seq++);
    if (e != 0 && e != -EEXIST) {
      close(fd);
      return absl::UnavailableError(Cat("adding ", common::IpToString(a.address), "/", a.prefix, " to ",
                                        ifname, ": ", std::strerror(-e)));
    }
  }
  close(fd);
  return absl::OkStatus();
}

}  // namespace weir::fastpath::dpdk
