/*
 * json_fuzzer.c -- tools/json.c, the strict JSON parser behind import-json.
 *
 * A round-trip harness: any input must parse or be refused without a
 * crash, a leak or a read past its end (ASan/UBSan under libFuzzer).  An
 * accepted text must also survive its own compaction: json_compact() of
 * the root is valid JSON again, parses to the same tree (types, member
 * names, decoded strings, number texts, counts), and compacts to itself.
 * A mismatch aborts.  Limits are small (depth 16, 1 MiB) so the depth
 * refusal is reached often.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_tree(const json_value *a, const json_value *b)
{
    if (a->type != b->type || a->count != b->count || a->name_len != b->name_len ||
        (a->name_len && memcmp(a->name, b->name, a->name_len) != 0))
        abort();
    if (a->type == JSON_STRING || a->type == JSON_NUMBER) {
        if (a->len != b->len || (a->len && memcmp(a->str, b->str, a->len) != 0))
            abort();
    }
    const json_value *x = a->child, *y = b->child;
    for (; x != NULL && y != NULL; x = x->next, y = y->next)
        same_tree(x, y);
    if (x != NULL || y != NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_limits lim = {16, (size_t)1 << 20};
    json_doc doc, again;
    json_error err;
    const char *text = (const char *)data;

    int rc = json_parse(text, size, &lim, &doc, &err);
    if (rc == -1) {
        if (err.offset > size || err.line == 0 || err.column == 0 || err.msg[0] == '\0')
            abort(); /* a refusal always says where and why */
        return 0;
    }
    if (rc != 0)
        return 0; /* out of memory */
    /* every member lookup on the root terminates and finds its own name */
    for (const json_value *m = doc.root->type == JSON_OBJECT ? doc.root->child : NULL; m;
         m = m->next) {
        if (m->name_len < 64 && memchr(m->name, '\0', m->name_len) == NULL) {
            char name[64];
            memcpy(name, m->name, m->name_len);
            name[m->name_len] = '\0';
            const json_value *g = json_get(doc.root, name);
            if (g == NULL || g->name_len != m->name_len)
                abort();
        }
    }
    char *c1 = malloc(doc.root->end - doc.root->start + 1);
    if (c1 == NULL)
        abort();
    size_t n1 = json_compact(text, doc.root, c1);
    if (n1 > doc.root->end - doc.root->start)
        abort();
    if (json_parse(c1, n1, &lim, &again, &err) != 0)
        abort(); /* compaction produced invalid JSON */
    same_tree(doc.root, again.root);
    char *c2 = malloc(n1 + 1);
    if (c2 == NULL)
        abort();
    size_t n2 = json_compact(c1, again.root, c2);
    if (n2 != n1 || memcmp(c1, c2, n1) != 0)
        abort(); /* compaction is not idempotent */
    free(c1);
    free(c2);
    json_free(&again);
    json_free(&doc);
    return 0;
}
