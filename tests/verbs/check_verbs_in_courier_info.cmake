# How courier-info shows nic-cx7 and nic-bnxt:
#  1. the real plugins (build/lib/courier) where there is no RDMA device (the
#     CI machines): both found and loadable, init fails with the reason;
#  2. the same sources on the fake verbs device (one ConnectX, one Broadcom):
#     both initialize, and the device report (NIC ABI 1.2 describe) lists the
#     device's capabilities, ports and GIDs, in text and in --json.
#
#   cmake -DCOURIER_INFO=<exe> -DPLUGIN_DIR=<dir> -DFAKE_PLUGIN_DIR=<dir>
#         -DHELPERS=<courier_info_helpers.cmake> -P check_verbs_in_courier_info.cmake

foreach(required COURIER_INFO PLUGIN_DIR FAKE_PLUGIN_DIR HELPERS)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "check_verbs_in_courier_info.cmake: -D${required}=... is required")
  endif()
endforeach()
foreach(variable COURIER_GPU_BACKEND COURIER_NIC_BACKEND COURIER_LOG_LEVEL COURIER_IB_DEVICE
                 COURIER_IB_GID_INDEX COURIER_TOPOLOGY_XML FAKE_VERBS_DEVICES)
  unset(ENV{${variable}})
endforeach()
include(${HELPERS})

# --- 1. the real plugins, no RDMA device ------------------------------------
set(ENV{COURIER_BACKEND_PATH} "${PLUGIN_DIR}")
run_courier_info(text)
foreach(name cx7 bnxt)
  expect("${text}" "\n  nic +${name} +1\\.[0-9]+ +usable +[^\n]*/libcourier-nic-${name}\\.so\n"
         "nic-${name} found and loadable")
  backend_block("${text}" ${name} block)
  if("${block}" MATCHES "\n +init +ok\n")
    message(STATUS "nic-${name} initialized: this machine has such a device")
    expect("${block}" "\n    device report:\n" "nic-${name} prints its device report")
  else()
    expect("${block}" "\n +init +FAILED: NIC backend '${name}' \\([^)]*\\) failed to initialize: no [^\n]*device"
           "nic-${name}'s init fails with the reason (no RDMA device / none of its family)")
  endif()
endforeach()

# --- 2. on the fake device ----------------------------------------------------
set(ENV{COURIER_BACKEND_PATH} "${FAKE_PLUGIN_DIR}")
set(ENV{FAKE_VERBS_DEVICES} "cx7,bnxt")
run_courier_info(text)
backend_block("${text}" cx7 block)
expect("${block}" "\n +init +ok\n" "nic-cx7 initializes on the fake ConnectX")
expect("${block}" "\n +device +mlx5_0\n" "nic-cx7 opened mlx5_0")
expect("${block}" "\n    device report:\n      mlx5_0: vendor 0x02c9 part 4129 fw [^\n]*, atomics HCA[^\n]*, ODP no[^\n]*max_qp 131072"
       "the ConnectX report: vendor, part, firmware, atomics, ODP, queue pairs")
expect("${block}" "\n        port 1: [^\n]*Ethernet \\(RoCE\\)[^\n]*\\(selected\\)\n" "the port and its link layer")
expect("${block}" "\n          gid\\[3\\] ::ffff:[^\n]* RoCE v2 \\(selected\\)\n"
       "the IPv4-mapped RoCE v2 GID is selected")
backend_block("${text}" bnxt block)
expect("${block}" "\n +init +ok\n" "nic-bnxt initializes on the fake Broadcom NIC")
expect("${block}" "\n      bnxt_re0: vendor 0x14e4 [^\n]*ODP yes" "the Broadcom report shows ODP")
expect("${block}" "\n +mem_kinds +[^\n]*odp" "nic-bnxt registers on demand there")
expect("${block}" "in-flight bytes per peer 1048576" "nic-bnxt's default in-flight cap")

run_courier_info(json --json)
string(JSON count ERROR_VARIABLE json_error LENGTH "${json}" backends)
set(lines 0)
if(NOT json_error AND count GREATER 0)
  math(EXPR last "${count} - 1")
  foreach(i RANGE 0 ${last})
    string(JSON name GET "${json}" backends ${i} name)
    if(name STREQUAL "cx7")
      string(JSON lines LENGTH "${json}" backends ${i} device_report)
    endif()
  endforeach()
endif()
if(NOT lines GREATER 2)
  string(APPEND failures "  - JSON: nic cx7 has no device_report lines (${json_error})\n")
endif()

if(failures)
  message(FATAL_ERROR "courier-info did not show the verbs backends as it should:\n${failures}\n"
                      "--- last text output ---\n${text}")
endif()
message(STATUS "courier-info showed nic-cx7 and nic-bnxt as expected")
