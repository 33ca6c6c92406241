# meridian_library(NAME SOURCES ... DEPS ...): one library per source folder.
function(meridian_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# How long a test binary may take to list its tests, which it does once built. CI
# builds the TSan binaries at idle priority while the ASan tests keep both cores busy:
# agent_test's listing took past CMake's default of 5 s and failed the build.
set(MERIDIAN_TEST_DISCOVERY_TIMEOUT 300)

# meridian_test(NAME SOURCES ... DEPS ...): a GoogleTest binary registered with CTest.
function(meridian_test name)
  if(NOT MERIDIAN_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    NO_PRETTY_VALUES
    DISCOVERY_TIMEOUT ${MERIDIAN_TEST_DISCOVERY_TIMEOUT}
    PROPERTIES ENVIRONMENT "MERIDIAN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
