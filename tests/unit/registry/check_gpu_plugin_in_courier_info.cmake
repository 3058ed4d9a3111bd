# Runs courier-info and checks that GPU plugin PLUGIN loads, initializes
# and reports "no device" (device_count 0, with a reason) on a machine
# without that vendor's GPU; where it finds devices, that it names them.
#
#   cmake -DCOURIER_INFO=<exe> -DPLUGIN_DIR=<dir> -DPLUGIN=hip [-DWARP_SIZE=64]
#         -DHELPERS=<courier_info_helpers.cmake> -P check_gpu_plugin_in_courier_info.cmake

foreach(required COURIER_INFO PLUGIN_DIR PLUGIN HELPERS)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "check_gpu_plugin_in_courier_info.cmake: -D${required}=... is required")
  endif()
endforeach()

set(ENV{COURIER_BACKEND_PATH} "${PLUGIN_DIR}")
foreach(variable COURIER_GPU_BACKEND COURIER_NIC_BACKEND COURIER_LOG_LEVEL)
  unset(ENV{${variable}})
endforeach()

include(${HELPERS})

# --- human output -----------------------------------------------------------
run_courier_info(text)
set(file "libcourier-gpu-${PLUGIN}\\.so")
expect("${text}" "\n  gpu +${PLUGIN} +1\\.[0-9]+ +usable +[^\n]*/${file}\n" "gpu ${PLUGIN} listed as usable")
expect("${text}" "\n  gpu ${PLUGIN} \\(ABI 1\\.[0-9]+\\) [^\n]*/${file}\n +description +[^\n]+\n +init +ok\n"
       "gpu ${PLUGIN} initializes")
# The plugin's block under "Backends", up to its knobs.
backend_block_of("${text}" gpu ${PLUGIN} block)
set(devices "")
if("${block}" MATCHES "\n +device_count +([0-9]+)\n")
  set(devices "${CMAKE_MATCH_1}")
endif()
if(devices STREQUAL "" OR devices STREQUAL "0")
  expect("${block}" "\n +device_count +0\n" "gpu ${PLUGIN} reports device_count 0")
  expect("${block}" "\n +no_device_reason +[^ \n-][^\n]*\n" "gpu ${PLUGIN} says why there is no device")
  expect("${block}" "\n +caps +none\n" "gpu ${PLUGIN} reports no capabilities without a device")
  if(DEFINED WARP_SIZE)
    expect("${block}" "\n +warp_size +${WARP_SIZE}\n" "gpu ${PLUGIN} warp_size ${WARP_SIZE}")
  endif()
else()
  # A machine with the GPU: the plugin found it, which is fine too.
  expect("${block}" "\n +device_name +[^ \n-][^\n]*\n" "gpu ${PLUGIN} names its device")
endif()

# --- JSON -------------------------------------------------------------------
run_courier_info(json --json)
json_backend("${json}" gpu ${PLUGIN} i)
if(i LESS 0)
  string(APPEND failures "  - JSON: gpu ${PLUGIN} is not among the backends\n")
else()
  string(JSON initialized GET "${json}" backends ${i} initialized)
  string(JSON devices ERROR_VARIABLE json_error GET "${json}" backends ${i} properties device_count)
  string(JSON reason ERROR_VARIABLE json_error GET "${json}" backends ${i} properties no_device_reason)
  if(NOT initialized)
    string(APPEND failures "  - JSON: gpu ${PLUGIN} did not initialize\n")
  elseif(NOT devices STREQUAL "0")
    message(STATUS "gpu ${PLUGIN}: ${devices} device(s) found; the no-device path is not exercised")
  elseif(reason STREQUAL "")
    string(APPEND failures "  - JSON: gpu ${PLUGIN} gives no no_device_reason\n")
  else()
    message(STATUS "gpu ${PLUGIN}: no device: ${reason}")
  endif()
endif()

if(failures)
  message(FATAL_ERROR "courier-info did not report gpu ${PLUGIN} as loaded without a device:\n"
                      "${failures}\n--- human output ---\n${text}")
endif()
