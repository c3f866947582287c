#include "dpdk/port.h"

#include <rte_errno.h>
#include <rte_ethdev.h>

#include <cstdio>

#include "weir/common/log.h"
#include "weir/common/text.h"

namespace weir::fastpath::dpdk {

using common::Cat;

namespace {
std::string Strerror(int e) { return rte_strerror(e < 0 ? -e : e); }
}  // namespace

absl::Status StartPort(const std::string& name, uint16_t id, const PortSetup& setup, uint64_t* tx_offloads) {
  const uint16_t queues = setup.queues;
  rte_eth_dev_info info;
  if (int r = rte_eth_dev_info_get(id, &info); r != 0)
    return absl::FailedPreconditionError(Cat("dpdk port ", name, ": no device information: ", Strerror(r)));
  if (info.max_rx_queues < queues || info.max_tx_queues < queues) {
    return absl::FailedPreconditionError(Cat(
        "dpdk port ", name, ": ", queues, " RX/TX queue pairs needed (one per worker lcore), the device has ",
        info.max_rx_queues, " RX and ", info.max_tx_queues,
        " TX queues (net_af_packet: qpairs=N in its devargs; net_af_xdp on a veth: one queue only)"));
  }
  rte_eth_conf conf{};
  if (queues > 1) {
    const uint64_t hash = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP);
    if (hash != 0) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_hf = hash;
    } else {
      // Virtual devices spread frames over their queues themselves
      // (net_af_packet: the kernel's packet fanout by flow hash).
      common::LogWarning("dpdk", "dpdk port ", name,
                         " has no RSS: the device itself decides which worker's queue a frame arrives on");
    }
  }
  *tx_offloads = 0;
  if (setup.checksum_offload)
    *tx_offloads = info.tx_offload_capa & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
  conf.txmode.offloads = *tx_offloads;
  if (int r = rte_eth_dev_configure(id, queues, queues, &conf); r != 0)
    return absl::FailedPreconditionError(Cat("dpdk port ", name, ": configure failed: ", Strerror(r)));
  uint16_t rxd = setup.rx_descriptors;
  uint16_t txd = setup.tx_descriptors;
  rte_eth_dev_adjust_nb_rx_tx_desc(id, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(id) < 0 ? SOCKET_ID_ANY : rte_eth_dev_socket_id(id);
  rte_eth_txconf txconf = info.default_txconf;
  txconf.offloads = *tx_offloads;
  for (uint16_t q = 0; q < queues; ++q) {
    if (int r = rte_eth_rx_queue_setup(id, q, rxd, socket, nullptr, setup.pool); r != 0)
      return absl::FailedPreconditionError(Cat("dpdk port ", name, ": RX queue ", q, ": ", Strerror(r)));
    if (int r = rte_eth_tx_queue_setup(id, q, txd, socket, &txconf); r != 0)
      return absl::FailedPreconditionError(Cat("dpdk port ", name, ": TX queue ", q, ": ", Strerror(r)));
  }
  if (int r = rte_eth_dev_start(id); r != 0)
    return absl::FailedPreconditionError(Cat("dpdk port ", name, ": start failed: ", Strerror(r)));
  // Neighbour solicitations go to multicast MACs a NIC filters out otherwise.
  if (int r = rte_eth_allmulticast_enable(id); r != 0) {
    common::LogWarning("dpdk", "dpdk port ", name, ": all-multicast refused (", Strerror(r),
                       "): IPv6 neighbour solicitations to it may not arrive");
  }
  return absl::OkStatus();
}

}  // namespace weir::fastpath::dpdk
