# squad_eval on the committed dev set with two predictions: one exact ("Sea boots." for "sea
# boots"), one partial ("shaggy coats" for "shaggy watch coats": P 1, R 2/3, F1 0.8); the other 71
# questions have none. Expected: EM 100*1/73 = 1.36986..., F1 100*1.8/73 = 2.46575...
# A predictions file that is not an object is a clear error.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/preds.json "{\"dev-000-00\": \"Sea boots.\", \"dev-000-01\": \"shaggy coats\"}")
execute_process(COMMAND ${SQUAD_EVAL} ${SOURCE_DIR}/data/squad/dev-v1.1.json ${WORK_DIR}/preds.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "squad_eval failed (${rc}): ${out}${err}")
endif()
message(STATUS "${out}")
if(NOT out MATCHES "\"exact_match\":1\\.36986" OR NOT out MATCHES "\"f1\":2\\.46575"
   OR NOT out MATCHES "questions: 73, without a prediction: 71")
  message(FATAL_ERROR "unexpected output: ${out}")
endif()
file(WRITE ${WORK_DIR}/bad.json "[\"x\"]")
execute_process(COMMAND ${SQUAD_EVAL} ${SOURCE_DIR}/data/squad/dev-v1.1.json ${WORK_DIR}/bad.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "squad_eval: .*bad.json: predictions must be a JSON object")
  message(FATAL_ERROR "a non-object predictions file should be an error: ${rc} ${out}${err}")
endif()
