/* reasons.c - the table of stop reasons (trace/reasons.def) as data. */
#include "trace/reasons.h"

#include <stddef.h>

const cdy_reason_info cdy_reasons[CDY_R_COUNT] = {
    [CDY_R_NONE] = {"NONE", CDY_RCAT_INTERNAL, ""},
#define CDY_REASON(code, cat, tmpl) [CDY_R_##code] = {#code, CDY_RCAT_##cat, tmpl},
#include "trace/reasons.def"
#undef CDY_REASON
};

const char *cdy_reason_cat_name(cdy_reason_cat c)
{
    static const char *const names[] = {"unsupported", "user_error", "fallback", "limit",
                                        "internal", "skip"};
    return (unsigned)c < sizeof(names) / sizeof(names[0]) ? names[c] : "internal";
}

const char *cdy_reason_code(int code)
{
    return code > 0 && code < CDY_R_COUNT ? cdy_reasons[code].code : "";
}
