"""Shared harness of weir's black-box tests (tests/integration/test_*.py)
and the load benchmarks (bench/*.py).

The tests start the real binaries on loopback and query them with real
clients (dig, kdig, dnsperf). Modules:

  process      the binaries, free ports, temp files, Process, stop_pid, wait_until,
               netns_argv (a command inside a network namespace)
  clients      dig/kdig/dnsperf and their output parsers, raw UDP/TCP exchanges, metrics
  config       config texts: fastpath_config, recursor_config, unbound_config
  zones        gslb-sim zone files: zone, record, gslb_name, view, delegation
  daemons      GslbSim, Fastpath, Recursor, Mgmt, EtcdCluster, Unbound
  authorities  FakeHierarchy (gslb-sim delegation tree), ScriptedAuthority
  wire         messages in wire form on dnspython: make_query, parse_message,
               build_response, rdata_*, ecs_option, weight_option
  netns        NetnsPair (two network namespaces and a veth between them, for
               the DPDK backend), build_udp_frame, parse_udp_frame
  rawframe     a standalone script (standard library only) that sends one raw
               Ethernet frame and prints the UDP frame answering it

Typical use::

    import weirtest
    BUILD_DIR = weirtest.parse_build_dir()          # strips --build-dir from sys.argv

    class T(unittest.TestCase):
        def test_x(self):
            with weirtest.GslbSim(BUILD_DIR, config_text=ZONES) as sim:
                r = weirtest.dig(sim.host, sim.port, "www.example.com", "A")
                self.assertEqual(r.status, "NOERROR", r.text)

    if __name__ == "__main__":
        unittest.main()

Processes are stopped by PID (terminate, wait, kill), never by name.
Tests use loopback only, or addresses inside network namespaces they
create themselves (NetnsPair: 198.18.0.0/15 and 2001:2::/48).
"""

import sys

try:
    import dns.message  # noqa: F401
except ImportError:  # a Python that is not Debian's (pyenv): use Debian's python3-dnspython
    # Forget what the failed import left behind (the repository's own dns/
    # folder passes for a namespace package when the working directory is
    # the repository), so that the real package is found now.
    for _name in [m for m in sys.modules if m == "dns" or m.startswith("dns.")]:
        del sys.modules[_name]
    sys.path.append("/usr/lib/python3/dist-packages")
    import dns.message  # noqa: F401

from .authorities import FakeHierarchy, ScriptedAuthority, start_authorities  # noqa: E402,F401
from .clients import (DnsperfResult, Ecs, Metrics, Record, Response, control_command, dig, dig_many,  # noqa: E402,F401
                      dnsperf, http_get, kdig, parse_dig, parse_dnsperf, parse_kdig, tcp_exchange_half_close,
                      udp_exchange)
from .config import (PartitionFiles, fastpath_config, mgmt_node_section, recursor_config,  # noqa: E402,F401
                     toml_tables, toml_value, unbound_config)
from .daemons import EtcdCluster, Fastpath, GslbSim, Mgmt, Recursor, Unbound  # noqa: E402,F401
from .netns import NetnsPair, build_udp_frame, parse_udp_frame  # noqa: E402,F401
from .process import (Process, binary, child_pids, collect_lines, free_port, netns_argv,  # noqa: E402,F401
                      parse_build_dir, proc_cpu_us, require_tools, requires, run, skip_or_fail, split_hostport,
                      stop_pid, wait_until, write_temp)
from .wire import (TYPE_CODES, WEIGHT_OPTION, DecodeError, RawMessage, RawQuery, RawRecord, build_response,  # noqa: E402,F401
                   ecs_option, echo_ecs, make_query, options_as_sent, parse_message, parse_raw_query, rdata,
                   rdata_a, rdata_soa, split_tcp_frames, tcp_frame, weight_option, wire_name)
