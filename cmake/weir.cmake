# Shared helpers for weir's CMake files.

# weir_library(NAME <folder> [DEPS targets...])
# One library per top-level folder: public headers in <folder>/include,
# private sources in <folder>/src, exported as weir::<folder>.
function(weir_library name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cc)
  add_library(weir_${name} STATIC ${_srcs})
  add_library(weir::${name} ALIAS weir_${name})
  target_include_directories(weir_${name}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(weir_${name} PUBLIC ${ARG_DEPS})
endfunction()
