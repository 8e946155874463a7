# FlashInfer (Apache-2.0) for the CUDA backend's prefill attention on Hopper: its SM90 paged prefill
# kernel (header-only, with CUTLASS/CuTe and CCCL as it pins them) behind our op, never committed:
# scripts/fetch_flashinfer.sh unpacks the pinned PyPI wheel's headers into KVASIR_FLASHINFER_DIR
# (default ~/.cache/kvasir/flashinfer-0.7.4). KVASIR_FLASHINFER=AUTO (default) uses it when a CUDA
# build finds (or fetches) the headers, ON requires them, OFF never looks; without it the backend's
# own prefill kernel (attention_prefill.cu) is the only path. Sets KVASIR_HAVE_FLASHINFER and, when
# ON, the interface target kvasir_flashinfer_headers (include paths only; only backend/cuda's
# SM90a library may link it, so no other file sees CUTLASS).
set(KVASIR_FLASHINFER "AUTO" CACHE STRING "FlashInfer prefill path for the CUDA backend: AUTO, ON or OFF")
set(KVASIR_FLASHINFER_DIR "$ENV{HOME}/.cache/kvasir/flashinfer-0.7.4"
    CACHE PATH "FlashInfer headers (include/, cutlass/, cccl/ from scripts/fetch_flashinfer.sh)")
if(DEFINED ENV{KVASIR_FLASHINFER_DIR})
  set(KVASIR_FLASHINFER_DIR "$ENV{KVASIR_FLASHINFER_DIR}" CACHE PATH "" FORCE)
endif()
string(TOUPPER "${KVASIR_FLASHINFER}" _kvasir_fi_mode)
if(NOT _kvasir_fi_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KVASIR_FLASHINFER must be AUTO, ON or OFF (got '${KVASIR_FLASHINFER}')")
endif()

set(KVASIR_HAVE_FLASHINFER OFF)
set(_kvasir_fi_why "")
if(NOT KVASIR_HAVE_CUDA)
  set(_kvasir_fi_why "no CUDA backend")
elseif(_kvasir_fi_mode STREQUAL "OFF")
  set(_kvasir_fi_why "KVASIR_FLASHINFER=OFF")
else()
  set(_kvasir_fi_script ${PROJECT_SOURCE_DIR}/scripts/fetch_flashinfer.sh)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_kvasir_fi_script})
  # Returns at once when the headers are unpacked; otherwise unpacks the cached wheel or
  # downloads it (a machine without network and without the wheel ends up OFF under AUTO).
  execute_process(COMMAND ${CMAKE_COMMAND} -E env KVASIR_FLASHINFER_DIR=${KVASIR_FLASHINFER_DIR}
                          bash ${_kvasir_fi_script} RESULT_VARIABLE _kvasir_fi_rc)
  set(_kvasir_fi_marker ${KVASIR_FLASHINFER_DIR}/include/flashinfer/attention/hopper/prefill_sm90.cuh)
  if(_kvasir_fi_rc EQUAL 0 AND EXISTS ${_kvasir_fi_marker})
    set(KVASIR_HAVE_FLASHINFER ON)
  else()
    set(_kvasir_fi_why "headers not found in ${KVASIR_FLASHINFER_DIR} (scripts/fetch_flashinfer.sh failed)")
  endif()
endif()

if(KVASIR_HAVE_FLASHINFER)
  add_library(kvasir_flashinfer_headers INTERFACE)
  # FlashInfer's CCCL first: its fastdiv needs a newer libcu++ than the toolkit's.
  target_include_directories(kvasir_flashinfer_headers SYSTEM INTERFACE
    ${KVASIR_FLASHINFER_DIR}/cccl/libcudacxx/include ${KVASIR_FLASHINFER_DIR}/cccl/cub
    ${KVASIR_FLASHINFER_DIR}/cccl/thrust ${KVASIR_FLASHINFER_DIR}/include
    ${KVASIR_FLASHINFER_DIR}/cutlass/include ${KVASIR_FLASHINFER_DIR}/cutlass/tools/util/include)
  message(STATUS "Kvasir: FlashInfer prefill path ON (${KVASIR_FLASHINFER_DIR})")
elseif(_kvasir_fi_mode STREQUAL "ON")
  message(FATAL_ERROR "KVASIR_FLASHINFER=ON but the FlashInfer prefill path cannot be built: ${_kvasir_fi_why}")
else()
  message(STATUS "Kvasir: FlashInfer prefill path OFF (${_kvasir_fi_why})")
endif()
