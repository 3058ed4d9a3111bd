# Helpers of the courier-info checks (check_*_in_courier_info.cmake in
# tests/unit/registry, tests/verbs and tests/integration/nic_efa), included
# at their top level through -DHELPERS=<this file>:
#   expect(TEXT REGEX WHAT)        records WHAT in `failures` when TEXT does not match
#   run_courier_info(OUT ARGS...)  runs ${COURIER_INFO} ARGS..., stdout into OUT; fails on exit != 0
#   backend_block(TEXT NAME OUT)   the block of NIC backend NAME under "Backends", up to its knobs
#   backend_block_of(TEXT KIND NAME OUT)  the same for a backend of KIND (nic, gpu)
#   json_backend(JSON KIND NAME OUT)      the index of backend KIND/NAME in --json's
#                                         "backends" (-1 when absent; a failure when
#                                         the array is missing)
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
  backend_block_of("${text}" nic ${name} block)
  set(${out_var} "${block}" PARENT_SCOPE)
endfunction()

function(backend_block_of text kind name out_var)
  set(block "")
  string(FIND "${text}" "\n  ${kind} ${name} (ABI " start)
  if(start GREATER_EQUAL 0)
    string(SUBSTRING "${text}" ${start} -1 block)
    string(FIND "${block}" "\n    knobs:" end)
    if(end GREATER 0)
      string(SUBSTRING "${block}" 0 ${end} block)
    endif()
  endif()
  set(${out_var} "${block}" PARENT_SCOPE)
endfunction()

function(json_backend json kind name out_var)
  set(index -1)
  string(JSON count ERROR_VARIABLE json_error LENGTH "${json}" backends)
  if(json_error)
    set(failures "${failures}  - --json output has no backends array: ${json_error}\n" PARENT_SCOPE)
    set(count 0)
  endif()
  if(count GREATER 0)
    math(EXPR last "${count} - 1")
    foreach(i RANGE 0 ${last})
      string(JSON k GET "${json}" backends ${i} kind)
      string(JSON n GET "${json}" backends ${i} name)
      if(k STREQUAL "${kind}" AND n STREQUAL "${name}")
        set(index ${i})
        break()
      endif()
    endforeach()
  endif()
  set(${out_var} ${index} PARENT_SCOPE)
endfunction()
