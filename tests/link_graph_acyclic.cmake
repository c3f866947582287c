# cmake -DCYCLES=<weir_link_cycles' result> -P link_graph_acyclic.cmake:
# fails naming every edge that closes a cycle between weir's libraries.
if(CYCLES)
  message(FATAL_ERROR "weir's libraries link in a cycle: ${CYCLES}")
endif()
message(STATUS "the link graph of weir's libraries has no cycle")
