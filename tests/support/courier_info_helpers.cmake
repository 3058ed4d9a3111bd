# Helpers of the courier-info checks (check_*_in_courier_info.cmake in
# tests/unit/registry, tests/verbs and tests/integration/nic_efa), included
# at their top level through -DHELPERS=<this file>:
#   expect(TEXT REGEX WHAT)        records WHAT in `failures` when TEXT does not match
#   run_courier_info(OUT ARGS...)  runs ${COURIER_INFO} ARGS..., stdout into OUT; fails on exit != 0
#   backend_block(TEXT NAME OUT)   the block of NIC backend NAME under "Backends", up to its knobs
set(failures "")
function(expect text regex what)
  if(NOT "${text}" MATCHES "${regex}")
    set(failures "${failures}  - ${what}\n      (no match for: ${regex})\n" PARENT_SCOPE)
  endif()
endfunction()

function(run_courier_info out_var)
  execute_process(COMMAND "${COURIER_INFO}" ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "courier-info ${ARGN} exited with ${rc}\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(backend_block text name out_var)
  set(block "")
  string(FIND "${text}" "\n  nic ${name} (ABI " start)
  if(start GREATER_EQUAL 0)
    string(SUBSTRING "${text}" ${start} -1 block)
    string(FIND "${block}" "\n    knobs:" end)
    if(end GREATER 0)
      string(SUBSTRING "${block}" 0 ${end} block)
    endif()
  endif()
  set(${out_var} "${block}" PARENT_SCOPE)
endfunction()
