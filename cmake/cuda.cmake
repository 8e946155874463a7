# The CUDA backend switch. KVASIR_CUDA=AUTO builds it when a CUDA compiler is found, ON requires
# one, OFF never looks (a CPU-only build never needs nvcc). Sets KVASIR_HAVE_CUDA for the tree.
# Code is built for Hopper (sm_90a machine code) with compute_90 PTX as the fallback for newer GPUs.
string(TOUPPER "${KVASIR_CUDA}" _kvasir_cuda_mode)
set(KVASIR_HAVE_CUDA OFF)
if(NOT _kvasir_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KVASIR_CUDA must be AUTO, ON or OFF (got '${KVASIR_CUDA}')")
endif()
if(NOT _kvasir_cuda_mode STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # We pass -gencode ourselves: 90a needs a newer CMake than our minimum to be spelled here.
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag; CUDA sources inherit CXX_STANDARD 20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(KVASIR_CUDA_GENCODE
        "SHELL:-gencode arch=compute_90a,code=sm_90a" "SHELL:-gencode arch=compute_90,code=compute_90"
        CACHE STRING "nvcc -gencode options for the CUDA backend")
    set(KVASIR_HAVE_CUDA ON)
    message(STATUS "Kvasir: CUDA backend ON (${CMAKE_CUDA_COMPILER}, CUDA ${CUDAToolkit_VERSION})")
  elseif(_kvasir_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "KVASIR_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or PATH)")
  else()
    message(STATUS "Kvasir: CUDA backend OFF (no CUDA compiler found)")
  endif()
endif()

# A binary that runs on other machines: libstdc++/libgcc linked in (the GPU machine has an older
# userland than the build machine). Off by default.
option(KVASIR_STATIC_RUNTIME "Link libstdc++ and libgcc statically" OFF)
if(KVASIR_STATIC_RUNTIME)
  add_link_options(-static-libstdc++ -static-libgcc)
endif()
