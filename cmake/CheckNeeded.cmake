# CheckNeeded.cmake -- run as:
#   cmake -DREADELF=readelf -DLIBRARY=libbindlog.so [-DMODULE=libbindlog-etcd.so] -P ...
#
# Fails unless every NEEDED entry of LIBRARY is LMDB, xxHash or the C
# library (libc, its dynamic loader, and the libm/libpthread/libdl/librt
# that older glibc kept apart; sanitizer runtimes are allowed too): the etcd
# backend's libcurl, json-c and OpenSSL belong to the module alone.  Prints
# both lists (the module's is informative: it is allowed to need them).
cmake_minimum_required(VERSION 3.20)

if(NOT READELF OR NOT LIBRARY)
    message(FATAL_ERROR "usage: cmake -DREADELF=<readelf> -DLIBRARY=<libbindlog.so> -P ${CMAKE_SCRIPT_MODE_FILE}")
endif()

function(needed_of file out)
    execute_process(COMMAND "${READELF}" -d "${file}"
        OUTPUT_VARIABLE _o ERROR_VARIABLE _e RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
        message(FATAL_ERROR "${READELF} -d ${file} failed (${_rc}): ${_e}")
    endif()
    string(REGEX MATCHALL "\\(NEEDED\\)[^[]*\\[([^]]+)\\]" _hits "${_o}")
    set(_names "")
    foreach(_h IN LISTS _hits)
        string(REGEX REPLACE ".*\\[([^]]+)\\]" "\\1" _n "${_h}")
        list(APPEND _names "${_n}")
    endforeach()
    set(${out} "${_names}" PARENT_SCOPE)
endfunction()

needed_of("${LIBRARY}" _lib)
set(_bad "")
foreach(_n IN LISTS _lib)
    if(NOT _n MATCHES "^(liblmdb|libxxhash|libc|libm|libpthread|libdl|librt|ld-linux[-a-z0-9_]*|ld64|libasan|libubsan|libtsan)\\.so")
        list(APPEND _bad "${_n}")
    endif()
endforeach()
string(REPLACE ";" " " _libtext "${_lib}")
message(STATUS "${LIBRARY} NEEDED: ${_libtext}")
if(MODULE)
    needed_of("${MODULE}" _mod)
    string(REPLACE ";" " " _modtext "${_mod}")
    message(STATUS "${MODULE} NEEDED: ${_modtext}")
endif()
if(_bad)
    message(FATAL_ERROR "${LIBRARY} needs more than LMDB, xxHash and libc: ${_bad}")
endif()
if(NOT _lib MATCHES "liblmdb" OR NOT _lib MATCHES "libc\\.so")
    message(FATAL_ERROR "${LIBRARY}: NEEDED list [${_libtext}] does not look right (no liblmdb or libc?)")
endif()
