# fsa_find_cuda_headers takes only a directory that holds both cuda.h and
# nvrtc.h: fake toolkits with one header each are passed over, with find_path's
# VALIDATOR (CMake 3.25 and newer) and with the search older CMake versions use.
#   cmake -DFSA_SOURCE_DIR=<repo> -DWORK_DIR=<scratch> -P test_cuda_headers.cmake
include("${FSA_SOURCE_DIR}/cmake/fsa_cuda_headers.cmake")

function(check_search)
  unset(found CACHE)
  file(REMOVE_RECURSE "${WORK_DIR}")
  foreach(kit only_nvrtc only_cuda both)
    file(MAKE_DIRECTORY "${WORK_DIR}/${kit}/include")
  endforeach()
  file(TOUCH "${WORK_DIR}/only_nvrtc/include/nvrtc.h" "${WORK_DIR}/only_cuda/include/cuda.h"
       "${WORK_DIR}/both/include/cuda.h" "${WORK_DIR}/both/include/nvrtc.h")

  # CUDA_HOME points at a toolkit with nvrtc.h alone: it must not be taken.
  set(ENV{CUDA_HOME} "${WORK_DIR}/only_nvrtc")
  set(ENV{CUDA_PATH} "${WORK_DIR}/only_cuda")
  fsa_find_cuda_headers(found "${WORK_DIR}/both")
  if(NOT found STREQUAL "${WORK_DIR}/both/include")
    message(FATAL_ERROR "found '${found}', expected ${WORK_DIR}/both/include")
  endif()

  # The first directory that has both wins, in the documented order.
  file(TOUCH "${WORK_DIR}/only_cuda/include/nvrtc.h")
  unset(found CACHE)
  fsa_find_cuda_headers(found "${WORK_DIR}/both")
  if(NOT found STREQUAL "${WORK_DIR}/only_cuda/include")
    message(FATAL_ERROR "found '${found}', expected CUDA_PATH's ${WORK_DIR}/only_cuda/include")
  endif()
  message(STATUS "cuda.h and nvrtc.h are taken from one directory: ${found}")
endfunction()

check_search()
set(FSA_CUDA_HEADERS_NO_VALIDATOR ON)
check_search()
