# Third-party dependencies. LibTorch comes from (in order): Torch_DIR / CMAKE_PREFIX_PATH given by the
# user, else the project's Python environment (scripts/setup.sh), else `python3 -c 'import torch'`.
set(TRAINER_TORCH_VERSION "2.11.0" CACHE STRING "The pinned torch wheel version (scripts/setup.sh)")
set(TRAINER_VENV "$ENV{HOME}/.cache/trainer/venv-torch-${TRAINER_TORCH_VERSION}" CACHE PATH
    "Python environment holding the pinned torch wheel")
if(DEFINED ENV{TRAINER_VENV})
  set(TRAINER_VENV "$ENV{TRAINER_VENV}" CACHE PATH "" FORCE)
endif()

if(NOT Torch_DIR AND NOT DEFINED ENV{Torch_DIR})
  if(EXISTS "${TRAINER_VENV}/bin/python")
    set(_py "${TRAINER_VENV}/bin/python")
  else()
    find_program(_py NAMES python3 python)
  endif()
  if(_py)
    execute_process(COMMAND "${_py}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
      message(STATUS "LibTorch from ${_py}: ${_torch_prefix}")
    endif()
  endif()
endif()
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION}; CUDA libraries: ${TORCH_CUDA_LIBRARIES}")
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(TRAINER_WITH_CUDA ON)
else()
  set(TRAINER_WITH_CUDA OFF)
endif()

find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(OpenSSL REQUIRED)   # sha256 for config hashes and checkpoint manifests
find_package(ZLIB REQUIRED)      # gzip'd IDX files
find_package(JPEG REQUIRED)      # image_folder: libjpeg-turbo
find_package(PNG REQUIRED)       # image_folder: libpng
find_package(Threads REQUIRED)
# RE2 (Debian libre2-dev ships no CMake package, only re2.pc): the user-named patterns of the config.
# Only its libraries are used: its -pthread cflag would make trainer_config's flags differ from the PCH's.
find_package(PkgConfig REQUIRED)
pkg_check_modules(RE2 REQUIRED re2)

# fmt: the torch wheel ships fmt 12 headers in its include folder, while Debian's spdlog is built
# against Debian's fmt 9 (libfmt.so.9). Mixing them gives link errors or, worse, ODR violations.
# One arrangement everywhere: our code and spdlog use the system fmt; its headers are put first on
# the include path (-I beats torch's -isystem) through a folder that holds only a link to them.
get_target_property(_fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET _fmt_inc 0 _fmt_inc)
set(TRAINER_FMT_FIRST_DIR "${CMAKE_BINARY_DIR}/fmt-first")
file(MAKE_DIRECTORY "${TRAINER_FMT_FIRST_DIR}")
file(CREATE_LINK "${_fmt_inc}/fmt" "${TRAINER_FMT_FIRST_DIR}/fmt" SYMBOLIC)
