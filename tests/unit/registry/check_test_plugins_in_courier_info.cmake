# Runs courier-info against the test plugins and checks what it reports.
#
#   cmake -DCOURIER_INFO=<exe> -DTEST_PLUGIN_DIR=<dir> [-DEXPECT_USABLE=gpu:host,nic:ofi]
#         [-DPYTHON=<python3>] -DHELPERS=<courier_info_helpers.cmake>
#         -P check_test_plugins_in_courier_info.cmake
#
# EXPECT_USABLE names the real plugins this build produced; each must be
# listed as usable beside the broken test plugins. The human output is
# checked with regular expressions, the --json output is parsed (and, when
# python3 is available, validated strictly by json.tool).

foreach(required COURIER_INFO TEST_PLUGIN_DIR HELPERS)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "check_test_plugins_in_courier_info.cmake: -D${required}=... is required")
  endif()
endforeach()
string(REPLACE "," ";" expect_usable "${EXPECT_USABLE}")

# A known environment: only the test directory on the path, nothing forced.
set(ENV{COURIER_BACKEND_PATH} "${TEST_PLUGIN_DIR}")
foreach(variable COURIER_GPU_BACKEND COURIER_NIC_BACKEND COURIER_SIM_IMM_BYTES
                 COURIER_FIFO_DEPTH COURIER_LOG_LEVEL COURIER_TEST_TYPO COURIER_OFI_PROVIDER)
  unset(ENV{${variable}})
endforeach()

include(${HELPERS})

# Each broken test plugin: file name, then (on the next line) the reason.
# A CMake list cannot hold ';', so reasons spell it <SEMI>.
set(rejections
  "libcourier-nic-abimajor2\\.so" "reports ABI major 2 in its struct<SEMI> this Courier needs 1"
  "libcourier-nic-v2only\\.so" "exports ABI major 2 only<SEMI> this Courier speaks major 1"
  "libcourier-nic-short\\.so" "struct_size 16 is shorter than the [0-9]+ bytes ABI 1\\.0 requires"
  "libcourier-gpu-short\\.so" "struct_size [0-9]+ is shorter than the [0-9]+ bytes ABI 1\\.0 requires"
  "libcourier-nic-nullentry\\.so" "required entry 'post_write' is NULL"
  "libcourier-nic-nullstruct\\.so" "courier_nic_backend_v1\\(\\) returned NULL"
  "libcourier-nic-misnamed\\.so" "its struct is named 'somebody-else' but the file name says 'misnamed'"
  "libcourier-nic-nosymbol\\.so" "not a Courier plugin: no courier_nic_backend_v1 symbol"
  "libcourier-nic-wrongkind\\.so" "is a GPU plugin \\(exports courier_gpu_backend_v1\\), not a NIC plugin"
  "libcourier-nic-unresolved\\.so" "not loadable: [^\n]*courier_test_function_nobody_defines"
  "libcourier-nic-garbage\\.so" "not loadable: not an ELF shared object \\(no ELF magic at the start\\)"
  "libcourier-nic-truncated\\.so" "not loadable: truncated: segment [0-9]+ \\(PT_LOAD\\) ends at byte [0-9]+ but the file has 4096 bytes")

# --- human output -----------------------------------------------------------
run_courier_info(text)
expect("${text}" "^Courier [0-9]+\\.[0-9]+\\.[0-9]+\nPlugin ABI: gpu 1\\.18, nic 1\\.3\n" "version and ABI header")
expect("${text}" "\n  1 +[^\n]*/tests/plugins +COURIER_BACKEND_PATH\n" "test directory searched first")
expect("${text}" "\n  2 +[^\n]+ +default" "default plugin directory searched second")
list(LENGTH rejections count)
math(EXPR last "${count} - 1")
foreach(i RANGE 0 ${last} 2)
  math(EXPR j "${i} + 1")
  list(GET rejections ${i} file)
  list(GET rejections ${j} reason)
  string(REPLACE "<SEMI>" ";" reason "${reason}")
  expect("${text}" " rejected +[^\n]*/${file}\n +reason: ${reason}\n" "${file} rejected with its reason")
endforeach()
expect("${text}" "\n  nic +sim +1\\.0 +usable +[^\n]*/libcourier-nic-sim\\.so\n" "good test plugin nic sim usable")
expect("${text}" "\n  gpu +sim +1\\.0 +usable +[^\n]*/libcourier-gpu-sim\\.so\n" "good test plugin gpu sim usable")
expect("${text}" "\n  nic mock [^\n]*\n +description [^\n]*\n +init +FAILED: NIC backend 'mock' \\([^)]*\\) failed to initialize: mock: no device found"
       "mock's init failure with the plugin's reason")
expect("${text}" "\n  nic sim [^\n]*\n +description [^\n]*\n +init +ok\n" "sim initializes")
expect("${text}" "\n +caps +rma_write, write_imm, ordered_writes, delivery_complete, loopback\n" "capabilities by name")
expect("${text}" "\n +COURIER_SIM_IMM_BYTES +4 +default +4\\|8 +" "plugin knob with value, source and allowed values")
expect("${text}" "\nConfiguration:\n +NAME +VALUE +SOURCE +HELP\n +COURIER_FIFO_DEPTH +1024 +default " "effective configuration")
foreach(entry IN LISTS expect_usable)
  string(REPLACE ":" ";" parts "${entry}")
  list(GET parts 0 kind)
  list(GET parts 1 name)
  expect("${text}" "\n  ${kind} +${name} +1\\.[0-9]+ +usable +" "real plugin ${kind} ${name} usable")
