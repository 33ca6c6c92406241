# cmake -DSOURCE_DIR=... -DVERSION=... -DOUT=... -P version.cmake
# Writes OUT, a header naming the version and the commit the build is from (git
# describe; "+dirty" with uncommitted changes), only when that changed: a rebuild
# recompiles what includes it only then.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty=+dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#define MERIDIAN_VERSION \"${VERSION}\"\n#define MERIDIAN_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
