#!/bin/sh
# Re-create the r_unbound_*.bin fixtures (and matching rq_*.bin client queries).
# Starts unbound (local data only, see unbound.conf) on 127.0.0.1:$UPORT, then
# for each fixture runs capture.py as a one-shot proxy on 127.0.0.1:$PORT that
# records the real client query (rq_*.bin) and unbound's raw reply (r_*.bin).
set -eu
cd "$(dirname "$0")"
PORT=${PORT:-53535}
UPORT=${UPORT:-53536}
DEADPORT=${DEADPORT:-53537}
TMP=$(mktemp -d /tmp/weir-unbound.XXXXXX)
sed -e "s#@DIR@#$TMP#g" -e "s#@PORT@#$UPORT#g" -e "s#@DEADPORT@#$DEADPORT#g" \
    unbound.conf > "$TMP/unbound.conf"
cp example.com.zone cdn.example.net.zone "$TMP/"
unbound-checkconf "$TMP/unbound.conf"
unbound -c "$TMP/unbound.conf" > "$TMP/unbound.log" 2>&1 &
UPID=$!
trap 'kill $UPID 2>/dev/null || true' EXIT
sleep 1

prox() {  # prox <name> [--tcp] -- <client command...>
  name=$1; shift
  tcpflag=""
  if [ "$1" = "--tcp" ]; then tcpflag="--tcp"; shift; fi
  shift  # --
  python3 capture.py --port "$PORT" $tcpflag --upstream "127.0.0.1:$UPORT" \
      --query-out "rq_$name.bin" --response-out "r_$name.bin" &
  cpid=$!
  sleep 0.4
  echo "== r_$name.bin: $*" >> "$TMP/clients.txt"
  "$@" >> "$TMP/clients.txt" 2>&1 || true
  wait "$cpid"
}

D="dig @127.0.0.1 -p $PORT +tries=1 +timeout=2"
K="kdig @127.0.0.1 -p $PORT +retry=0 +timeout=2"

prox unbound_a4          -- $D a4.example.com A
prox unbound_aaaa2       -- $K +edns aaaa2.example.com AAAA
prox unbound_cname_chain -- $D www.example.com A
prox unbound_nxdomain    -- $D nx.example.com A
prox unbound_nodata      -- $D a4.example.com MX
prox unbound_noedns      -- $D +noedns a4.example.com A
prox unbound_tc          -- $D +noedns +ignore txt.example.com TXT
prox unbound_nsid        -- $D +nsid a4.example.com A
prox unbound_mixedcase    -- $D A4.ExAmPlE.CoM A

kill $UPID; wait $UPID 2>/dev/null || true
trap - EXIT
cat "$TMP/clients.txt"
echo "--- unbound log"; cat "$TMP/unbound.log"
rm -rf "$TMP"
