# Run at install time (cmake --install, or cpack staging the package): puts
# the systemd units and the default configuration where the install prefix
# says, with the units naming the installed binaries and /etc/weir.
# A prefix of /usr (the Debian package) puts the configuration in /etc, any
# other prefix in PREFIX/etc. An existing configuration file is never
# overwritten by a plain install (an upgrade through the package is dpkg's
# conffile handling).
#
# Variables: SOURCE_DIR (the source tree), BINARY_DIR (this folder's build dir).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_etc "/etc")
else()
  set(_etc "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(WEIR_SBINDIR "${CMAKE_INSTALL_PREFIX}/sbin")
set(WEIR_SYSCONFDIR "${_etc}")
# file(INSTALL) adds DESTDIR itself; the existence check needs it spelled out.
set(_dest "$ENV{DESTDIR}")

foreach(_unit weir-fastpath weir-recursor weir-mgmt)
  configure_file("${SOURCE_DIR}/dist/systemd/${_unit}.service.in" "${BINARY_DIR}/units/${_unit}.service" @ONLY)
  file(INSTALL "${BINARY_DIR}/units/${_unit}.service"
       DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
endforeach()

file(GLOB _configs "${SOURCE_DIR}/dist/etc/weir/*")
foreach(_f ${_configs})
  get_filename_component(_name "${_f}" NAME)
  set(_to "${_dest}${_etc}/weir/${_name}")
  if(EXISTS "${_to}" AND "${_dest}" STREQUAL "")
    message(STATUS "Keeping: ${_to}")
  else()
    file(INSTALL "${_f}" DESTINATION "${_etc}/weir")
  endif()
endforeach()
