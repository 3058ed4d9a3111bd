# Runs courier-info and checks how it shows nic-efa: where there is no EFA
# (the CI machines), its init fails with the reason, which names the
# provider and the knob, and the next backend (ofi) is there to fall back
# to; with COURIER_EFA_PROVIDER=shm it initializes, and its device and a
# warning say that this is a test stand-in, not EFA.
#
#   cmake -DCOURIER_INFO=<exe> -DPLUGIN_DIR=<dir> -DHELPERS=<courier_info_helpers.cmake>
#         -P check_efa_in_courier_info.cmake

foreach(required COURIER_INFO PLUGIN_DIR HELPERS)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "check_efa_in_courier_info.cmake: -D${required}=... is required")
  endif()
endforeach()

set(ENV{COURIER_BACKEND_PATH} "${PLUGIN_DIR}")
foreach(variable COURIER_GPU_BACKEND COURIER_NIC_BACKEND COURIER_LOG_LEVEL COURIER_EFA_PROVIDER
                 COURIER_OFI_PROVIDER COURIER_TOPOLOGY_XML)
  unset(ENV{${variable}})
endforeach()

include(${HELPERS})

# --- the default provider (efa) ---------------------------------------------
run_courier_info(text)
expect("${text}" "\n  nic +efa +1\\.[0-9]+ +usable +[^\n]*/libcourier-nic-efa\\.so\n"
       "nic-efa found and loadable (its ABI is fine)")
expect("${text}" "\n  nic ofi \\(ABI [^\n]*\n +description +[^\n]+\n +init +ok\n"
       "nic-ofi initializes: there is a backend to fall back to")
expect("${text}" "\n  COURIER_NIC_BACKEND +\\(unset\\) +([^\n]*, )?efa, ([^\n]*, )?ofi[,\n]"
       "an unforced selection tries efa, then ofi")
backend_block("${text}" efa block)
if("${block}" MATCHES "\n +init +ok\n")
  # A machine with an EFA device: then the device is the real thing.
  message(STATUS "nic-efa initialized: an EFA device is present; the no-device path is not exercised")
  expect("${block}" "\n +device +[^\n(]+\n" "nic-efa names its device without a stand-in note")
else()
  expect("${block}" "\n +init +FAILED: NIC backend 'efa' \\([^)]*\\) failed to initialize: libfabric provider 'efa' not found: no EFA device[^\n]*\\(COURIER_EFA_PROVIDER=efa\\)"
         "nic-efa's init fails naming the provider, the missing device and the knob")

  run_courier_info(json --json)
  json_backend("${json}" nic efa i)
  if(i LESS 0)
    string(APPEND failures "  - JSON: nic efa is not among the backends\n")
  else()
    string(JSON initialized GET "${json}" backends ${i} initialized)
    string(JSON error GET "${json}" backends ${i} error)
    if(initialized)
      string(APPEND failures "  - JSON: nic efa initialized, the text said it failed\n")
    endif()
    expect("${error}" "libfabric provider 'efa' not found: no EFA device.*\\(COURIER_EFA_PROVIDER=efa\\)"
           "JSON: nic efa's error gives the reason")
  endif()
endif()

# --- a test stand-in: said so in the device and in a warning ----------------
set(ENV{COURIER_EFA_PROVIDER} "shm")
execute_process(COMMAND "${COURIER_INFO}" OUTPUT_VARIABLE text ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "courier-info exited with ${rc}\nstdout:\n${text}\nstderr:\n${err}")
endif()
backend_block("${text}" efa block)
expect("${block}" "\n +init +ok\n" "nic-efa over shm initializes")
expect("${block}" "\n +device +shm \\(COURIER_EFA_PROVIDER: test stand-in, not EFA\\)\n"
       "the device says shm is a stand-in, not EFA")
expect("${block}" "\n +imm_bytes +4\n" "4 bytes of immediate data, as on EFA")
expect("${block}" "\n +atomic_ops +0\n" "no transport atomics")
expect("${block}" "\n    device report:\n      provider: shm [^\n]*\n"
       "the device report names the stand-in provider")
expect("${block}" "\n      message order: [^\n]*; ordered writes claimed: no;"
       "the device report says no ordered writes are claimed")
expect("${block}" "\n      atomics: none offered by this backend"
       "the device report says the backend offers no atomics")
if("${block}" MATCHES "\n +caps +[^\n]*ordered_writes")
  string(APPEND failures "  - nic-efa over shm claims ordered_writes\n")
endif()
expect("${err}" "warn efa: COURIER_EFA_PROVIDER=shm: nic-efa runs over libfabric provider shm as a test stand-in, not on EFA hardware"
       "a warning says the run is on a stand-in")

if(failures)
  message(FATAL_ERROR "courier-info did not show nic-efa as it should:\n${failures}\n"
                      "--- last human output ---\n${text}")
endif()
message(STATUS "courier-info showed nic-efa as expected")
