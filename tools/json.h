/*
 * json.h -- a small, strict JSON parser (RFC 8259) for the bindlog tool.
 *
 * libbindlog reads no JSON (SPEC section 9); the tool needs to read a
 * gateway's sessions.json for `import-json`, so it carries this parser of
 * its own.  Strict means: exactly the grammar of RFC 8259 section 2-7
 * (no comments, no trailing commas, no single quotes, no NaN, no leading
 * zeros or '+', no unescaped control characters in strings, no lone
 * surrogates in \u escapes), the text well-formed UTF-8 (section 8.1; a
 * leading byte order mark is ignored, as 8.1 allows), one value and
 * nothing after it but whitespace.  Duplicate member names are kept (8.1
 * leaves them to the application); json_get() finds the first.
 *
 * Limits (json_limits): the nesting depth, and the text's size.  Within
 * them the parser uses memory proportional to the text (a node per value,
 * decoded copies only of strings that hold escapes) and never recurses
 * deeper than max_depth.
 *
 * A refused text gets an error naming the byte offset, line and column
 * (1-based, counted in bytes) and what was expected there.
 */
#ifndef BINDLOG_TOOLS_JSON_H
#define BINDLOG_TOOLS_JSON_H

#include <stddef.h>

typedef enum json_type {
    JSON_NULL = 1,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    size_t start, end;  /* the value's bytes in the text: [start, end) */
    /* JSON_STRING: the decoded bytes (may hold NUL; not NUL-terminated);
     * JSON_NUMBER: the number's text as written. */
    const char *str;
    size_t len;
    /* Inside an object: this member's name, decoded (may hold NUL). */
    const char *name;
    size_t name_len;
    json_value *child;  /* arrays and objects: the first element or member */
    json_value *next;   /* the next element or member of the parent */
    size_t count;       /* arrays and objects: how many elements or members */
};

typedef struct json_limits {
    size_t max_depth;   /* arrays and objects nested deeper are refused */
    size_t max_size;    /* longer texts are refused before parsing */
} json_limits;

#define JSON_LIMITS_DEFAULT {64, (size_t)256 << 20}

typedef struct json_error {
    size_t offset;      /* byte offset of the problem */
    size_t line, column;
    char msg[160];      /* what was wrong, in words */
} json_error;

/* A parsed text: the root and the memory behind every node.  The nodes'
 * str/name point into the text or into the document's own copies, so the
 * text must outlive the document. */
typedef struct json_block json_block;
typedef struct json_doc {
    json_value *root;
    json_block *blocks;
} json_doc;

/* Parse text[0..len).  0 on success (doc->root set; free with json_free),
 * -1 on a refused text (err filled; nothing to free), -2 out of memory. */
int json_parse(const char *text, size_t len, const json_limits *lim, json_doc *doc,
               json_error *err);
void json_free(json_doc *doc);

/* The first member of object `obj` named `name` (a C string), or NULL. */
const json_value *json_get(const json_value *obj, const char *name);

/* The value's text with the insignificant whitespace left out (strings,
 * numbers and member order exactly as written): writes at most
 * v->end - v->start bytes to out and returns how many. */
size_t json_compact(const char *text, const json_value *v, char *out);

/* A type's name for messages: "null", "false", "true", "a number", ... */
const char *json_type_name(json_type t);

#endif /* BINDLOG_TOOLS_JSON_H */
