# ctest driver for tools/perf-table.py on tests/data/perf-table/sample.json. The expected cells are the
# medians of the sample's repetitions, worked out by hand from its values (each column's median on its
# own): rope/S2 times 320, 300, 290 ns -> 300 ns, bytes/s 1.7e11, 1.6e11, 1.5e11 -> 160.0 GB/s, limit
# fractions 0.40, 0.50, 0.60 -> 0.50; attention/S5 has aggregates only: its median (16.1 ms,
# 6.69e10 FLOP/s, 0.46, 0.28), not its mean (20 ms); attention/S6-bf16 (decode) fills all four number
# cells from its median (1.40 ms, 2.4e10 B/s, 9.6e10 FLOP/s, 0.39, 0.45); kv_cache/append-bf16 1500, 1020, 1070 us ->
# 1.07 ms, 2.0e10, 2.4e10, 2.35e10 -> 23.5 GB/s, 0.70, 0.95, 0.89 -> 0.89; attention/S6 reported an error.
# Then --update on a copy of tests/data/perf-table/page.md: text outside the markers kept, a rows=
# marker gets only its rows, a second run changes nothing, and a file without markers is an error.
set(script "${SOURCE_DIR}/tools/perf-table.py")
set(sample "${SOURCE_DIR}/tests/data/perf-table/sample.json")

execute_process(COMMAND "${PYTHON}" "${script}" --json "${sample}" RESULT_VARIABLE rc OUTPUT_VARIABLE table ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "perf-table.py --json failed (${rc}): ${err}")
endif()
foreach(expected
    "Machine: Sample CPU 9000, 2 CPUs; kernels chosen by the dispatch: avx512bw; compiler: g++ 12.2.0, CMake Release."
    "Date: 2026-12-04T08:00:00+00:00; median of 3 repetitions."
    "Command: `build/bench/posenc-bench --benchmark_filter=sample --benchmark_repetitions=3`"
    "| benchmark | time | GB/s | GFLOP/s | ratio to its in-run limit | FMA-peak ratio |"
    "| `rope/S2/half_split` | 300 ns | 160.0 |  | 0.50 |  |"
    "| `attention/S5/threads:1` | 16.1 ms |  | 66.9 | 0.46 | 0.28 |"
    "| `attention/S6-bf16/threads:1` | 1.40 ms | 24.0 | 96.0 | 0.39 | 0.45 |"
    "| `kv_cache/append-bf16/threads:1` | 1.07 ms | 23.5 |  | 0.89 |  |"
    "| `attention/S6/threads:1` | error: inputs drifted into subnormals |")
  string(FIND "${table}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "perf-table.py's table lacks the line\n  ${expected}\nIt printed:\n${table}")
  endif()
endforeach()

set(page "${WORK_DIR}/page.md")
file(MAKE_DIRECTORY "${WORK_DIR}")
configure_file("${SOURCE_DIR}/tests/data/perf-table/page.md" "${page}" COPYONLY)
foreach(round 1 2)
  execute_process(COMMAND "${PYTHON}" "${script}" --json "${sample}" --update "${page}" RESULT_VARIABLE rc OUTPUT_QUIET
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "perf-table.py --update failed (${rc}): ${err}")
  endif()
  file(READ "${page}" updated_${round})
endforeach()
if(NOT updated_1 STREQUAL updated_2)
  message(FATAL_ERROR "a second --update changed the page:\n${updated_2}")
endif()
foreach(kept "# A page\n\nText before.\n\n<!-- perf-table:begin -->\n" "<!-- perf-table:end -->\n\nBetween.\n\n"
             "<!-- perf-table:end -->\n\nText after.\n")
  string(FIND "${updated_1}" "${kept}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--update lost the text\n${kept}\nThe page:\n${updated_1}")
  endif()
endforeach()
string(FIND "${updated_1}" "stale table" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "--update kept the old block's text:\n${updated_1}")
endif()
string(FIND "${updated_1}" "<!-- perf-table:begin rows=^kv_cache/ -->" at)
string(SUBSTRING "${updated_1}" ${at} -1 subset)
string(FIND "${subset}" "| `kv_cache/append-bf16/threads:1` | 1.07 ms | 23.5 |  | 0.89 |" has_kv)
string(FIND "${subset}" "rope/S2" has_rope)
if(has_kv EQUAL -1 OR NOT has_rope EQUAL -1)
  message(FATAL_ERROR "the rows=^kv_cache/ block does not hold exactly its rows:\n${subset}")
endif()

# A named block: the default run leaves it; --table other fills it with its rows and leaves the rest.
string(FIND "${updated_1}" "old text of the named block" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the default --update rewrote the table=other block:\n${updated_1}")
endif()
execute_process(COMMAND "${PYTHON}" "${script}" --json "${sample}" --table other --update "${page}" RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_VARIABLE err)
file(READ "${page}" updated_other)
set(named_marker "<!-- perf-table:begin table=other rows=^rope/ -->")
string(FIND "${updated_1}" "${named_marker}" at1)
string(FIND "${updated_other}" "${named_marker}" at2)
string(SUBSTRING "${updated_1}" 0 ${at1} before_1)
string(SUBSTRING "${updated_other}" 0 ${at2} before_2)
string(SUBSTRING "${updated_other}" ${at2} -1 named)
string(FIND "${named}" "| `rope/S2/half_split` | 300 ns | 160.0 |" has_rope)
string(FIND "${named}" "kv_cache" has_kv)
string(FIND "${named}" "old text of the named block" has_stale)
if(NOT rc EQUAL 0 OR has_rope EQUAL -1 OR NOT has_kv EQUAL -1 OR NOT has_stale EQUAL -1 OR NOT before_1 STREQUAL before_2)
  message(FATAL_ERROR "--table other did not rewrite exactly its block (rc ${rc}, ${err}):\n${updated_other}")
endif()

file(WRITE "${WORK_DIR}/no-markers.md" "# no markers\n")
execute_process(COMMAND "${PYTHON}" "${script}" --json "${sample}" --update "${WORK_DIR}/no-markers.md"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(rc EQUAL 0)
  message(FATAL_ERROR "--update on a page without markers succeeded")
endif()
