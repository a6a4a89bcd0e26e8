# bert_data on data/corpus/valid: writes 128- and 384-token example files, checks the report and
# the files' headers; and that bad input is a clear error (an input that is the output, an empty
# input directory).
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/empty)
foreach(cfg "128;20" "384;56")
  list(GET cfg 0 seq)
  list(GET cfg 1 pred)
  execute_process(COMMAND ${BERT_DATA} -i ${SOURCE_DIR}/data/corpus/valid -o ${WORK_DIR}/valid-${seq}.bex
                          --seq-len ${seq} --max-predictions ${pred} --dupe-factor 2
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bert_data --seq-len ${seq} failed (${rc}): ${out}${err}")
  endif()
  message(STATUS "${out}")
  if(NOT out MATCHES "examples of at most ${seq} tokens" OR NOT out MATCHES "read back and validated")
    message(FATAL_ERROR "unexpected report: ${out}")
  endif()
  file(READ ${WORK_DIR}/valid-${seq}.bex head LIMIT 32 HEX)
  # magic "SPLMBERT", version 1
  if(NOT head MATCHES "^53504c4d4245525401000000")
    message(FATAL_ERROR "valid-${seq}.bex: unexpected header ${head}")
  endif()
endforeach()
execute_process(COMMAND ${BERT_DATA} -i ${WORK_DIR}/empty -o ${WORK_DIR}/none.bex
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "bert_data: error: ")
  message(FATAL_ERROR "an empty input directory should be an error: ${rc} ${out}${err}")
endif()
message(STATUS "empty input: ${err}")
