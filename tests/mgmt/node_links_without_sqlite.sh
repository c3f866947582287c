#!/bin/sh
# weir-fastpath and weir-recursor link weir::mgmt_node, never weir-mgmt's
# SQLite store. Two views of it: the libraries each binary loads (ldd), and
# what CMake links it with, because a linker that drops unused libraries
# (--as-needed) would hide a dependency in the build from ldd.
#
# Usage: node_links_without_sqlite.sh MGMT_BINARY NODE_BINARY LINK_CLOSURE [NODE_BINARY LINK_CLOSURE]...
# LINK_CLOSURE: the targets and library files, separated by spaces.
# MGMT_BINARY must load libsqlite3: that shows ldd and the pattern still see it.
set -u

mgmt=$1
shift
if ! ldd "$mgmt" | grep -q 'libsqlite3'; then
  echo "FAIL: $mgmt does not load libsqlite3 (the check cannot see SQLite)"
  exit 1
fi

status=0
while [ $# -ge 2 ]; do
  node=$1
  closure=$2
  shift 2
  bad=0
  if ! loaded=$(ldd "$node"); then
    echo "FAIL: ldd $node"
    bad=1
  elif printf '%s\n' "$loaded" | grep 'libsqlite3'; then
    echo "FAIL: $node loads libsqlite3"
    bad=1
  fi
  if printf '%s\n' "$closure" | tr ' ' '\n' | grep -i 'sqlite'; then
    echo "FAIL: $node is linked with SQLite (above: from its CMake link closure)"
    bad=1
  fi
  if [ $bad -eq 0 ]; then
    echo "ok: $node links no SQLite"
  else
    status=1
  fi
done
if [ $# -ne 0 ]; then
  echo "FAIL: usage: $0 MGMT_BINARY NODE_BINARY LINK_CLOSURE..."
  exit 1
fi
exit $status
