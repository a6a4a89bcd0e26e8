# Runs one compile-fail test: SOURCE must fail to compile (syntax only) with a diagnostic matching
# its "// expect: <regex>" line, and must compile with -DSPARSELM_COMPILE_FAIL_FIXED (the same file
# with the missing member declared), so the failure is the one the test is about.
#   cmake -DCXX=<compiler> -DINCLUDE=<include dir> -DSOURCE=<file.cpp> -P check_compile_fail.cmake
file(STRINGS ${SOURCE} expect_line REGEX "^// expect: ")
list(LENGTH expect_line n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "${SOURCE}: needs exactly one '// expect: <regex>' line")
endif()
string(REGEX REPLACE "^// expect: " "" expect "${expect_line}")
set(flags -std=c++20 -fsyntax-only -march=native -Wno-unknown-pragmas -I${INCLUDE})
execute_process(COMMAND ${CXX} ${flags} ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE}: compiled, but it must fail (expected a diagnostic matching: ${expect})")
endif()
if(NOT "${out}${err}" MATCHES "static assert[^\n]*${expect}")
  message(FATAL_ERROR "${SOURCE}: failed to compile, but no static_assert message matches '${expect}':\n${err}")
endif()
execute_process(COMMAND ${CXX} ${flags} -DSPARSELM_COMPILE_FAIL_FIXED ${SOURCE} RESULT_VARIABLE rc_fixed
                ERROR_VARIABLE err_fixed)
if(NOT rc_fixed EQUAL 0)
  message(FATAL_ERROR "${SOURCE}: with the member declared (SPARSELM_COMPILE_FAIL_FIXED) it must compile:\n${err_fixed}")
endif()
message(STATUS "${SOURCE}: fails as expected ('${expect}'), compiles with the member")
