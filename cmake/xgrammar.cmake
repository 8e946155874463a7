# XGrammar (Apache-2.0), the grammar engine under src/structured/: never committed, built from its
# pinned PyPI sdist by scripts/fetch_xgrammar.sh into a cache outside the repository
# (KVASIR_XGRAMMAR_DIR, default ~/.cache/kvasir/xgrammar-0.2.9) with scripts/xgrammar-patches/
# applied, one static library per variant:
# the sanitizer and fuzz builds link an instrumented one (asan, tsan; -gcc with GCC), the others
# plain.
# Configuring runs the script, which returns at once when the variant is already built, so a fresh
# build directory (or CI clone with a warm cache) needs nothing else. Defines the imported target
# kvasir_xgrammar; only structured/ may link it (its headers stay out of our public headers).
set(KVASIR_XGRAMMAR_DIR "$ENV{HOME}/.cache/kvasir/xgrammar-0.2.9"
    CACHE PATH "XGrammar cache (sdist unpacked in src/, builds in build-<variant>/)")
if(DEFINED ENV{KVASIR_XGRAMMAR_DIR})
  set(KVASIR_XGRAMMAR_DIR "$ENV{KVASIR_XGRAMMAR_DIR}" CACHE PATH "" FORCE)
endif()

if(KVASIR_TSAN)
  set(kvasir_xgrammar_variant tsan)
elseif(KVASIR_SANITIZE OR KVASIR_FUZZ)
  set(kvasir_xgrammar_variant asan)
else()
  set(kvasir_xgrammar_variant plain)
endif()
# A sanitizer runtime must come from the compiler that instrumented the code: GCC sanitizer
# builds (scripts/build.sh -DKVASIR_SANITIZE=ON with the default compiler) get g++ variants.
if(NOT kvasir_xgrammar_variant STREQUAL "plain" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(kvasir_xgrammar_variant ${kvasir_xgrammar_variant}-gcc)
endif()

set(kvasir_xgrammar_script ${PROJECT_SOURCE_DIR}/scripts/fetch_xgrammar.sh)
file(GLOB kvasir_xgrammar_patches ${PROJECT_SOURCE_DIR}/scripts/xgrammar-patches/*.patch)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${kvasir_xgrammar_script} ${kvasir_xgrammar_patches})
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env KVASIR_XGRAMMAR_DIR=${KVASIR_XGRAMMAR_DIR}
          bash ${kvasir_xgrammar_script} ${kvasir_xgrammar_variant}
  RESULT_VARIABLE kvasir_xgrammar_rc)
set(kvasir_xgrammar_lib ${KVASIR_XGRAMMAR_DIR}/build-${kvasir_xgrammar_variant}/libxgrammar.a)
if(NOT kvasir_xgrammar_rc EQUAL 0 OR NOT EXISTS ${kvasir_xgrammar_lib})
  message(FATAL_ERROR "XGrammar (${kvasir_xgrammar_variant}) is missing and could not be built: "
                      "run scripts/fetch_xgrammar.sh ${kvasir_xgrammar_variant} (see its output)")
endif()
message(STATUS "XGrammar: ${kvasir_xgrammar_lib}")

set(kvasir_xgrammar_src ${KVASIR_XGRAMMAR_DIR}/src)
add_library(kvasir_xgrammar STATIC IMPORTED GLOBAL)
set_target_properties(kvasir_xgrammar PROPERTIES
  IMPORTED_LOCATION ${kvasir_xgrammar_lib}
  INTERFACE_INCLUDE_DIRECTORIES
    "${kvasir_xgrammar_src}/include;${kvasir_xgrammar_src}/3rdparty/picojson;${kvasir_xgrammar_src}/3rdparty/dlpack/include"
  INTERFACE_COMPILE_DEFINITIONS "XGRAMMAR_ENABLE_CPPTRACE=0;XGRAMMAR_ENABLE_INTERNAL_CHECK=0"
  INTERFACE_LINK_LIBRARIES Threads::Threads)
