# examples.sparse_lm_smoke: encodes data/corpus/valid with GPT-2 BPE, trains configs/s1-tiny-train.json
# for 12 steps (vocab 50257 to fit the token file), and checks metrics.jsonl: a run line, train lines
# with loss/xentropy/perplexity, at least one sparsity_update with pruned == regrown, and an eval line;
# with log_every 12 every update (after steps 5 and 10) still has its own training line.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${ENCODE} --mode gpt -i ${SOURCE_DIR}/data/corpus/valid -o ${WORK_DIR}/valid.tok
                        --vocab ${SOURCE_DIR}/data/gpt2
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "encode_dataset failed (${rc})")
endif()
execute_process(COMMAND ${TRAIN} --config ${SOURCE_DIR}/configs/s1-tiny-train.json --train ${WORK_DIR}/valid.tok
                        --valid ${WORK_DIR}/valid.tok --vocab 50257 --steps 12 --out ${WORK_DIR}/run
                        --set eval_batches=2 --set log_every=12
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sparse_lm failed (${rc})")
endif()
message(STATUS "summary: ${out}")
file(READ ${WORK_DIR}/run/metrics.jsonl log)
foreach(pattern "\"kind\":\"run\"" "\"kind\":\"train\"" "\"xentropy\":" "\"perplexity\":" "\"sparsity_update\":"
                "\"kind\":\"eval\"" "\"step\":12")
  string(FIND "${log}" "${pattern}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "metrics.jsonl has no ${pattern}:\n${log}")
  endif()
endforeach()
# every update prunes as many blocks as it regrows
string(REGEX MATCHALL "\"pruned\":[0-9]+,\"regrown\":[0-9]+" updates "${log}")
foreach(u IN LISTS updates)
  string(REGEX MATCH "\"pruned\":([0-9]+),\"regrown\":([0-9]+)" m "${u}")
  if(NOT CMAKE_MATCH_1 EQUAL CMAKE_MATCH_2)
    message(FATAL_ERROR "pattern update with pruned != regrown: ${u}")
  endif()
endforeach()
string(REGEX MATCHALL "\"regrown\":[0-9]+,\"step\":[0-9]+" logged "${log}")
string(REGEX REPLACE "\"regrown\":[0-9]+,\"step\":" "" logged "${logged}")
if(NOT logged STREQUAL "5;10")
  message(FATAL_ERROR "pattern updates logged after steps '${logged}', expected '5;10' (log_every 12):\n${log}")
endif()
string(JSON steps GET "${out}" steps)
if(NOT steps EQUAL 12)
  message(FATAL_ERROR "expected 12 steps, summary says ${steps}")
endif()
