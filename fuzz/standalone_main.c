/*
 * standalone_main.c -- replay fuzz inputs without libFuzzer.
 *
 * Linked with one fuzz target instead of libFuzzer's main, so that ctest can
 * run every committed corpus with any compiler (gcc included), under
 * valgrind or the sanitizers of BINDLOG_SANITIZE:
 *
 *     record_fuzzer_replay fuzz/corpora/record [more files or dirs ...]
 *
 * Each argument is a file or a directory (its regular files are replayed in
 * name order, not recursively; hidden files are skipped).  One line per
 * input, then "N passed, 0 failed".  A failing input aborts inside the
 * target, exactly as under libFuzzer, so the process dies with that input's
 * name as the last line printed: a failure can never be counted and passed
 * over.  Exit status 1 if an argument cannot be read or no input was found
 * at all (an empty corpus would make the test pass without testing).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a target; libFuzzer calls it once before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static unsigned long passed;

/* Read a whole file into a malloc'd buffer (non-NULL even when empty). */
static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (nb == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (buf == NULL || err) {
        free(buf);
        return -1;
    }
    *data = buf;
    *size = n;
    return 0;
}

static int run_file(const char *path)
{
    uint8_t *data;
    size_t size;
    if (read_file(path, &data, &size) != 0) {
        fprintf(stderr, "%s: cannot read: %s\n", path, strerror(errno));
        return -1;
    }
    printf("%s: ", path);
    fflush(stdout); /* the name is on screen if the target aborts */
    /* Copy into an exact-size buffer so ASan/valgrind catch reads past the
     * end, as libFuzzer would. */
    uint8_t *exact = malloc(size ? size : 1);
    if (exact == NULL) {
        free(data);
        return -1;
    }
    memcpy(exact, data, size);
    free(data);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    printf("ok (%zu bytes)\n", size);
    passed++;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "%s: cannot open: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        size_t len = strlen(dir) + 1 + strlen(de->d_name) + 1;
        char *p = malloc(len);
        if (p == NULL) {
            rc = -1;
            break;
        }
        snprintf(p, len, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(p);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof(*names));
            if (nn == NULL) {
                free(p);
                rc = -1;
                break;
            }
            names = nn;
        }
        names[n++] = p;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && run_file(names[i]) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            rc = 1;
        } else if (S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i])) {
            rc = 1;
        }
    }
    printf("%lu passed, 0 failed\n", passed);
    if (passed == 0) {
        fprintf(stderr, "no inputs found: an empty corpus tests nothing\n");
        rc = 1;
    }
    return rc;
}
