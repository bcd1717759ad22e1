# CheckThreadLocal.cmake -- run as:
#   cmake -DREADELF=readelf -DLIBRARY=libbindlog.so [-DMODULE=libbindlog-etcd.so] -P ...
#
# Fails when a library's thread-local storage (its PT_TLS segment) is over
# MAX_TLS bytes (4096 unless given).  Every thread of a process that loads
# libbindlog carries that block, and where the library is loaded with
# dlopen (a Python extension, a Node addon) each thread's first call into
# it allocates and zeroes the whole block: three 64 KiB thread-local
# buffers once made that 195 KiB and ~50 page faults a thread.
cmake_minimum_required(VERSION 3.20)

if(NOT READELF OR NOT LIBRARY)
    message(FATAL_ERROR "usage: cmake -DREADELF=<readelf> -DLIBRARY=<lib.so> [-DMODULE=<lib.so>] [-DMAX_TLS=<bytes>] -P ${CMAKE_SCRIPT_MODE_FILE}")
endif()
if(NOT MAX_TLS)
    set(MAX_TLS 4096)
endif()

function(check_tls file)
    execute_process(COMMAND "${READELF}" -lW "${file}"
        OUTPUT_VARIABLE _o ERROR_VARIABLE _e RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
        message(FATAL_ERROR "${READELF} -lW ${file} failed (${_rc}): ${_e}")
    endif()
    # "  TLS  0xOFFSET 0xVADDR 0xPADDR 0xFILESIZ 0xMEMSIZ FLG ALIGN"
    if(NOT _o MATCHES "\n *TLS +0x[0-9a-fA-F]+ +0x[0-9a-fA-F]+ +0x[0-9a-fA-F]+ +0x[0-9a-fA-F]+ +0x([0-9a-fA-F]+)")
        message(STATUS "${file}: no thread-local storage")
        return()
    endif()
    math(EXPR _size "0x${CMAKE_MATCH_1}" OUTPUT_FORMAT DECIMAL)
    message(STATUS "${file}: ${_size} bytes of thread-local storage (at most ${MAX_TLS})")
    if(_size GREATER MAX_TLS)
        message(FATAL_ERROR "${file} holds ${_size} bytes of thread-local storage, over ${MAX_TLS}: "
            "a large _Thread_local buffer belongs on the heap (every thread carries this block)")
    endif()
endfunction()

check_tls("${LIBRARY}")
if(MODULE)
    check_tls("${MODULE}")
endif()
