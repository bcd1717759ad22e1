# binding.gyp -- the bindlog addon: the addon's src/*.c and the library's own
# sources (src/core, src/lmdb, src/maint; never src/etcd), listed at build
# time by scripts/sources.js, with LMDB's and xxHash's sources from deps/ (the
# tarball carries them) or else the system's liblmdb and libxxhash.
# Build it with `npm install` (scripts/build.js finds node's installed
# headers, so nothing is downloaded) or node-gyp rebuild --nodedir=/usr.
{
  "targets": [
    {
      "target_name": "bindlog",
      "sources": ["<!@(node scripts/sources.js sources)", "<!@(node scripts/sources.js deps)"],
      "include_dirs": ["<!@(node scripts/sources.js include)"],
      # strict C11 plus POSIX, as the CMake build; BINDLOG_STATIC keeps the
      # library's symbols out of the addon's exports (only the Node-API entry
      # point is visible), so another libbindlog in the process cannot clash
      "defines": ["_POSIX_C_SOURCE=200809L", "BINDLOG_STATIC"],
      "cflags_c": ["-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wshadow",
                   "-Wstrict-prototypes", "<!@(node scripts/sources.js isystem)"],
      # LMDB and xxHash: built in from deps/ when the package carries them
      # (the npm tarball always does), else the system's
      "libraries": ["<!@(node scripts/sources.js libraries)"],
      # never unmapped: the library gives each reading thread a cached read
      # transaction freed by a thread-exit destructor (src/lmdb/store.c), and
      # Node unloads an addon when the worker thread that loaded it ends,
      # before that thread's destructors run
      "ldflags": ["-Wl,-z,nodelete"],
      "xcode_settings": {
        "OTHER_CFLAGS": ["-std=c11", "-fvisibility=hidden", "-D_DARWIN_C_SOURCE=1",
                         "<!@(node scripts/sources.js isystem)"],
        "GCC_SYMBOLS_PRIVATE_EXTERN": "YES"
      }
    },
    # the `bindlog` CLI (tools/, a client of include/bindlog.h only) with the
    # library compiled in, run by bin/bindlog.js (package.json "bin": npx bindlog)
    {
      "target_name": "bindlog_cli",
      "type": "executable",
      "sources": ["<!@(node scripts/sources.js cli)", "<!@(node scripts/sources.js deps)"],
      "include_dirs": ["<!@(node scripts/sources.js include)"],
      "defines": ["_POSIX_C_SOURCE=200809L", "BINDLOG_STATIC"],
      "cflags_c": ["-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra",
                   "<!@(node scripts/sources.js isystem)"],
      # the same LMDB and xxHash as the addon: bundled when the package carries them
      "libraries": ["<!@(node scripts/sources.js libraries)"],
      "ldflags": ["-s"],
      "xcode_settings": {
        "OTHER_CFLAGS": ["-std=c11", "-fvisibility=hidden", "-D_DARWIN_C_SOURCE=1",
                         "<!@(node scripts/sources.js isystem)"]
      }
    }
  ]
}
