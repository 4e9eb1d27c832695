# cmake -P check_catch_test_names.cmake -- <Catch2 test binary>...
#
# Fails naming every Catch2 test case whose name catch_discover_tests cannot
# register as one ctest entry that runs it:
#   ';'            CMake splits the name into list items: fragments that
#                  match no test case (and, without -w NoTests, pass);
#   '[' or ']'     CMake's list splitting groups by brackets, and Catch2
#                  reads '[' as the start of a tag;
#   '\'            Catch2's test-spec escape character;
#   leading/trailing whitespace, a leading '~' or '*' or a trailing '*':
#                  trimmed or read as exclusion / wildcard by Catch2.
# The ctest entries also run with -w NoTests (CMakeLists.txt), so any entry
# that matches nothing fails; this check says which name is at fault.
set(binaries)
set(after_dashes FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE 1 ${last})
  if(after_dashes)
    list(APPEND binaries "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_dashes TRUE)
  endif()
endforeach()
if(NOT binaries)
  message(FATAL_ERROR "check_catch_test_names: no test binaries given (after --)")
endif()

set(bad_names "")
set(total 0)
foreach(binary IN LISTS binaries)
  if(NOT EXISTS "${binary}")
    message(FATAL_ERROR "check_catch_test_names: ${binary} does not exist")
  endif()
  execute_process(COMMAND "${binary}" --list-test-names-only
    OUTPUT_VARIABLE output RESULT_VARIABLE result)
  # Catch2 2 exits with the number of test cases listed.
  if(NOT result MATCHES "^[0-9]+$" OR result EQUAL 0)
    message(FATAL_ERROR "check_catch_test_names: ${binary} --list-test-names-only: ${result}")
  endif()
  # Keep ';', '[' and ']' away from CMake's list handling while splitting lines.
  string(REPLACE ";" "<semicolon>" output "${output}")
  string(REPLACE "[" "<lbracket>" output "${output}")
  string(REPLACE "]" "<rbracket>" output "${output}")
  string(REPLACE "\n" ";" lines "${output}")
  get_filename_component(binary_name "${binary}" NAME)
  foreach(line IN LISTS lines)
    if(line STREQUAL "")
      continue()
    endif()
    math(EXPR total "${total} + 1")
    set(why "")
    if(line MATCHES "<semicolon>")
      string(APPEND why " ';'")
    endif()
    if(line MATCHES "<lbracket>|<rbracket>")
      string(APPEND why " '[' or ']'")
    endif()
    if(line MATCHES "\\\\")
      string(APPEND why " '\\'")
    endif()
    if(line MATCHES "^[ \t]|[ \t\r]$")
      string(APPEND why " leading/trailing whitespace")
    endif()
    if(line MATCHES "^[~*]|[*]$")
      string(APPEND why " leading '~'/'*' or trailing '*'")
    endif()
    if(NOT why STREQUAL "")
      string(REPLACE "<semicolon>" ";" shown "${line}")
      string(REPLACE "<lbracket>" "[" shown "${shown}")
      string(REPLACE "<rbracket>" "]" shown "${shown}")
      string(APPEND bad_names "  ${binary_name}: \"${shown}\" (${why} )\n")
    endif()
  endforeach()
endforeach()

if(NOT bad_names STREQUAL "")
  message(FATAL_ERROR "FAIL: Catch2 test case names that ctest cannot run as one entry "
    "(use ':', ',' or 'and' instead):\n${bad_names}")
endif()
list(LENGTH binaries n_binaries)
message(STATUS "PASS: ${total} test case names in ${n_binaries} binaries register cleanly")
