/* opcodes.h - the CPython 3.11 opcodes cdynamo reads or writes:
 * X(NAME, number, inline cache entries).  tests/test_opcodes.py checks this
 * table against the running interpreter's `opcode` module.  A new Python
 * version gets a table of its own here, selected by PY_VERSION_HEX.       */
#ifndef CDY_OPCODES_H
#define CDY_OPCODES_H

#define CDY_OPCODES_311(X)                        \
    X(CACHE, 0, 0)                                \
    X(POP_TOP, 1, 0)                              \
    X(PUSH_NULL, 2, 0)                            \
    X(NOP, 9, 0)                                  \
    X(UNARY_POSITIVE, 10, 0)                      \
    X(UNARY_NEGATIVE, 11, 0)                      \
    X(UNARY_NOT, 12, 0)                           \
    X(UNARY_INVERT, 15, 0)                        \
    X(BINARY_SUBSCR, 25, 4)                       \
    X(STORE_SUBSCR, 60, 1)                        \
    X(STORE_ATTR, 95, 4)                          \
    X(GET_ITER, 68, 0)                            \
    X(RETURN_GENERATOR, 75, 0)                    \
    X(LIST_TO_TUPLE, 82, 0)                       \
    X(YIELD_VALUE, 86, 0)                         \
    X(RETURN_VALUE, 83, 0)                        \
    X(UNPACK_SEQUENCE, 92, 1)                     \
    X(FOR_ITER, 93, 0)                            \
    X(SWAP, 99, 0)                                \
    X(LOAD_CONST, 100, 0)                         \
    X(BUILD_TUPLE, 102, 0)                        \
    X(BUILD_LIST, 103, 0)                         \
    X(BUILD_MAP, 105, 0)                          \
    X(LOAD_ATTR, 106, 4)                          \
    X(COMPARE_OP, 107, 2)                         \
    X(IMPORT_NAME, 108, 0)                        \
    X(IMPORT_FROM, 109, 0)                        \
    X(JUMP_FORWARD, 110, 0)                       \
    X(JUMP_IF_FALSE_OR_POP, 111, 0)               \
    X(JUMP_IF_TRUE_OR_POP, 112, 0)                \
    X(POP_JUMP_FORWARD_IF_FALSE, 114, 0)          \
    X(POP_JUMP_FORWARD_IF_TRUE, 115, 0)           \
    X(LOAD_GLOBAL, 116, 5)                        \
    X(IS_OP, 117, 0)                              \
    X(CONTAINS_OP, 118, 0)                        \
    X(COPY, 120, 0)                               \
    X(BINARY_OP, 122, 1)                          \
    X(LOAD_FAST, 124, 0)                          \
    X(STORE_FAST, 125, 0)                         \
    X(DELETE_FAST, 126, 0)                        \
    X(POP_JUMP_FORWARD_IF_NOT_NONE, 128, 0)       \
    X(POP_JUMP_FORWARD_IF_NONE, 129, 0)           \
    X(MAKE_CELL, 135, 0)                          \
    X(LOAD_CLOSURE, 136, 0)                       \
    X(LOAD_DEREF, 137, 0)                         \
    X(STORE_DEREF, 138, 0)                        \
    X(JUMP_BACKWARD, 140, 0)                      \
    X(MAKE_FUNCTION, 132, 0)                      \
    X(BUILD_SLICE, 133, 0)                        \
    X(CALL_FUNCTION_EX, 142, 0)                   \
    X(EXTENDED_ARG, 144, 0)                       \
    X(LIST_APPEND, 145, 0)                        \
    X(MAP_ADD, 147, 0)                            \
    X(COPY_FREE_VARS, 149, 0)                     \
    X(RESUME, 151, 0)                             \
    X(FORMAT_VALUE, 155, 0)                       \
    X(BUILD_CONST_KEY_MAP, 156, 0)                \
    X(BUILD_STRING, 157, 0)                       \
    X(LOAD_METHOD, 160, 10)                       \
    X(PRECALL, 166, 1)                            \
    X(CALL, 171, 4)                               \
    X(LIST_EXTEND, 162, 0)                        \
    X(DICT_MERGE, 164, 0)                         \
    X(DICT_UPDATE, 165, 0)                        \
    X(KW_NAMES, 172, 0)                           \
    X(POP_JUMP_BACKWARD_IF_NOT_NONE, 173, 0)      \
    X(POP_JUMP_BACKWARD_IF_NONE, 174, 0)          \
    X(POP_JUMP_BACKWARD_IF_FALSE, 175, 0)         \
    X(POP_JUMP_BACKWARD_IF_TRUE, 176, 0)          \
    /* read by the tracer only (trace/sets.c, containers.c, objects.c): */ \
    X(BUILD_SET, 104, 0)                          \
    X(SET_ADD, 146, 0)                            \
    X(SET_UPDATE, 163, 0)                         \
    X(UNPACK_EX, 94, 0)                           \
    X(DELETE_SUBSCR, 61, 0)                       \
    X(DELETE_ATTR, 96, 0)                         \
    X(BEFORE_WITH, 53, 0)                         \
    X(PUSH_EXC_INFO, 35, 0)                       \
    X(POP_EXCEPT, 89, 0)                          \
    X(CHECK_EXC_MATCH, 36, 0)                     \
    X(RERAISE, 119, 0)                            \
    X(RAISE_VARARGS, 130, 0)                      \
    X(LOAD_ASSERTION_ERROR, 74, 0)                \
    X(DELETE_DEREF, 139, 0)                       \
    X(GET_YIELD_FROM_ITER, 69, 0)                 \
    X(SEND, 123, 0)                               \
    X(JUMP_BACKWARD_NO_INTERRUPT, 134, 0)

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define CDY_OPCODES CDY_OPCODES_311
#endif

enum {
#define CDY_X(name, num, cache) CDY_##name = num,
    CDY_OPCODES(CDY_X)
#undef CDY_X
};

/* Inline cache entries (code units) that follow opcode op. */
static inline int cdy_opcode_caches(int op)
{
    switch (op) {
#define CDY_X(name, num, cache) case num: return cache;
        CDY_OPCODES(CDY_X)
#undef CDY_X
    default: return 0;
    }
}

/* binary operator codes of BINARY_OP (3.11: NB_*) */
#define CDY_NB_ADD 0
#define CDY_NB_MULTIPLY 5
#define CDY_NB_SUBTRACT 10
#define CDY_NB_TRUE_DIVIDE 11
#define CDY_NB_INPLACE_FIRST 13

#endif
