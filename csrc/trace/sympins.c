/* trace/sympins.c - sizes the trace turned into Python numbers (pins).
 *
 * A size the traced code reads (x.shape, x.size(), numel, len, strides,
 * is_contiguous, any call whose result is a constant computed from tensor
 * arguments) or that a builder without a symbolic audit bakes into the nodes
 * it makes is a number in the trace: where sizes are symbolic (sym/infer.c)
 * the symbols of such a size specialize.  The tracer records each one here;
 * the record costs an entry per read, and nothing else reads it when no dim
 * is dynamic. */
#include "trace/trace.h"
#include "sym/sym.h"

void cdy_tr_pin(tracer *tr, int value, unsigned dims, const char *why)
{
    cdy_trace *t = tr->t;
    if (value < 0 || !dims)
        return;
    if (t->npins && t->pins[t->npins - 1].value == value && t->pins[t->npins - 1].dims == dims)
        return;
    if (t->npins == t->cap_pins) {
        int cap = t->cap_pins ? 2 * t->cap_pins : 16;
        cdy_sym_pin *p = cdy_arena_alloc(&t->arena, (size_t)cap * sizeof(*p));
        if (!p) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return;
        }
        if (t->npins)
            memcpy(p, t->pins, (size_t)t->npins * sizeof(*p));
        t->pins = p;
        t->cap_pins = cap;
    }
    t->pins[t->npins++] = (cdy_sym_pin){value, dims, why};
}

void cdy_tr_pin_tensors(tracer *tr, tvar **args, int n, const char *why)
{
    for (int i = 0; i < n; i++)
        if (args[i] && args[i]->kind == TV_TENSOR)
            cdy_tr_pin(tr, args[i]->value, ~0u, why);
        else if (args[i] && (args[i]->kind == TV_TUPLE || args[i]->kind == TV_LIST))
            cdy_tr_pin_tensors(tr, args[i]->items, args[i]->n, why);
}
