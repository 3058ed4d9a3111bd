# Helpers of the courier-info checks (check_courier_info.cmake,
# check_gpu_plugin_no_device.cmake), included at their top level:
#   expect(TEXT REGEX WHAT)        records WHAT in `failures` when TEXT does not match
#   run_courier_info(OUT ARGS...)  runs ${COURIER_INFO} ARGS..., stdout into OUT; fails on exit != 0
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
