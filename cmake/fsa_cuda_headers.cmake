# fsa_find_cuda_headers(<var> [<dir>...]): sets the cache variable <var> to
# the include directory that holds both cuda.h and nvrtc.h, searched in
# $CUDA_HOME, $CUDA_PATH, the <dir>s, /usr/local/cuda, then the usual
# prefixes. A directory with only one of the two does not count: mixing
# headers of two toolkits would compile against mismatched declarations.
# Also used in script mode by tests/cmake/test_cuda_headers.cmake.

function(fsa_cuda_headers_both result dir)
  if(NOT EXISTS "${dir}/cuda.h" OR NOT EXISTS "${dir}/nvrtc.h")
    set(${result} FALSE PARENT_SCOPE)
  endif()
endfunction()

function(fsa_find_cuda_headers var)
  set(extra ${ARGN})
  # FSA_CUDA_HEADERS_NO_VALIDATOR: the pre-3.25 search on any CMake (its test runs both).
  if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.25 AND NOT FSA_CUDA_HEADERS_NO_VALIDATOR)
    find_path(${var} NAMES nvrtc.h
      HINTS ENV CUDA_HOME ENV CUDA_PATH ${extra} /usr/local/cuda
      PATH_SUFFIXES include VALIDATOR fsa_cuda_headers_both)
  else()
    # No VALIDATOR before 3.25: the hints are tried in order here, and find_path
    # searches the usual prefixes only when none of them holds both headers.
    foreach(hint "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" ${extra} /usr/local/cuda)
      foreach(dir "${hint}/include" "${hint}")
        if(NOT ${var} AND NOT hint STREQUAL "" AND EXISTS "${dir}/cuda.h" AND EXISTS "${dir}/nvrtc.h")
          set(${var} "${dir}" CACHE PATH "Include directory with cuda.h and nvrtc.h" FORCE)
        endif()
      endforeach()
    endforeach()
    if(NOT ${var})
      find_path(${var} NAMES nvrtc.h PATH_SUFFIXES include)
    endif()
  endif()
  set(dir "${${var}}")
  if(NOT dir OR NOT EXISTS "${dir}/cuda.h" OR NOT EXISTS "${dir}/nvrtc.h")
    unset(${var} CACHE)
    message(FATAL_ERROR
      "No include directory holds both cuda.h and nvrtc.h (found: '${dir}'). Install the CUDA "
      "Toolkit's headers or point CUDA_HOME (or -D${var}=DIR) at a toolkit that has both.")
  endif()
endfunction()
