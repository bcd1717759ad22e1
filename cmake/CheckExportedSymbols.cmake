# CheckExportedSymbols.cmake -- run as: cmake -DNM=nm -DLIBRARY=libbindlog.so -P ...
#
# Fails unless every defined dynamic symbol of LIBRARY is named bindlog_*
# (hidden visibility + BINDLOG_API is the only export mechanism) and the
# library exports at least bindlog_open.  Linker-generated and sanitizer
# runtime symbols are ignored.  With -DONLY=<name> (the etcd module) the
# library must export exactly that one symbol instead.
cmake_minimum_required(VERSION 3.20)

if(NOT NM OR NOT LIBRARY)
    message(FATAL_ERROR "usage: cmake -DNM=<nm> -DLIBRARY=<libbindlog.so> -P ${CMAKE_SCRIPT_MODE_FILE}")
endif()

execute_process(
    COMMAND "${NM}" -D --defined-only "${LIBRARY}"
    OUTPUT_VARIABLE _out
    ERROR_VARIABLE _err
    RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed (${_rc}): ${_err}")
endif()

string(REPLACE "\n" ";" _lines "${_out}")
set(_exported "")
set(_bad "")
foreach(_line IN LISTS _lines)
    # "<address> <type> <name>[@@version]"
    if(NOT _line MATCHES "^[0-9a-fA-F]+ +([A-Za-z]) +([^ @]+)")
        continue()
    endif()
    set(_type "${CMAKE_MATCH_1}")
    set(_name "${CMAKE_MATCH_2}")
    # Absolute symbols (A) are linker markers such as _end or __bss_start.
    if(_type STREQUAL "A" OR _name MATCHES "^(_init|_fini|_edata|_end|__bss_start)$")
        continue()
    endif()
    # Instrumentation added by sanitizers, not by our code.
    if(_name MATCHES "^_*(asan|ubsan|tsan|lsan|odr_asan|sancov)")
        continue()
    endif()
    if(_name MATCHES "^bindlog_")
        list(APPEND _exported "${_name}")
    else()
        list(APPEND _bad "${_type} ${_name}")
    endif()
endforeach()

list(LENGTH _exported _count)
if(_bad)
    list(JOIN _bad "\n  " _badtext)
    message(FATAL_ERROR "${LIBRARY} exports symbols outside bindlog_*:\n  ${_badtext}")
endif()
if(ONLY)
    if(NOT _exported STREQUAL "${ONLY}")
        message(FATAL_ERROR "${LIBRARY} exports [${_exported}], not only ${ONLY}")
    endif()
    message(STATUS "${LIBRARY}: exports ${ONLY} only")
    return()
endif()
if(NOT "bindlog_open" IN_LIST _exported)
    message(FATAL_ERROR "${LIBRARY} does not export bindlog_open (${_count} bindlog_* symbols)")
endif()
message(STATUS "${LIBRARY}: ${_count} exported symbols, all bindlog_*")
