# Builds and runs tests/consumer/app against sparselm, either through an installed package
# (MODE=find_package) or through the source tree (MODE=add_subdirectory).
#   cmake -DMODE=find_package -DSOURCE_DIR=... -DWORK_DIR=... [-DBUILD_DIR=...] -P check_consumer.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v MODE SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_consumer: ${v} is not set")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(compiler_args)
if(CMAKE_CXX_COMPILER)
  set(compiler_args -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
endif()

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
endfunction()

if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/lib-build -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix
      -DCMAKE_BUILD_TYPE=Release -DSPARSELM_BUILD_TESTS=OFF -DSPARSELM_BUILD_EXAMPLES=OFF
      -DSPARSELM_BUILD_BENCHMARKS=OFF ${compiler_args})
  # The install holds the precompiled kernels library (sparselm::kernels). Under ctest, BUILD_DIR is
  # the suite's own build, whose kernels are already compiled with the same flags: the package is
  # installed from it (the library-only configure above still has to succeed). Run by hand without
  # BUILD_DIR, the library-only build is compiled and installed.
  if(DEFINED BUILD_DIR AND EXISTS ${BUILD_DIR}/cmake_install.cmake)
    run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
  else()
    run(${CMAKE_COMMAND} --build ${WORK_DIR}/lib-build -j 2)
    run(${CMAKE_COMMAND} --install ${WORK_DIR}/lib-build)
  endif()
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/app -B ${WORK_DIR}/app-build
      -DCONSUMER_MODE=find_package -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${compiler_args})
elseif(MODE STREQUAL "add_subdirectory")
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/app -B ${WORK_DIR}/app-build
      -DCONSUMER_MODE=add_subdirectory -DSPARSELM_DIR=${SOURCE_DIR} ${compiler_args})
else()
  message(FATAL_ERROR "check_consumer: unknown MODE '${MODE}'")
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/app-build)
execute_process(COMMAND ${WORK_DIR}/app-build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "consumer program failed (${rc}): ${out}")
endif()
if(MODE STREQUAL "find_package")  # the consumer's own unit tests (built in this mode only)
  execute_process(COMMAND ${WORK_DIR}/app-build/consumer_tests RESULT_VARIABLE rc OUTPUT_VARIABLE tout ERROR_VARIABLE terr)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer unit tests failed (${rc}): ${tout}\n${terr}")
  endif()
endif()
message(STATUS "${MODE}: ${out}")