endforeach()
list(FIND expect_usable "nic:ofi" ofi_index)
if(ofi_index GREATER_EQUAL 0)
  # Its device report (NIC ABI 1.2 describe): what the provider (shm, the
  # default) granted and what Courier made of it.
  expect("${text}" "\n    device report:\n      provider: shm \\(provider version [0-9]+\\.[0-9]+\\), libfabric [0-9]+\\.[0-9]+\n      fabric shm, domain shm, endpoint FI_EP_RDM\n      caps: [^\n]*FI_RMA[^\n]*\n"
         "nic-ofi's device report names its provider, fabric, domain and caps")
  expect("${text}" "\n      immediate data for Courier: 8 bytes\n" "nic-ofi's device report gives the immediate width")
  expect("${text}" "\n      settings: write watchdog 30 s\n" "nic-ofi's device report ends with its settings")
endif()
if("${text}" MATCHES "\nErrors:")
  string(APPEND failures "  - an Errors section in a clean environment\n")
endif()

# --- bad values: reported, and everything else still listed ----------------
set(ENV{COURIER_SIM_IMM_BYTES} "3")
set(ENV{COURIER_FIFO_DEPTH} "7")
set(ENV{COURIER_TEST_TYPO} "1")
run_courier_info(text)
expect("${text}" "\n  error: COURIER_FIFO_DEPTH='7' is invalid: " "bad core knob as an error line")
expect("${text}" "\n +COURIER_FIFO_DEPTH +7 +environment \\(invalid\\) " "bad core knob still listed with its value")
expect("${text}" "\n +COURIER_CHANNELS +8 +default " "other core knobs still listed")
expect("${text}" "\n  error: COURIER_SIM_IMM_BYTES='3' is invalid for NIC backend 'sim': expected one of 4, 8\n" "bad plugin knob as an error line")
expect("${text}" "\n +COURIER_SIM_IMM_BYTES +3 +environment +4\\|8 +[^\n]*\n +INVALID: expected one of 4, 8\n" "bad plugin knob marked in its table")
expect("${text}" "\n  gpu +sim +1\\.0 +usable " "plugins still listed")
expect("${text}" "\n  warning: COURIER_TEST_TYPO is set, but " "unknown COURIER_* variable warned about")

# --- JSON (still with the bad plugin knob) ---------------------------------
unset(ENV{COURIER_FIFO_DEPTH})
run_courier_info(json --json)
if(PYTHON)
  # json.tool is strict where CMake's own parser is lenient.
  set(json_file "${WORK_DIR}/courier-info-output.json")
  file(WRITE "${json_file}" "${json}")
  execute_process(COMMAND "${PYTHON}" -m json.tool "${json_file}"
                  OUTPUT_QUIET ERROR_VARIABLE json_error RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(APPEND failures "  - --json output is not valid JSON: ${json_error}\n")
  endif()
endif()

string(JSON count ERROR_VARIABLE json_error LENGTH "${json}" candidates)
if(json_error)
  string(APPEND failures "  - --json output has no candidates array: ${json_error}\n")
  set(count 0)
endif()
if(count GREATER 0)
  math(EXPR last "${count} - 1")
  foreach(i RANGE 0 ${last})
    string(JSON kind GET "${json}" candidates ${i} kind)
    string(JSON name GET "${json}" candidates ${i} name)
    string(JSON path GET "${json}" candidates ${i} path)
    string(JSON usable GET "${json}" candidates ${i} usable)
    get_filename_component(file "${path}" NAME)
    set("usable_${kind}_${name}" "${usable}")
    if(NOT usable)
      string(JSON "reason_${file}" GET "${json}" candidates ${i} reason)
    endif()
  endforeach()
endif()
list(LENGTH rejections rejection_count)
math(EXPR last "${rejection_count} - 1")
foreach(i RANGE 0 ${last} 2)
  math(EXPR j "${i} + 1")
  list(GET rejections ${i} file_regex)
  list(GET rejections ${j} reason)
  string(REPLACE "<SEMI>" ";" reason "${reason}")
  string(REPLACE "\\." "." file "${file_regex}")
  if(NOT DEFINED "reason_${file}")
    string(APPEND failures "  - JSON: ${file} is not listed as rejected\n")
  elseif(NOT "${reason_${file}}" MATCHES "^${reason}$")
    string(APPEND failures "  - JSON: ${file}'s reason '${reason_${file}}' does not match '${reason}'\n")
  endif()
endforeach()
foreach(entry nic:sim gpu:sim nic:mock ${expect_usable})
  string(REPLACE ":" "_" key "${entry}")
  if(NOT usable_${key})
    string(APPEND failures "  - JSON: ${entry} is not listed as usable\n")
  endif()
endforeach()
string(JSON errors ERROR_VARIABLE json_error GET "${json}" errors)
expect("${errors}" "COURIER_SIM_IMM_BYTES='3' is invalid for NIC backend 'sim'" "JSON: bad plugin knob among the errors")

if(failures)
  message(FATAL_ERROR "courier-info did not report what it should:\n${failures}\n"
                      "--- last human output ---\n${text}")
endif()
message(STATUS "courier-info reported every plugin, reason, knob and error as expected")
