# bert_data on data/corpus/valid: writes 128- and 384-token example files, checks the report and
# the files' headers; documents with one sentence or without any token are counted and skipped;
# bad input is a clear error (an empty input directory, only one-sentence documents, invalid
# UTF-8 named by file and byte).
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
# expect_failure(WHAT INPUT_DIR PATTERN): bert_data on INPUT_DIR fails with an error matching PATTERN
function(expect_failure what input pattern)
  execute_process(COMMAND ${BERT_DATA} -i ${input} -o ${input}.bex RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "${what} should be an error matching '${pattern}': ${rc} ${out}${err}")
  endif()
  message(STATUS "${what}: ${err}")
endfunction()
expect_failure("an empty input directory" ${WORK_DIR}/empty "bert_data: error: .*empty: directory has no")

# a one-sentence document and two documents without any token (control characters) are skipped
# and reported; the other documents make examples
string(ASCII 1 ctl)
string(ASCII 255 bad)
file(MAKE_DIRECTORY ${WORK_DIR}/mixed ${WORK_DIR}/single ${WORK_DIR}/invalid)
file(WRITE ${WORK_DIR}/mixed/a.txt "Just one sentence here.\n\n${ctl}${ctl}\n\n${ctl}\n\n"
     "The first of several. The second one follows. And a third.\nA fourth, on a new line.\n\n"
     "Another document begins. It has two sentences.\n")
execute_process(COMMAND ${BERT_DATA} -i ${WORK_DIR}/mixed -o ${WORK_DIR}/mixed.bex --seq-len 32 --max-predictions 5
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "3 documents, 7 sentences; skipped 1 documents with one sentence and 2 without any token")
  message(FATAL_ERROR "mixed documents: unexpected result (${rc}): ${out}${err}")
endif()
message(STATUS "mixed documents: ${out}")
file(WRITE ${WORK_DIR}/single/a.txt "Only one sentence.\n\nAnd only one here.\n")
expect_failure("only one-sentence documents" ${WORK_DIR}/single
               "bert_data: error: no examples: every document has fewer than two sentences")
file(WRITE ${WORK_DIR}/invalid/a.txt "Fine text. More.\n\nAnother document. Then a bad byte ${bad} here.\n")
expect_failure("invalid UTF-8" ${WORK_DIR}/invalid "invalid/a.txt: invalid UTF-8 at byte 52 \\(line 3, byte 0xff\\)")
