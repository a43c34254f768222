# fsa.pc with absolute install directories (GNUInstallDirs allows them): pkg-config must give those
# directories, not the prefix joined to them. Configures the project only (nothing is built).
#
#   cmake -DSOURCE_DIR=<fsa source> -DWORK_DIR=<scratch dir> -P pc_paths.cmake

find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config is needed for this test")
endif()

# check(<case> <configure args> <expected cflags+libs>)
function(check name args expected)
  set(dir "${WORK_DIR}/${name}")
  file(REMOVE_RECURSE "${dir}")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${dir}" -DFSA_BUILD_TESTS=OFF
                          -DFSA_BUILD_TOOLS=OFF -DCMAKE_INSTALL_PREFIX=/opt/fsa ${args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure failed (${rc})\n${out}\n${err}")
  endif()
  set(ENV{PKG_CONFIG_PATH} "${dir}")
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs fsa RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  string(STRIP "${out}" out)
  if(NOT rc EQUAL 0 OR NOT out STREQUAL "${expected}")
    message(FATAL_ERROR "${name}: pkg-config gave '${out}' (${rc}, ${err}), expected '${expected}'")
  endif()
  message(STATUS "${name}: ${out}")
endfunction()

check(absolute_libdir "-DCMAKE_INSTALL_LIBDIR=/srv/lib64" "-I/opt/fsa/include -L/srv/lib64 -lfsa")
# The libdir given: GNUInstallDirs' default is lib64 on some distributions.
check(absolute_includedir "-DCMAKE_INSTALL_INCLUDEDIR=/srv/include;-DCMAKE_INSTALL_LIBDIR=lib"
      "-I/srv/include -L/opt/fsa/lib -lfsa")
