# Helpers that give every library and test the same flags.
#   kvasir_library(NAME SOURCES a.cpp b.cpp DEPS other_lib ...)  -> target kvasir_NAME
#   kvasir_test(NAME SOURCES a_test.cpp DEPS kvasir_x ...)         -> gtest binary, registered with ctest
set(KVASIR_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
if(KVASIR_WERROR)
  list(APPEND KVASIR_WARNINGS -Werror)
endif()
set(KVASIR_SAN_FLAGS "")
if(KVASIR_SANITIZE)
  set(KVASIR_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(KVASIR_TSAN)
  set(KVASIR_SAN_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
endif()
add_compile_options(${KVASIR_SAN_FLAGS})
add_link_options(${KVASIR_SAN_FLAGS})

function(kvasir_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(kvasir_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kvasir_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(kvasir_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${KVASIR_WARNINGS}>)
  target_link_libraries(kvasir_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

function(kvasir_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT KVASIR_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${KVASIR_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE KVASIR_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

# Fuzzing (clang only): every library gets coverage instrumentation and ASan+UBSan; each target
# links libFuzzer's main. Configure with CC=clang CXX=clang++ -DKVASIR_FUZZ=ON (scripts/fuzz does).
option(KVASIR_FUZZ "Build libFuzzer targets (needs clang)" OFF)
if(KVASIR_FUZZ)
  # -fno-sanitize-recover: a UBSan report must abort so that libFuzzer records the input.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
endif()

function(kvasir_fuzz name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT KVASIR_FUZZ)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
endfunction()
