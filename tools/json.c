/*
 * json.c -- a small, strict JSON parser (RFC 8259); see json.h.
 *
 * Recursive descent over the text, one node per value, allocated from
 * blocks that the document frees at once.  A string without escapes
 * points into the text; one with escapes is decoded into the blocks (never
 * longer than its source).  Every byte is looked at once or twice, so a
 * 10 MB sessions.json parses in tens of milliseconds.
 */
#include "json.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory ------------------------------------------------------------ */

struct json_block {
    json_block *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
};

#define BLOCK_MIN ((size_t)64 << 10)

typedef struct parser {
    const unsigned char *t;
    size_t len, pos;
    size_t depth, max_depth;
    json_doc *doc;
    json_error *err;
    int oom;
} parser;

static void *arena_alloc(parser *p, size_t n)
{
    json_block *b = p->doc->blocks;
    n = (n + 15) & ~(size_t)15;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;
        b = malloc(sizeof(*b) + cap);
        if (b == NULL) {
            p->oom = 1;
            return NULL;
        }
        b->next = p->doc->blocks;
        b->used = 0;
        b->cap = cap;
        p->doc->blocks = b;
    }
    void *r = (char *)b->data + b->used;
    b->used += n;
    return r;
}

void json_free(json_doc *doc)
{
    json_block *b = doc->blocks;
    while (b != NULL) {
        json_block *next = b->next;
        free(b);
        b = next;
    }
    doc->blocks = NULL;
    doc->root = NULL;
}

/* ---- errors ------------------------------------------------------------- */

