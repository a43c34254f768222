# Configures, builds and runs tests/subproject/consumer, which adds fsa with
# add_subdirectory; checks that cmocka was never looked for.
file(REMOVE_RECURSE "${WORK_DIR}")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}/consumer" -B "${WORK_DIR}/build"
    "-DFSA_SOURCE_DIR=${FSA_SOURCE_DIR}" -DCMAKE_BUILD_TYPE=Release)
file(STRINGS "${WORK_DIR}/build/CMakeCache.txt" cmocka REGEX "^FSA_CMOCKA")
if(cmocka)
  message(FATAL_ERROR "the subproject looked for cmocka: ${cmocka}")
endif()
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build" --target consumer)
run("${WORK_DIR}/build/consumer")
message(STATUS "subproject consumer: ${LAST_OUTPUT}")
