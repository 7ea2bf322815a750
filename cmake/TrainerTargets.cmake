# Shared compile settings. Every target gets identical flags so the torch PCH can be reused.
set(TRAINER_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# GCC 12 only: -Wstringop-overflow reports a memcpy "bound between 2^63 and 2^64" inside libstdc++'s
# std::string whenever `"literal" + std::string&&` (operator+ -> insert -> _M_replace) is inlined at
# -O2 (GCC bugs 105329 / 105651, fixed in GCC 13). Which call sites trip it changes with every
# inlining decision (a unity batch, an edited neighbour), so the known sites were rewritten as
# appends / fmt::format and the check is off for this one compiler; GCC 13+ and Clang keep it.
# -Warray-bounds is the same false positive seen from the other side (char_traits::copy "offset
# outside array bounds" in the same inlined _M_replace: pipeline_memory.cpp, test_config_compose.cpp,
# test_tp_layouts.cpp), so it goes with it, for GCC 12 only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND TRAINER_WARNINGS -Wno-stringop-overflow -Wno-array-bounds)
endif()

# One precompiled <torch/torch.h>, built once and reused by every target.
add_library(trainer_pch OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/cmake/pch.cpp)

function(trainer_setup_target tgt)
  target_compile_options(${tgt} PRIVATE ${TRAINER_WARNINGS})
  target_compile_features(${tgt} PUBLIC cxx_std_20)
  # system fmt first (see TrainerDeps.cmake), then the project's own include roots
  target_include_directories(${tgt} BEFORE PUBLIC ${TRAINER_FMT_FIRST_DIR})
  target_include_directories(${tgt} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
  # libtorch.so from the wheel exports its own (devtoolset) copy of std::filesystem, whose
  # remove_all jumps to a null weak symbol: the system libstdc++ must come first in the search order.
  target_link_options(${tgt} PUBLIC "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
  target_link_libraries(${tgt} PUBLIC ${TORCH_LIBRARIES} spdlog::spdlog fmt::fmt
                                      nlohmann_json::nlohmann_json Threads::Threads)
  target_compile_definitions(${tgt} PUBLIC TRAINER_VERSION="${PROJECT_VERSION}"
                                           $<$<BOOL:${TRAINER_WITH_CUDA}>:TRAINER_WITH_CUDA=1>)
  if(TRAINER_UNITY)
    set_target_properties(${tgt} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${TRAINER_UNITY_BATCH})
  endif()
  if(TRAINER_PCH AND NOT tgt STREQUAL "trainer_pch")
    target_precompile_headers(${tgt} REUSE_FROM trainer_pch)
  endif()
endfunction()

trainer_setup_target(trainer_pch)
if(TRAINER_PCH)
  target_precompile_headers(trainer_pch PRIVATE <torch/torch.h>)
endif()

# trainer_add_library(name folder): a static library of every .cpp in the folder and its sub-folders
# (src/engine's rooms are one library: one set of unity batches, no link order between rooms; the
# arrows test keeps their include order). Files ending in
# _cuda.cpp build only against a CUDA LibTorch, files ending in _nocuda.cpp only against a CPU one:
# the CUDA seam (src/device, src/dist) keeps #ifdefs out of the rest of the code.
function(trainer_add_library name folder)
  file(GLOB_RECURSE _srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cpp)
  if(TRAINER_WITH_CUDA)
    list(FILTER _srcs EXCLUDE REGEX "_nocuda\\.cpp$")
  else()
    list(FILTER _srcs EXCLUDE REGEX "_cuda\\.cpp$")
  endif()
  if(NOT _srcs)  # an area being rewritten may briefly have no sources
    set(_srcs ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
  endif()
  add_library(${name} STATIC ${_srcs})
  add_library(trainer::${name} ALIAS ${name})
  trainer_setup_target(${name})
endfunction()
