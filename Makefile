# Makefile -- a thin wrapper around CMake and ctest.
#
#   make demo    install missing dependencies, build, run the gateway simulation,
#                then show what the bindlog tool sees in its store
#   make test    install missing dependencies, build, run every test (ctest)
#   make asan    the same tests built with AddressSanitizer + UBSan (build-asan/)
#   make tsan    the same tests built with ThreadSanitizer (build-tsan/)
#   make valgrind the unit suites and the CLI's golden tests under valgrind's
#                memcheck, on the build/ tree (scripts/valgrind.sh)
#   make posix   every test on the portable platform layer (build-posix/,
#                -DBINDLOG_PLATFORM=posix: src/platform's fallbacks, also on Linux)
#   make cross   library, CLI and seed_check for macOS and musl (zig on PATH
#                or ZIG=...; scripts/cross-build.sh)
#   make clean   remove the build trees and the demo store
#
# Variables: BUILD_TYPE (RelWithDebInfo), JOBS (2), CMAKE_FLAGS (extra -D...),
# CTEST_ARGS (extra ctest arguments for make asan, tsan and posix, e.g. -L concurrency).

BUILD_TYPE  ?= RelWithDebInfo
JOBS        ?= 2
CMAKE_FLAGS ?=
CTEST_ARGS  ?=
DEMO_STORE  ?= ./demo-store
DEMO_ARGS   ?=

BUILD_DIR := build
ASAN_DIR  := build-asan
TSAN_DIR  := build-tsan
POSIX_DIR := build-posix

# Sanitizer runtime settings: fail the test on the first finding.
SAN_ENV := ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
           TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp

.PHONY: all deps configure build demo test asan tsan valgrind coverage posix cross clean

all: build

deps:
	@bash scripts/deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD_DIR) $(DEMO_STORE) $(DEMO_ARGS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

asan: deps
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug \
	      -DBINDLOG_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR) -j$(JOBS)
	$(SAN_ENV) ctest --test-dir $(ASAN_DIR) --output-on-failure -j$(JOBS) $(CTEST_ARGS)

tsan: deps
	cmake -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=Debug \
	      -DBINDLOG_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build $(TSAN_DIR) -j$(JOBS)
	$(SAN_ENV) ctest --test-dir $(TSAN_DIR) --output-on-failure -j$(JOBS) $(CTEST_ARGS)

valgrind: build
	bash scripts/valgrind.sh $(BUILD_DIR)

coverage: deps
	bash scripts/coverage.sh build-cov

posix: deps
	cmake -S . -B $(POSIX_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DBINDLOG_PLATFORM=posix $(CMAKE_FLAGS)
	cmake --build $(POSIX_DIR) -j$(JOBS)
	ctest --test-dir $(POSIX_DIR) --output-on-failure -j$(JOBS) $(CTEST_ARGS)

cross:
	bash scripts/cross-build.sh build-cross

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(POSIX_DIR) build-cross build-cov $(DEMO_STORE)
