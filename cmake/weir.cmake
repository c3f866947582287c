# Shared helpers for weir's CMake files.

# weir_library(NAME <name> [SOURCES files...] [DEPS targets...])
# One library per top-level folder: public headers in <folder>/include,
# private sources in <folder>/src (every src/*.cc, or the SOURCES named when a
# folder holds more than one library), exported as weir::<name>.
function(weir_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(ARG_SOURCES)
    set(_srcs ${ARG_SOURCES})
  else()
    file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cc)
  endif()
  add_library(weir_${name} STATIC ${_srcs})
  add_library(weir::${name} ALIAS weir_${name})
  target_include_directories(weir_${name}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(weir_${name} PUBLIC ${ARG_DEPS})
endfunction()

# weir_link_closure(<target> <out_var>): every target and library file that
# <target> links, directly or through its dependencies, aliases resolved.
# Call it once every target exists (tests/ is added last).
function(weir_link_closure target out_var)
  set(_seen)
  set(_todo ${target})
  while(_todo)
    list(POP_FRONT _todo _t)
    if(TARGET ${_t})
      get_target_property(_real ${_t} ALIASED_TARGET)
      if(_real)
        set(_t ${_real})
      endif()
    endif()
    if(_t IN_LIST _seen)
      continue()
    endif()
    list(APPEND _seen ${_t})
    if(NOT TARGET ${_t})
      continue()
    endif()
    get_target_property(_direct ${_t} LINK_LIBRARIES)
    get_target_property(_iface ${_t} INTERFACE_LINK_LIBRARIES)
    foreach(_d IN LISTS _direct _iface)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _d "${_d}")
      if(_d AND NOT _d MATCHES "-NOTFOUND$" AND NOT _d MATCHES "^\\$<")
        list(APPEND _todo ${_d})
      endif()
    endforeach()
  endwhile()
  set(${out_var} ${_seen} PARENT_SCOPE)
endfunction()

# weir_link_allocator(<target>): the daemon's malloc is jemalloc's when
# WEIR_JEMALLOC is on (common/allocator_metrics.h then reports its
# statistics). It comes before libc among the needed libraries, so its
# malloc, free and operator new's malloc are the ones the process uses.
function(weir_link_allocator target)
  if(WEIR_JEMALLOC)
    target_link_libraries(${target} PRIVATE PkgConfig::JEMALLOC)
  endif()
endfunction()

# weir_link_cycles(<out_var>): the weir libraries (targets named weir_*) that
# reach themselves through what they link, "; "-separated as
# "weir_a -> weir_b"; empty when the link graph has no cycle. Call it once
# every target exists.
function(weir_link_cycles out_var)
  set(_dirs ${PROJECT_SOURCE_DIR})
  set(_libs)
  while(_dirs)
    list(POP_FRONT _dirs _dir)
    get_property(_sub DIRECTORY ${_dir} PROPERTY SUBDIRECTORIES)
    list(APPEND _dirs ${_sub})
    get_property(_targets DIRECTORY ${_dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(_t IN LISTS _targets)
      get_target_property(_type ${_t} TYPE)
      if(_t MATCHES "^weir_" AND _type MATCHES "LIBRARY$")
        list(APPEND _libs ${_t})
      endif()
    endforeach()
  endwhile()
  set(_cycles)
  foreach(_lib IN LISTS _libs)
    get_target_property(_direct ${_lib} LINK_LIBRARIES)
    get_target_property(_iface ${_lib} INTERFACE_LINK_LIBRARIES)
    foreach(_d IN LISTS _direct _iface)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _d "${_d}")
      if(NOT _d OR NOT TARGET ${_d} OR _d MATCHES "^\\$<")
        continue()
      endif()
      weir_link_closure(${_d} _reach)
      if(${_lib} IN_LIST _reach)
        get_target_property(_real ${_d} ALIASED_TARGET)
        if(NOT _real)
          set(_real ${_d})
        endif()
        list(APPEND _cycles "${_lib} -> ${_real}")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES _cycles)
  list(JOIN _cycles ", " _cycles)
  set(${out_var} "${_cycles}" PARENT_SCOPE)
endfunction()
