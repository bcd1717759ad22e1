# BindlogCompilerFlags.cmake -- warnings and sanitizers for every bindlog target.
#
# Sets, for the whole tree (tests, tools, examples, fuzz included):
#   - _POSIX_C_SOURCE=200809L, since the build is strict C11 (no GNU
#     extensions) and the library needs POSIX (fsync, mkdir, pthreads, ...).
#     A source file that defines the same value itself is fine.  On macOS
#     also _DARWIN_C_SOURCE: there _POSIX_C_SOURCE alone hides O_NOFOLLOW,
#     O_DIRECTORY, flock, mkdtemp and dladdr, which the tree uses.
#   - -Wall -Wextra -Wshadow -Wstrict-prototypes (and -Werror when
#     BINDLOG_WERROR is ON).
#   - the sanitizers named by BINDLOG_SANITIZE, on compile and link lines.
# Defines BINDLOG_SRC_WARNINGS: extra warnings for library sources only
# (-Wmissing-prototypes would flag every cmocka test function).

add_compile_definitions(_POSIX_C_SOURCE=200809L)
if(APPLE)
    add_compile_definitions(_DARWIN_C_SOURCE=1)
endif()

set(BINDLOG_SRC_WARNINGS "")

if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    add_compile_options(-Wall -Wextra -Wshadow -Wstrict-prototypes)
    if(BINDLOG_WERROR)
        add_compile_options(-Werror)
    endif()
    set(BINDLOG_SRC_WARNINGS -Wmissing-prototypes)
elseif(MSVC)
    add_compile_options(/W4)
    if(BINDLOG_WERROR)
        add_compile_options(/WX)
    endif()
endif()

# Sanitizers: "", "address,undefined" or "thread".
if(BINDLOG_SANITIZE)
    if(NOT BINDLOG_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
        message(FATAL_ERROR
            "BINDLOG_SANITIZE='${BINDLOG_SANITIZE}': use \"\", \"address,undefined\" or \"thread\"")
    endif()
    if(NOT CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
        message(FATAL_ERROR "BINDLOG_SANITIZE needs GCC or Clang")
    endif()
    set(_bl_san -fsanitize=${BINDLOG_SANITIZE} -fno-omit-frame-pointer)
    # Make UBSan findings fatal so that ctest reports them as failures.
    if(BINDLOG_SANITIZE MATCHES "undefined")
        list(APPEND _bl_san -fno-sanitize-recover=undefined)
    endif()
    add_compile_options(${_bl_san} -g)
    add_link_options(${_bl_san})
    unset(_bl_san)
endif()
