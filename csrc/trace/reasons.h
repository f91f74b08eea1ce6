/* reasons.h - the codes, categories and message templates of every reason
 * a trace stops, made from the X-macro table trace/reasons.def (read its
 * header to add one). */
#ifndef CDY_REASONS_H
#define CDY_REASONS_H

typedef enum {
    CDY_RCAT_UNSUPPORTED,
    CDY_RCAT_USER,
    CDY_RCAT_FALLBACK,
    CDY_RCAT_LIMIT,
    CDY_RCAT_INTERNAL,
    CDY_RCAT_SKIP,
} cdy_reason_cat;

typedef enum {
    CDY_R_NONE,   /* no stop */
#define CDY_REASON(code, cat, tmpl) CDY_R_##code,
#include "trace/reasons.def"
#undef CDY_REASON
    CDY_R_COUNT
} cdy_reason;

/* Each template as a named const array, so that gcc checks a stop's
 * arguments against it (the stop macros in trace/trace.h pass it). */
#define CDY_REASON(code, cat, tmpl) __attribute__((unused)) static const char cdy_rt_##code[] = tmpl;
#include "trace/reasons.def"
#undef CDY_REASON

typedef struct {
    const char *code;       /* "CODE" */
    cdy_reason_cat cat;
    const char *tmpl;
} cdy_reason_info;

/* Indexed by cdy_reason (CDY_R_NONE included). */
extern const cdy_reason_info cdy_reasons[CDY_R_COUNT];
/* The category's name: "unsupported", "user_error", "fallback", "limit", "internal",
 * "skip". */
const char *cdy_reason_cat_name(cdy_reason_cat c);
/* The code's name, "" for an out-of-range code. */
const char *cdy_reason_code(int code);

#endif /* CDY_REASONS_H */
