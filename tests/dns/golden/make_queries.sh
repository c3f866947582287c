#!/bin/sh
# Re-create the q_*.bin fixtures: each client query is captured by capture.py
# on 127.0.0.1:$PORT (no reply is sent; clients time out after 1 s).
set -eu
cd "$(dirname "$0")"
PORT=${PORT:-53535}

cap() {  # cap <outfile> [--tcp] -- <client command...>
  out=$1; shift
  tcpflag=""
  if [ "$1" = "--tcp" ]; then tcpflag="--tcp"; shift; fi
  shift  # --
  python3 capture.py --port "$PORT" $tcpflag --query-out "$out" &
  cpid=$!
  sleep 0.4
  "$@" >/dev/null 2>&1 || true
  wait "$cpid"
}

D="dig @127.0.0.1 -p $PORT +tries=1 +timeout=1"
K="kdig @127.0.0.1 -p $PORT +retry=0 +timeout=1"

cap q_dig_plain.bin          -- $D www.example.com A
cap q_dig_subnet_v4.bin      -- $D +subnet=198.51.100.0/24 www.example.com A
cap q_dig_subnet_v6.bin      -- $D +subnet=2001:db8:1234::/48 www.example.com AAAA
cap q_dig_ednsopt65001.bin   -- $D +ednsopt=65001 www.example.com A
cap q_dig_dnssec.bin         -- $D +dnssec www.example.com A
cap q_dig_nsid.bin           -- $D +nsid www.example.com A
cap q_dig_noedns.bin         -- $D +noedns www.example.com A
cap q_dig_tcp.bin --tcp      -- $D +tcp www.example.com A
cap q_kdig_subnet.bin        -- $K +subnet=203.0.113.0/24 www.example.com A
cap q_kdig_ednsopt65001.bin  -- $K +ednsopt=65001 www.example.com A
cap q_kdig_dnssec_nsid.bin   -- $K +dnssec +nsid www.example.com A
cap q_kdig_tcp.bin --tcp     -- $K +tcp www.example.com A
cap q_kdig_mixedcase.bin     -- $K WwW.ExAmPlE.CoM A
cap q_dig_mixedcase.bin      -- $D WwW.ExAmPlE.CoM A   # kdig lowercases qnames; dig keeps case