/* Record the first error at `at`; returns -1 for `return fail(...)`. */
static int fail(parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(parser *p, size_t at, const char *fmt, ...)
{
    va_list ap;
    json_error *e = p->err;
    size_t line = 1, col = 1;

    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->t[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    e->offset = at;
    e->line = line;
    e->column = col;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* What is at the parser's position, for "expected X, found Y". */
static const char *found(const parser *p)
{
    if (p->pos >= p->len)
        return "the end of the text";
    switch (p->t[p->pos]) {
    case '{': return "'{'";
    case '}': return "'}'";
    case '[': return "'['";
    case ']': return "']'";
    case ':': return "':'";
    case ',': return "','";
    case '"': return "a string";
    case '\'': return "a single quote (JSON strings use double quotes)";
    case '/': return "'/' (JSON has no comments)";
    default:
        return p->t[p->pos] >= 0x80 ? "a non-ASCII byte" : "an unexpected character";
    }
}

/* ---- lexical helpers ---------------------------------------------------- */

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->t[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0 (RFC 3629:
 * no overlongs, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    uint32_t v;
    size_t len;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        len = 2;
        v = s[0] & 0x1F;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        len = 3;
        v = s[0] & 0x0F;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4;
        v = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    return len;
}

static int hex4(const unsigned char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(unsigned char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/*
 * The escape at t[i] (a backslash): its decoded code point and length in
 * the text.  -1 with the error recorded when it is not one.
 */
static int escape_at(parser *p, size_t i, uint32_t *cp, size_t *n)
{
    const unsigned char *t = p->t;
    if (i + 1 >= p->len)
        return fail(p, i, "unterminated string");
    switch (t[i + 1]) {
    case '"': *cp = '"'; break;
    case '\\': *cp = '\\'; break;
    case '/': *cp = '/'; break;
    case 'b': *cp = '\b'; break;
    case 'f': *cp = '\f'; break;
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case 'u': {
        uint32_t hi, lo;
        if (i + 6 > p->len || hex4(t + i + 2, &hi) != 0)
            return fail(p, i, "\\u must be followed by four hex digits");
        *n = 6;
        if (hi >= 0xDC00 && hi <= 0xDFFF)
            return fail(p, i, "\\u%04X is a lone low surrogate", (unsigned)hi);
        if (hi >= 0xD800 && hi <= 0xDBFF) {
            if (i + 12 > p->len || t[i + 6] != '\\' || t[i + 7] != 'u' ||
                hex4(t + i + 8, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                return fail(p, i, "\\u%04X is a high surrogate without its low half",
                            (unsigned)hi);
            *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
            *n = 12;
        } else {
            *cp = hi;
        }
        return 0;
    }
    default:
        return fail(p, i, "invalid escape '\\%c' in a string",
                    t[i + 1] >= 0x20 && t[i + 1] < 0x7F ? t[i + 1] : '?');
    }
    *n = 2;
    return 0;
}

/* A string at p->pos (the opening quote): decoded into *s / *n. */
static int parse_string(parser *p, const char **s, size_t *n)
{
    const unsigned char *t = p->t;
    size_t i = p->pos + 1, start = i;
    int escapes = 0;

    /* pass 1: find the end, check every byte, note escapes */
    for (;;) {
        if (i >= p->len)
            return fail(p, p->pos, "unterminated string");
        unsigned char c = t[i];
        if (c == '"')
            break;
        if (c == '\\') {
            uint32_t cp;
            size_t el;
            if (escape_at(p, i, &cp, &el) != 0)
                return -1;
            escapes = 1;
            i += el;
        } else if (c < 0x20) {
            return fail(p, i, "control character U+%04X in a string (it must be escaped)",
                        (unsigned)c);
        } else if (c < 0x80) {
            i++;
        } else {
            size_t l = utf8_len(t + i, p->len - i);
            if (l == 0)
                return fail(p, i, "invalid UTF-8 in a string");
            i += l;
        }
    }
    p->pos = i + 1;
    if (!escapes) {
        *s = (const char *)t + start;
        *n = i - start;
        return 0;
    }
    /* pass 2: decode (never longer than the source) */
    unsigned char *o = arena_alloc(p, i - start + 1);
    size_t on = 0;
    if (o == NULL)
        return -2;
    for (size_t j = start; j < i;) {
        if (t[j] == '\\') {
            uint32_t cp;
            size_t el;
            escape_at(p, j, &cp, &el); /* checked in pass 1 */
            on += put_utf8(o + on, cp);
            j += el;
        } else {
            o[on++] = t[j++];
        }
    }
    *s = (const char *)o;
    *n = on;
    return 0;
}

static int digits(parser *p)
{
    size_t s = p->pos;
    while (p->pos < p->len && p->t[p->pos] >= '0' && p->t[p->pos] <= '9')
        p->pos++;
    return p->pos > s;
}

/* A number at p->pos: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(parser *p)
{
    size_t s = p->pos;
    if (p->pos < p->len && p->t[p->pos] == '-')
        p->pos++;
    if (p->pos >= p->len || p->t[p->pos] < '0' || p->t[p->pos] > '9')
        return fail(p, s, "malformed number (a digit must follow '-')");
    if (p->t[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && p->t[p->pos] >= '0' && p->t[p->pos] <= '9')
            return fail(p, s, "malformed number (no leading zeros)");
    } else {
        digits(p);
    }
    if (p->pos < p->len && p->t[p->pos] == '.') {
        p->pos++;
        if (!digits(p))
            return fail(p, s, "malformed number (a digit must follow '.')");
    }
    if (p->pos < p->len && (p->t[p->pos] == 'e' || p->t[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->t[p->pos] == '+' || p->t[p->pos] == '-'))
            p->pos++;
        if (!digits(p))
            return fail(p, s, "malformed number (the exponent has no digits)");
    }
    return 0;
}

static int parse_value(parser *p, json_value *v);

static json_value *new_node(parser *p)
{
    json_value *v = arena_alloc(p, sizeof(*v));
    if (v != NULL)
        memset(v, 0, sizeof(*v));
    return v;
}

/* An array or object at p->pos ('[' or '{'). */
static int parse_container(parser *p, json_value *v, int object)
{
    unsigned char close = object ? '}' : ']';
    json_value **tail = &v->child;
    int rc;

    if (++p->depth > p->max_depth)
        return fail(p, p->pos, "arrays and objects nested deeper than %zu levels",
                    p->max_depth);
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->t[p->pos] == close) {
        p->pos++;
        p->depth--;
        return 0;
    }
    for (;;) {
        json_value *c = new_node(p);
        if (c == NULL)
            return -2;
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len || p->t[p->pos] != '"')
                return fail(p, p->pos, "expected a member name (a string), found %s",
                            found(p));
            if ((rc = parse_string(p, &c->name, &c->name_len)) != 0)
                return rc;
            skip_ws(p);
            if (p->pos >= p->len || p->t[p->pos] != ':')
                return fail(p, p->pos, "expected ':' after a member name, found %s",
                            found(p));
            p->pos++;
        }
        if ((rc = parse_value(p, c)) != 0)
            return rc;
        *tail = c;
        tail = &c->next;
        v->count++;
        skip_ws(p);
        if (p->pos < p->len && p->t[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->t[p->pos] == close) {
            p->pos++;
            p->depth--;
            return 0;
        }
        return fail(p, p->pos, object ? "expected ',' or '}' after an object member, found %s"
                                      : "expected ',' or ']' after an array element, found %s",
                    found(p));
    }
}

static int literal(parser *p, const char *word, json_type type, json_value *v)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->t + p->pos, word, n) != 0)
        return fail(p, p->pos, "expected a value, found an unexpected character");
    p->pos += n;
    v->type = type;
    return 0;
}

static int parse_value(parser *p, json_value *v)
{
    int rc;

    skip_ws(p);
    v->start = p->pos;
    if (p->pos >= p->len)
        return fail(p, p->pos, "expected a value, found the end of the text");
    switch (p->t[p->pos]) {
    case '{':
        v->type = JSON_OBJECT;
        rc = parse_container(p, v, 1);
        break;
    case '[':
        v->type = JSON_ARRAY;
        rc = parse_container(p, v, 0);
        break;
    case '"':
        v->type = JSON_STRING;
        rc = parse_string(p, &v->str, &v->len);
        break;
    case 't':
        rc = literal(p, "true", JSON_TRUE, v);
        break;
    case 'f':
        rc = literal(p, "false", JSON_FALSE, v);
        break;
    case 'n':
        rc = literal(p, "null", JSON_NULL, v);
        break;
    default:
        if (p->t[p->pos] == '-' || (p->t[p->pos] >= '0' && p->t[p->pos] <= '9')) {
            v->type = JSON_NUMBER;
            rc = parse_number(p);
            v->str = (const char *)p->t + v->start;
            v->len = p->pos - v->start;
        } else {
            rc = fail(p, p->pos, "expected a value, found %s", found(p));
        }
        break;
    }
    v->end = p->pos;
    return rc;
}

int json_parse(const char *text, size_t len, const json_limits *lim, json_doc *doc,
               json_error *err)
{
    static const json_limits defaults = JSON_LIMITS_DEFAULT;
    parser p;
    int rc;

    if (lim == NULL)
        lim = &defaults;
    memset(doc, 0, sizeof(*doc));
    memset(err, 0, sizeof(*err));
    memset(&p, 0, sizeof(p));
    p.t = (const unsigned char *)text;
    p.len = len;
    p.max_depth = lim->max_depth;
    p.doc = doc;
    p.err = err;
    if (len > lim->max_size) {
        fail(&p, 0, "the text is %zu bytes, over the limit of %zu", len, lim->max_size);
        return -1;
    }
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        p.pos = 3; /* a byte order mark: RFC 8259 8.1 allows ignoring it */
    skip_ws(&p);
    if (p.pos >= len) {
        fail(&p, p.pos, "the text is empty (expected a JSON value)");
        return -1;
    }
    doc->root = new_node(&p);
    rc = doc->root == NULL ? -2 : parse_value(&p, doc->root);
    if (rc == 0) {
        skip_ws(&p);
        if (p.pos < len)
            rc = fail(&p, p.pos, "unexpected data after the JSON value (%s)", found(&p));
    }
    if (rc == -1 && p.oom)
        rc = -2;
    if (rc != 0)
        json_free(doc);
    return rc;
}

const json_value *json_get(const json_value *obj, const char *name)
{
    size_t n = strlen(name);
    if (obj == NULL || obj->type != JSON_OBJECT)
        return NULL;
    for (const json_value *m = obj->child; m != NULL; m = m->next)
        if (m->name_len == n && memcmp(m->name, name, n) == 0)
            return m;
    return NULL;
}

size_t json_compact(const char *text, const json_value *v, char *out)
{
    size_t o = 0;
    int in_str = 0;
    for (size_t i = v->start; i < v->end; i++) {
        char c = text[i];
        if (in_str) {
            out[o++] = c;
            if (c == '\\')
                out[o++] = text[++i]; /* the escaped character, whatever it is */
            else if (c == '"')
                in_str = 0;
        } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            out[o++] = c;
            in_str = c == '"';
        }
    }
    return o;
}

const char *json_type_name(json_type t)
{
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_FALSE: return "false";
    case JSON_TRUE: return "true";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "unknown";
}
