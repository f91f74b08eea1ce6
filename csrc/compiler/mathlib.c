/* mathlib.c - the C text every generated file starts with: libm as builtins,
 * and those of the helpers (vectorizable float32 math, Python-style division,
 * streamed stores) that its kernels call. */
#include <string.h>

#include "compiler/cg.h"

/* libm's functions as GCC's builtins: the same functions (a call to libm
 * where GCC does not expand one inline) declared by the compiler itself, so
 * that a generated file needs no <math.h>, whose parsing is 8 ms of a 75 ms
 * compile.  CC_FLAGS has -Werror=implicit-function-declaration: a libm name
 * missing here is a compile error (and eager fallback), never a call taken
 * to return int.  Function-like macros: only a call is renamed. */
#define CG_LIBM1(X) X(acos) X(acosh) X(asin) X(asinh) X(atan) X(atanh) X(cbrt) X(ceil) \
    X(cos) X(cosh) X(erf) X(erfc) X(exp) X(exp2) X(expm1) X(fabs) X(floor) X(lgamma)     \
    X(log) X(log10) X(log2) X(logb) X(nearbyint) X(rint) X(round) X(sin)        \
    X(sinh) X(sqrt) X(tan) X(tanh) X(tgamma) X(trunc)
#define CG_LIBM2(X) X(atan2) X(copysign) X(fdim) X(fmax) X(fmin) X(fmod) X(hypot)       \
    X(nextafter) X(pow) X(remainder)
#define CG_LIBM3(X) X(fma)
#define CG_DEF1(n) "#define " #n "(a) __builtin_" #n "(a)\n" \
                   "#define " #n "f(a) __builtin_" #n "f(a)\n"
#define CG_DEF2(n) "#define " #n "(a, b) __builtin_" #n "(a, b)\n" \
                   "#define " #n "f(a, b) __builtin_" #n "f(a, b)\n"
#define CG_DEF3(n) "#define " #n "(a, b, c) __builtin_" #n "(a, b, c)\n" \
                   "#define " #n "f(a, b, c) __builtin_" #n "f(a, b, c)\n"
const char cg_prologue_libm[] =
    "/* libm as compiler builtins (no <math.h>) */\n"
    CG_LIBM1(CG_DEF1) CG_LIBM2(CG_DEF2) CG_LIBM3(CG_DEF3)
    /* float64 log1p as eager's for tiny |x| (all its paths: 2 * (x / (2 + x))
     * plus a +0 term, which rounds a denormal x to an even multiple of the
     * smallest: +-5e-324 gives +0; +-0 stay); libm's is exact there */
    "#define log1pf(a) __builtin_log1pf(a)\n"
    "#define log1p(a) cdy_log1p(a)\n"
    "static inline double cdy_log1p(double a)\n"
    "{ return a == 0.0 || __builtin_fabs(a) >= 0x1p-1000 ? __builtin_log1p(a)\n"
    "                                                  : (a * 0.5) * 2.0 + 0.0; }\n"
    "#define INFINITY (__builtin_inff())\n"
    "#define NAN (__builtin_nanf(\"\"))\n";

/* The start of every generated file's helpers: no trapping math, the FMA
 * macros.  cg_emit_helpers appends the helper functions the kernels call. */
const char cg_prologue_math[] =
    "/* FP exceptions are never inspected: let GCC if-convert (and so vectorize)\n"
    " * selects around float math; values are unchanged. */\n"
    "#pragma GCC optimize(\"no-trapping-math\")\n"
    "/* vectorizable float32 math: straight-line arithmetic and selects */\n"
    "#ifdef __FMA__\n"
    "#define CDY_FMAF(a, b, c) fmaf(a, b, c)\n"
    "#define CDY_FMA(a, b, c) fma(a, b, c)\n"
    "#else\n"
    "#define CDY_FMAF(a, b, c) ((a) * (b) + (c))\n"
    "#define CDY_FMA(a, b, c) ((a) * (b) + (c))\n"
    "#endif\n";

/* The helpers a generated file may call (vectorizable float32 math: exp, log,
 * tanh, erf, GELU, as straight-line arithmetic and selects within ~2.5 ulp of
 * glibc, libm's results for inf/NaN/overflow/underflow; Python-style
 * division; integer power; streamed stores), in order: a section calls only
 * earlier ones.  names: the identifiers it defines, blank-separated. */
static const struct {
    const char *names, *text;
} cg_helpers[] = {
    {"cdy_rnd32 cdy_toi32f cdy_toi32d cdy_toi64f cdy_toi64d cdy_toi32 cdy_toi64",
        "/* Rounding conversions (codegen.c's cg_convert) behind a zero GCC cannot see\n"
        " * (a `used` static may change under it): GCC 12 folds (double)(float)x back\n"
        " * to x in vectors of equal lane counts (its convert-convert fold reads a\n"
        " * vector type's precision), and with no-trapping-math (float)(int)x to\n"
        " * trunc(x) (-0.0 for x in (-1, 0), x itself out of the int's range).  Bits ^ 0\n"
        " * are the bits, for every value (an add of -0.0 was not: GCC turns NAN + z\n"
        " * into z - NAN and x86 then returns +NaN for -NaN). */\n"
        "static int32_t cdy_z32 __attribute__((used)) = 0;\n"
        "static int64_t cdy_z64 __attribute__((used)) = 0;\n"
        "static inline float cdy_rnd32(double x)\n"
        "{\n"
        "    union { float f; int32_t i; } u = {(float)x};\n"
        "    u.i ^= cdy_z32;\n"
        "    return u.f;\n"
        "}\n"
        "/* A float to an int: NaN, +-inf and values out of the int's range give\n"
        " * the int's minimum, as x86's cvtt* (eager's conversion) does; C's cast\n"
        " * is undefined there (GCC folded NaN -> int32 to 0). */\n"
        "static inline int32_t cdy_toi32f(float x)\n"
        "{ return (x >= -2147483648.0f && x < 2147483648.0f) ? (int32_t)x : (-2147483647 - 1); }\n"
        "static inline int32_t cdy_toi32d(double x)\n"
        "{ return (x > -2147483649.0 && x < 2147483648.0) ? (int32_t)x : (-2147483647 - 1); }\n"
        "static inline int64_t cdy_toi64f(float x)\n"
        "{ return (x >= -9223372036854775808.0f && x < 9223372036854775808.0f) ? (int64_t)x : (-9223372036854775807LL - 1); }\n"
        "static inline int64_t cdy_toi64d(double x)\n"
        "{ return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (int64_t)x : (-9223372036854775807LL - 1); }\n"
        "#define cdy_toi32(x) (_Generic((x), float: cdy_toi32f, default: cdy_toi32d)(x) ^ cdy_z32)\n"
        "#define cdy_toi64(x) (_Generic((x), float: cdy_toi64f, default: cdy_toi64d)(x) ^ cdy_z64)\n"},
    {"cdy_fbits cdy_bitsf",
        "static inline int32_t cdy_fbits(float x) { union { float f; int32_t i; } u = {x}; return u.i; }\n"
        "static inline float cdy_bitsf(int32_t i) { union { int32_t i; float f; } u = {i}; return u.f; }\n"},
    {"cdy_bf2f cdy_bfr32 cdy_f2bf cdy_rbf cdy_h2f cdy_f2h cdy_rh",
        "/* bfloat16 / float16 storage: loads widen exactly; stores round to nearest\n"
        " * even with a NaN kept NaN with its sign and top payload bits, quieted (a\n"
        " * bfloat16 NaN selected by where / copied keeps its bits, as in eager, so\n"
        " * copysign / signbit after it agree; c10's 0x7fc0 lost the sign), bfloat16 in\n"
        " * integer ops GCC vectorizes (not vcvtneps2bf16, which flushes subnormals),\n"
        " * float16 likewise (below).  cdy_rbf / cdy_rh: a float rounded to the\n"
        " * dtype, as a float (the value a bfloat16 / float16 local holds). */\n"
        "static inline float cdy_bf2f(uint16_t h) { return cdy_bitsf((int32_t)((uint32_t)h << 16)); }\n"
        "/* x rounded to bfloat16, as float32 bits (low 16 zero): every step on\n"
        " * 32-bit lanes with the NaN select as mask arithmetic from a float compare,\n"
        " * so that a chain of per-op roundings stays in 32-bit vector lanes (a\n"
        " * select written on the 16-bit result made GCC narrow to 16-bit lanes,\n"
        " * blend, and widen back at every op: relu(x*y+1) in bf16 ran 2x slower). */\n"
        "static inline uint32_t cdy_bfr32(float x)\n"
        "{\n"
        "    uint32_t u = (uint32_t)cdy_fbits(x);\n"
        "    uint32_t nan = 0u - (uint32_t)(x != x);\n"
        "    uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);\n"
        "    return ((r & ~nan) | ((u | 0x400000u) & nan)) & 0xffff0000u;\n"
        "}\n"
        "static inline uint16_t cdy_f2bf(float x) { return (uint16_t)(cdy_bfr32(x) >> 16); }\n"
        "static inline float cdy_rbf(float x) { return cdy_bitsf((int32_t)cdy_bfr32(x)); }\n"
        "/* float16 in integer ops too, the cases blended by masks, bit for bit F16C's\n"
        " * vcvtph2ps / vcvtps2ph (every input checked): GCC 12 vectorizes no _Float16\n"
        " * conversion without AVX512-FP16, so a float16 loop through _Float16 ran\n"
        " * scalar.  cdy_h2f: exact, a NaN quieted; a subnormal from a float subtract. */\n"
        "static inline float cdy_h2f(uint16_t h)\n"
        "{\n"
        "    uint32_t a = ((uint32_t)h & 0x7fffu) << 13;\n"
        "    uint32_t big = 0u - (uint32_t)(a >= 0x0f800000u);\n"
        "    uint32_t nan = 0u - (uint32_t)(a > 0x0f800000u);\n"
        "    uint32_t sub = 0u - (uint32_t)(a < 0x00800000u);\n"
        "    uint32_t s = (uint32_t)cdy_fbits(cdy_bitsf((int32_t)(a + 0x38800000u)) - 0x1p-14f);\n"
        "    uint32_t r = (a + 0x38000000u + (big & 0x38000000u)) | (nan & 0x400000u);\n"
        "    return cdy_bitsf((int32_t)(((r & ~sub) | (s & sub)) | (((uint32_t)h & 0x8000u) << 16)));\n"
        "}\n"
        "/* Nearest even; past 65504 inf; a NaN quieted with its top payload bits; under\n"
        " * 2^-14 the float add of 0.5 (ulp 2^-24) rounds to the subnormal's units. */\n"
        "static inline uint16_t cdy_f2h(float x)\n"
        "{\n"
        "    uint32_t u = (uint32_t)cdy_fbits(x);\n"
        "    uint32_t a = u & 0x7fffffffu;\n"
        "    uint32_t s = (uint32_t)cdy_fbits(cdy_bitsf((int32_t)a) + 0.5f) - 0x3f000000u;\n"
        "    uint32_t n = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;\n"
        "    uint32_t sub = 0u - (uint32_t)(a < 0x38800000u);\n"
        "    uint32_t big = 0u - (uint32_t)(a >= 0x47800000u);\n"
        "    uint32_t nan = 0u - (uint32_t)(x != x);\n"
        "    uint32_t b = 0x7c00u | (nan & (0x200u | ((a >> 13) & 0x3ffu)));\n"
        "    return (uint16_t)((n & ~sub & ~big) | (s & sub) | (b & big) | ((u >> 16) & 0x8000u));\n"
        "}\n"
        "/* cdy_h2f(cdy_f2h(x)) on 32-bit lanes (no narrowing between per-op roundings). */\n"
        "static inline float cdy_rh(float x)\n"
        "{\n"
        "    uint32_t u = (uint32_t)cdy_fbits(x);\n"
        "    uint32_t a = u & 0x7fffffffu;\n"
        "    float af = cdy_bitsf((int32_t)a);\n"
        "    uint32_t s = (uint32_t)cdy_fbits((af + 0.5f) - 0.5f);\n"
        "    uint32_t n = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;\n"
        "    uint32_t inf = 0u - (uint32_t)(n >= 0x47800000u);\n"
        "    uint32_t nan = 0u - (uint32_t)(x != x);\n"
        "    uint32_t sub = 0u - (uint32_t)(a < 0x38800000u);\n"
        "    n = (n & ~inf) | (0x7f800000u & inf);\n"
        "    n = (n & ~nan) | ((a | 0x400000u) & 0xffffe000u & nan);\n"
        "    return cdy_bitsf((int32_t)((n & ~sub) | (s & sub) | (u & 0x80000000u)));\n"
        "}\n"},
    {"cdy_scale2n",
        "/* p 2^n, t = n + 1.5 2^23 being n rounded by that magic add: n << 23 added\n"
        " * to p's bits (an integer op, not a multiply).  t's bits less n, 0x4b400000,\n"
        " * end in 9 zero bits, so t's bits shifted by 23 are n << 23 mod 2^32.  For a\n"
        " * normal result only (an exponent field reaching 0 gives a subnormal near it). */\n"
        "static inline float cdy_scale2n(float p, float t)\n"
        "{\n"
        "    return cdy_bitsf((int32_t)((uint32_t)cdy_fbits(p) + ((uint32_t)cdy_fbits(t) << 23)));\n"
        "}\n"},
    {"cdy_vexpm1_core",
        "/* e^r - 1 for |r| <= ln2/2: Taylor terms to r^7 (the r^8 term is under\n"
        " * 5.2e-9 relative; e^x within 1.06 ulp of exact on [-87.3, 0], was 0.98 with\n"
        " * it; one FMA fewer: softmax's exp loop 9.8 -> 8.9 cycles per 8 floats). */\n"
        "static inline float cdy_vexpm1_core(float r)\n"
        "{\n"
        "    float p = 1.98412698e-4f;\n"
        "    p = CDY_FMAF(p, r, 1.38888889e-3f);\n"
        "    p = CDY_FMAF(p, r, 8.33333333e-3f);\n"
        "    p = CDY_FMAF(p, r, 4.16666667e-2f);\n"
        "    p = CDY_FMAF(p, r, 1.66666667e-1f);\n"
        "    p = CDY_FMAF(p, r, 0.5f);\n"
        "    return CDY_FMAF(r * r, p, r);\n"
        "}\n"},
    {"cdy_vexpf",
        "/* e^x: x = n ln2 + r, 2^n applied in two halves so subnormal results round once.\n"
        " * Above 88.8 the result is inf by a select on x, not by clamping x from above:\n"
        " * GCC vectorizes a two-sided clamp as 4 compares, 3 mask ops and 2 blends (AVX2),\n"
        " * one side as a compare and a blend (softmax over 8x128x128 floats, Zen 3:\n"
        " * 59.4 -> 51.8 us in a C harness).  NaN still propagates through y. */\n"
        "static inline float cdy_vexpf(float x)\n"
        "{\n"
        "    float xc = x < -104.0f ? -104.0f : x;\n"
        "    float t = CDY_FMAF(xc, 1.44269504f, 12582912.0f);\n"
        "    float n = t - 12582912.0f;\n"
        "    float r = CDY_FMAF(n, -0.693145752f, xc);\n"
        "    r = CDY_FMAF(n, -1.42860677e-6f, r);\n"
        "    int32_t ni = cdy_fbits(t) - 0x4b400000;\n"
        "    int32_t n1 = ni >> 1, n2 = ni - n1;\n"
        "    float p = cdy_vexpm1_core(r) + 1.0f;\n"
        "    float y = p * cdy_bitsf((n1 + 127) << 23) * cdy_bitsf((n2 + 127) << 23);\n"
        "    return x > 88.8f ? INFINITY : y;\n"
        "}\n"},
    {"cdy_vexp_normf",
        "/* e^x where a result under 2^-126 cannot matter (1 / (1 + e^-x)): x clamped to\n"
        " * [-86.6, 88.8], one 2^(n-1) scale and a doubling in place of cdy_vexpf's two\n"
        " * halves (sigmoid * tanh on 1M floats: 392 -> 376 us).  exp_norm: float64's. */\n"
        "static inline float cdy_vexp_normf(float x)\n"
        "{\n"
        "    float xc = x < -86.6f ? -86.6f : x;     /* above 88.8: inf, as cdy_vexpf */\n"
        "    float t = CDY_FMAF(xc, 1.44269504f, 12582912.0f);\n"
        "    float n = t - 12582912.0f;\n"
        "    float r = CDY_FMAF(n, -0.693145752f, xc);\n"
        "    r = CDY_FMAF(n, -1.42860677e-6f, r);\n"
        "    float p = cdy_vexpm1_core(r) + 1.0f;\n"
        "    float y = p * cdy_bitsf((cdy_fbits(t) - 0x4b400000 + 126) << 23) * 2.0f;\n"
        "    return x > 88.8f ? INFINITY : y;\n"
        "}\n"},
    {"exp_norm",
        "static inline double exp_norm(double x) { return exp(x); }\n"},
    {"cdy_vexp_negf",
        "/* e^x for x <= 0 or NaN (softmax's exp(x - max)): 2^(n+64) goes into p's\n"
        " * exponent field by one integer add (cdy_scale2n; t holds n + 64: the magic\n"
        " * constant 1.5 2^23 + 64), then one multiply by 2^-64 rounds a result under\n"
        " * 2^-126 to its subnormal once, as eager's exp does (flushing them made\n"
        " * log(softmax(x)) -inf where eager's is -88.5); under -104 the result is 0\n"
        " * (e^-104 < 2^-150).  No two-halves scaling, no overflow select (9.8 -> 5.7\n"
        " * cycles per 8 floats against cdy_vexpf when it flushed).  A NaN x is returned\n"
        " * as is: the integer add would turn a NaN with payload bits into a number\n"
        " * (0x7fc00001 gives -5.9e-39). */\n"
        "static inline float cdy_vexp_negf(float x)\n"
        "{\n"
        "    float t = CDY_FMAF(x, 1.44269504f, 12582976.0f);\n"
        "    float n = t - 12582976.0f;\n"
        "    float r = CDY_FMAF(n, -0.693145752f, x);\n"
        "    r = CDY_FMAF(n, -1.42860677e-6f, r);\n"
        "    float p = cdy_vexpm1_core(r) + 1.0f;\n"
        "    return x < -104.0f ? 0.0f : x != x ? x : cdy_scale2n(p, t) * 5.42101086e-20f;\n"
        "}\n"},
    {"cdy_vexp_flushf",
        "/* cdy_vexp_negf with results under 2^-126 (x < -87.34) flushed to 0 and no\n"
        " * 2^-64 multiply: for log_softmax's sum of exps, which starts at 1 (the\n"
        " * max's term), so a term under 2^-126 cannot change it. */\n"
        "static inline float cdy_vexp_flushf(float x)\n"
        "{\n"
        "    float t = CDY_FMAF(x, 1.44269504f, 12582912.0f);\n"
        "    float n = t - 12582912.0f;\n"
        "    float r = CDY_FMAF(n, -0.693145752f, x);\n"
        "    r = CDY_FMAF(n, -1.42860677e-6f, r);\n"
        "    float p = cdy_vexpm1_core(r) + 1.0f;\n"
        "    return x < -87.3365479f ? 0.0f : x != x ? x : cdy_scale2n(p, t);\n"
        "}\n"},
    {"cdy_vlogf",
        "/* log(x): x = 2^e m, m in [sqrt(1/2), sqrt(2)); log(1+f) = f - (f^2/2 - s (f^2/2 + R(s^2))), s = f/(2+f). */\n"
        "static inline float cdy_vlogf(float x)\n"
        "{\n"
        "    int sub = x < 1.17549435e-38f;\n"
        "    float xs = sub ? x * 8388608.0f : x;\n"
        "    int32_t ix = cdy_fbits(xs) - 0x3f3504f3;\n"
        "    int32_t e = (ix >> 23) - (sub ? 23 : 0);\n"
        "    float f = cdy_bitsf((ix & 0x007fffff) + 0x3f3504f3) - 1.0f;\n"
        "    float s = f / (2.0f + f), z = s * s;\n"
        "    float R = z * CDY_FMAF(z, CDY_FMAF(z, CDY_FMAF(z, 0.222222222f, 0.285714286f), 0.4f), 0.666666667f);\n"
        "    float hfsq = 0.5f * f * f;\n"
        "    float lp = f - (hfsq - s * (hfsq + R));\n"
        "    float ef = (float)e;\n"
        "    float y = CDY_FMAF(ef, 0.693359375f, CDY_FMAF(ef, -2.12194440e-4f, lp));\n"
        "    y = x == INFINITY ? x : y;\n"
        "    y = x == 0.0f ? -INFINITY : y;\n"
        "    y = x < 0.0f ? NAN : y;\n"
        "    return x != x ? x : y;\n"
        "}\n"},
    {"cdy_vtanhf",
        "/* tanh(x) = e / (e + 2) with e = expm1(2|x|) and x's sign; 2|x| is clamped to\n"
        " * 18.2 (tanh rounds to 1 from |x| = 9.01).  expm1 = 2^n (1 + p) - 1 is taken as\n"
        " * fma(2^n, p, 2^n - 1), exact where n = 0, so small x keep their precision with\n"
        " * no second polynomial: one exp core and one division (sigmoid(x) * tanh(y) on\n"
        " * 1M floats: 547 -> 392 us against the polynomial below 0.625 and 1 - 2/(e + 1)).\n"
        " * e + 2 is exact while e < 2^25 (2|x| < 17.33); above, where e / (e + 2) would round\n"
        " * to 1 (tanh(9) 1, log(tanh(9)) 0 rather than -6e-8), tanh rounds to 1 - 2^-24\n"
        " * up to 2|x| = 26 ln 2 (its halfway point to 1), then to 1: two selects. */\n"
        "static inline float cdy_vtanhf(float x)\n"
        "{\n"
        "    float a2 = 2.0f * fabsf(x);\n"
        "    a2 = a2 > 18.2f ? 18.2f : a2;\n"
        "    float t = CDY_FMAF(a2, 1.44269504f, 12582912.0f);\n"
        "    float n = t - 12582912.0f;\n"
        "    float r = CDY_FMAF(n, -0.693145752f, a2);\n"
        "    r = CDY_FMAF(n, -1.42860677e-6f, r);\n"
        "    float s = cdy_bitsf((cdy_fbits(t) - 0x4b400000 + 127) << 23);\n"
        "    float e = CDY_FMAF(s, cdy_vexpm1_core(r), s - 1.0f);\n"
        "    float y = e / (e + 2.0f);\n"
        "    y = a2 > 17.3286795f ? (a2 < 18.0218267f ? 0.99999994f : 1.0f) : y;\n"
        "    return copysignf(y, x);\n"
        "}\n"},
    {"cdy_verff",
        "/* erf(x): x P(x^2) below 1, 1 - exp(L(|x| - 2.46)) up to 3.92 (L fits log erfc), then 1; x's sign\n"
        " * (-0 too: x P(x^2) of -0 is +0). */\n"
        "static inline float cdy_verff(float x)\n"
        "{\n"
        "    float a = fabsf(x), z = x * x;\n"
        "    float p = -9.67359096e-6f;\n"
        "    p = CDY_FMAF(p, z, 1.12682539e-4f);\n"
        "    p = CDY_FMAF(p, z, -8.48439656e-4f);\n"
        "    p = CDY_FMAF(p, z, 5.22105341e-3f);\n"
        "    p = CDY_FMAF(p, z, -2.68654383e-2f);\n"
        "    p = CDY_FMAF(p, z, 1.12837826e-1f);\n"
        "    p = CDY_FMAF(p, z, -3.76126385e-1f);\n"
        "    float small = CDY_FMAF(x, 1.12837917e+0f, x * z * p);\n"
        "    float u = (a > 3.92f ? 3.92f : a) - 2.46f;\n"
        "    float l = -5.30742959e-08f;\n"
        "    l = CDY_FMAF(l, u, 1.64496587e-06f);\n"
        "    l = CDY_FMAF(l, u, -1.35534956e-05f);\n"
        "    l = CDY_FMAF(l, u, 8.10720419e-05f);\n"
        "    l = CDY_FMAF(l, u, -4.39639532e-04f);\n"
        "    l = CDY_FMAF(l, u, 2.25122273e-03f);\n"
        "    l = CDY_FMAF(l, u, -1.12114675e-02f);\n"
        "    l = CDY_FMAF(l, u, -9.42569615e-01f);\n"
        "    l = CDY_FMAF(l, u, -5.27722192e+00f);\n"
        "    l = CDY_FMAF(l, u, -7.59421758e+00f);\n"
        "    float big = a >= 3.92f ? 1.0f : 1.0f - cdy_vexpf(l);\n"
        "    big = x < 0.0f ? -big : big;\n"
        "    return a < 1.0f ? copysignf(small, x) : big;   /* erf(-0) is -0 */\n"
        "}\n"},
    {"cdy_vgauss_t cdy_vgauss_p cdy_vgauss_lo cdy_vgelu_tailf",
        "/* e^(-a^2/2) = 2^n e^r for a >= 0, in two steps: t = n + 1.5 2^23 (n the\n"
        " * nearest integer to -a^2 log2(e) / 2 or next to it: t's rounding does not\n"
        " * matter), then p = e^r.  s = -2r = a^2 + 2n ln2 is one multiply-add of a\n"
        " * and a onto 2n ln2hi (exact: ln2hi ends in 12 zero bits), so the exact sum\n"
        " * is rounded once (|s| <= 0.7: within 3e-8), then plus 2n ln2lo.  No a^2 is\n"
        " * rounded on the way: e^(-a^2/2) stays within ~1 ulp relatively however\n"
        " * small (a^2/2 rounded to float32 first is 8 ulp off at a = 5.5).  e^r =\n"
        " * e^(-s/2): a degree-5 minimax polynomial of e^r on [-ln2/2, ln2/2] (9.2e-8\n"
        " * relative, e^0 = 1 exactly; tools/fit_gelu.py), its coefficients times\n"
        " * (-1/2)^k (exact) to take s: no -a/2 multiply, 5 multiply-adds where\n"
        " * cdy_vexpm1_core's 1 + takes 7 operations. */\n"
        "static inline float cdy_vgauss_t(float a)\n"
        "{\n"
        "    return CDY_FMAF(a * -0.72134752f, a, 12582912.0f);\n"
        "}\n"
        "static inline float cdy_vgauss_p(float a, float t)\n"
        "{\n"
        "    float n = t - 12582912.0f;\n"
        "    float s = CDY_FMAF(a, a, n * 1.386291504f);\n"
        "    s = CDY_FMAF(n, 2.857213531e-6f, s);\n"
        "    float p = CDY_FMAF(-2.590725489e-04f, s, 2.618621569e-03f);\n"
        "    p = CDY_FMAF(p, s, -2.083454467e-02f);\n"
        "    p = CDY_FMAF(p, s, 1.249978766e-01f);\n"
        "    p = CDY_FMAF(p, s, -4.999998510e-01f);\n"
        "    return CDY_FMAF(p, s, 1.0f);\n"
        "}\n"
        "/* a = |x| of ab = |x|'s bits while |x| < 5.5425944 (0x40b15cef), else 0 (h is\n"
        " * zeroed there by cdy_vgelu_tailf): eager's 0.5 x (1 + erf(x / sqrt 2)) is\n"
        " * exactly 0 from there on for x < 0 (erf rounds to -1 in float32; in its\n"
        " * scalar loop from that float on, in its oneDNN loop from 5.4858 on, not\n"
        " * monotonically); ours would be -8e-8 down to -1e-8, which 0 ** gelu(x)\n"
        " * turns into inf where eager's 0 gives 1. */\n"
        "static inline float cdy_vgauss_lo(int32_t ab)\n"
        "{\n"
        "    return cdy_bitsf(ab < 0x40b15cef ? ab : 0);\n"
        "}\n"
        "/* h = Phi(-|x|) = erfc(|x|/sqrt 2)/2 in float32, of ab = |x|'s bits, for the\n"
        " * exact GELU x Phi(x) (no 1 + erf cancellation for negative x): e^(-a^2/2)\n"
        " * R(a), R(a) = Phi(-a) e^(a^2/2) a rational function P(a) / Q(a) (degrees 3\n"
        " * and 4, Q monic, R(0) = 0.5 exactly) fitted for relative error on\n"
        " * [0, 5.5426] to 4.8e-8 (tools/fit_gelu.py).  h is within 5e-7 of Phi(-a)\n"
        " * RELATIVELY at every float up to the cutoff, so x h is too: GELU's negative\n"
        " * tail (Phi(-4.36) = 6.4e-6), where the one rational function this replaced,\n"
        " * within 3e-8 absolutely, was 1.5e-3 off relatively at x = -4.36 (1 / gelu(x)\n"
        " * 1.4e-3 from eager: fuzz seed 48102, breaks_wrong_8e0431da3b) and 0.12 off\n"
        " * on [-5.5, -5] (eager's own 1 + erf: up to 100%).  Its cost: GELU on 4M\n"
        " * floats, one thread, 1.33x that rational's time on a Zen 4 (1.27x its\n"
        " * Horner form, which Intel cores took; the exp is nine operations; the\n"
        " * derivative, which has its exp anyway, got faster: 0.85x). */\n"
        "static inline float cdy_vgelu_tailf(int32_t ab)\n"
        "{\n"
        "    float a = cdy_vgauss_lo(ab), t = cdy_vgauss_t(a);\n"
        "    float p = CDY_FMAF(CDY_FMAF(3.986624821e-01f, a, 3.085773872e+00f), a,\n"
        "                       9.941985857e+00f);\n"
        "    p = CDY_FMAF(p, a, 1.498983002e+01f);\n"
        "    float q = CDY_FMAF(a + 7.716719959e+00f, a, 2.613325429e+01f);\n"
        "    q = CDY_FMAF(q, a, 4.380419225e+01f);\n"
        "    q = CDY_FMAF(q, a, 2.997965935e+01f);\n"
        "    float h = cdy_scale2n(cdy_vgauss_p(a, t), t) * (p / q);\n"
        "    return ab < 0x40b15cef ? h : 0.0f;\n"
        "}\n"},
    {"cdy_vgelu_exactf",
        "/* exact GELU x * Phi(x) in float32: x (1 - h) for x >= 0, x h below. */\n"
        "static inline float cdy_vgelu_exactf(float x)\n"
        "{\n"
        "    int32_t xi = cdy_fbits(x);\n"
        "    float h = cdy_vgelu_tailf(xi & 0x7fffffff);\n"
        "#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)\n"
        "    /* torch's float32 GELU is oneDNN's eltwise kernel, whose AVX-512 form\n"
        "     * overflows to inf from x = 2^127 and gives NaN at +inf, and -0 where\n"
        "     * x Phi(x) is -0 (x = -0, x far below 0: x h).  x (1 - h) is one fused\n"
        "     * multiply-add, one rounding (x * (1 - h) rounded twice: 4.7e-7 from\n"
        "     * float64 on a Xeon, against 3.7e-7).  max(x, 0) - |x| h, as below, is\n"
        "     * that for x >= 0 and x h for x < 0 in one multiply-add (x (1 - h) and x h\n"
        "     * were two: gelu(layer_norm(x)) on 4096x1024 floats 0.99 of the time on a\n"
        "     * Zen 4).  Its addend is x for x >= +0 and -0 for x < 0 (x's bits and\n"
        "     * -0's as unsigned, the smaller), so a zero x h keeps its -0; +-inf give\n"
        "     * -inf * 0 = NaN, as eager; from 2^127, r = x, and x + inf is eager's inf.\n"
        "     * Bit for bit the results of the or-ed sign and inf + (x - x) it\n"
        "     * replaced, in 5 vector instructions where those took 8. */\n"
        "    uint32_t xu = (uint32_t)xi, c = xu < 0x80000000u ? xu : 0x80000000u;\n"
        "    float r = CDY_FMAF(cdy_bitsf(xi | (int32_t)0x80000000), h, cdy_bitsf((int32_t)c));\n"
        "    return x >= 1.70141183e38f ? r + INFINITY : r;\n"
        "#else\n"
        "    /* its AVX2 form adds x/2 and x/2 erf: inf at +inf, and +0 where the result\n"
        "     * is zero (x = -0, x far below 0).  x Phi(x) = max(x, 0) - |x| h, one fused\n"
        "     * multiply-add in place of a compare, a blend, 1 - h, x * phi and + 0, with\n"
        "     * |x| taken as 0 at +inf, where h = 0 (-inf gives -inf * 0 = NaN, as eager).\n"
        "     * -|x| and max(x, 0) are integer ops on x's bits (GCC makes the float forms\n"
        "     * compares and blends).\n"
        "     * The one input whose zero differs from eager's is -2^-149: -0 here, +0 there */\n"
        "    int32_t nab = (xi | (int32_t)0x80000000) & -(int32_t)(xi != 0x7f800000);\n"
        "    return CDY_FMAF(cdy_bitsf(nab), h, cdy_bitsf(xi > 0 ? xi : 0));\n"
        "#endif\n"
        "}\n"},
    {"cdy_powf_h",
        "/* float16 pow with a number exponent as eager's (std::pow for every exponent):\n"
        " * GCC's vectorizer makes powf(x, 0.5f) a vsqrtps, which gives NaN at -inf and\n"
        " * -0 at -0 where pow gives inf and +0; those two are the pow's here. */\n"
        "static inline float cdy_powf_h(float x, float e)\n"
        "{\n"
        "    return e == 0.5f && (x == 0.0f || x == -INFINITY) ? x * x : powf(x, e);\n"
        "}\n"},
    {"cdy_vgelu_exactf_h",
        "/* exact GELU, inf at +inf: ATen's own kernel, which eager's gelu takes for\n"
        " * an input of one element or not contiguous, and for float16 where oneDNN\n"
        " * has no float16 GELU (a contiguous one goes to oneDNN: NaN at +inf;\n"
        " * codegen.c's cg_gelu_inf picks the form per node). */\n"
        "static inline float cdy_vgelu_exactf_h(float x)\n"
        "{\n"
        "    float r = cdy_vgelu_exactf(x);\n"
        "    return x == INFINITY ? x : r;\n"
        "}\n"},
    {"cdy_vgelu_gradf",
        "/* exact GELU's derivative Phi(x) + x phi(x) in float32, of x alone:\n"
        " * e = e^(-a^2/2) (a = |x|), Phi(-a) = e R(a), phi(x) = e / sqrt(2 pi), so\n"
        " * Phi(x) + x phi(x) = e (R + x / sqrt(2 pi)) for x < 0 and 1 + e (x /\n"
        " * sqrt(2 pi) - R) for x >= 0: one multiply-add of x onto +-R, one of e\n"
        " * onto 0 or 1.  R(a) = P(a) / Q(a), degrees 4 and 5, fitted for relative\n"
        " * error on [0, 14.5] to 5.9e-9 (tools/fit_gelu.py), a clamped to 14.5,\n"
        " * where e underflows to 0; e in two halves of 2^n (subnormal results round\n"
        " * once).  Within 3e-7 of float64 relatively in the negative tail, where\n"
        " * the rational Phi it replaced (3e-8 absolutely, and zeroed from |x| =\n"
        " * 5.5426 as the forward) was up to 3% off; one exp and one division as\n"
        " * before, 0.94 of its time.  Against Phi(x) as gelu(x) / x from the\n"
        " * forward's saved result: one 4-byte load per element fewer (GELU's\n"
        " * backward reads grad and x only, as eager's).  0.5 at x = +-0 (R(0) is 0.5\n"
        " * exactly), +0 far below 0 (e = 0 added to +0), NaN at +-inf (0 * inf, as\n"
        " * eager's inf * 0) and at NaN. */\n"
        "static inline float cdy_vgelu_gradf(float x)\n"
        "{\n"
        "    int32_t xi = cdy_fbits(x);\n"
        "    float a = fabsf(x);\n"
        "    a = a > 14.5f ? 14.5f : a;\n"
        "    float t = cdy_vgauss_t(a);\n"
        "    int32_t ni = cdy_fbits(t) - 0x4b400000;\n"
        "    int32_t n1 = ni >> 1, n2 = ni - n1;\n"
        "    float e = cdy_vgauss_p(a, t) * cdy_bitsf((n1 + 127) << 23) * cdy_bitsf((n2 + 127) << 23);\n"
        "    float p = CDY_FMAF(3.989469101e-01f, a, 3.938126707e+00f);\n"
        "    p = CDY_FMAF(p, a, 1.775896920e+01f);\n"
        "    p = CDY_FMAF(p, a, 4.247915725e+01f);\n"
        "    p = CDY_FMAF(p, a, 4.845959473e+01f);\n"
        "    float q = CDY_FMAF(a + 9.872044576e+00f, a, 4.550062730e+01f);\n"
        "    q = CDY_FMAF(q, a, 1.165455113e+02f);\n"
        "    q = CDY_FMAF(q, a, 1.622886771e+02f);\n"
        "    q = CDY_FMAF(q, a, 9.691918566e+01f);\n"
        "    float r = p / q;\n"
        "    float d = CDY_FMAF(x, 0.398942280f, xi < 0 ? r : -r);\n"
        "    return CDY_FMAF(e, d, xi < 0 ? 0.0f : 1.0f);\n"
        "}\n"},
    {"gelu_grad",
        "/* float64 exact GELU's derivative: libm's erf (gelu_grad: the name $v gives). */\n"
        "static inline double gelu_grad(double x)\n"
        "{\n"
        "    return 0.5 * (1 + erf(x * 0.70710678118654752440)) +\n"
        "           x * exp(-0.5 * x * x) * 0.39894228040143267794;\n"
        "}\n"},
    {"gelu_exact",
        "/* float64 exact GELU: libm's erf (gelu_exact: the name the template's $v gives). */\n"
        "static inline double gelu_exact(double x) { return x * 0.5 * (1 + erf(x * 0.70710678118654752440)); }\n"},
    {"cdy_floordiv",
        "/* Python-style floor division of floats (torch's div_floor): division by\n"
        " * zero gives the IEEE quotient; the result is the floor of the exact quotient. */\n"
        "static inline double cdy_floordiv(double a, double b)\n"
        "{\n"
        "    if (b == 0)\n"
        "        return a / b;\n"
        "    double m = fmod(a, b), d = (a - m) / b;\n"
        "    if (m != 0 && (b < 0) != (m < 0))\n"
        "        d -= 1;\n"
        "    if (d == 0)\n"
        "        return copysign(0.0, a / b);\n"
        "    double fl = floor(d);\n"
        "    return d - fl > 0.5 ? fl + 1 : fl;\n"
        "}\n"},
    {"cdy_floordivf",
        "static inline float cdy_floordivf(float a, float b)\n"
        "{\n"
        "    if (b == 0)\n"
        "        return a / b;\n"
        "    float m = fmodf(a, b), d = (a - m) / b;\n"
        "    if (m != 0 && (b < 0) != (m < 0))\n"
        "        d -= 1;\n"
        "    if (d == 0)\n"
        "        return copysignf(0.0f, a / b);\n"
        "    float fl = floorf(d);\n"
        "    return d - fl > 0.5f ? fl + 1 : fl;\n"
        "}\n"},
    {"cdy_remainder cdy_remainderf",
        "/* Python-style remainder: the sign of the divisor. */\n"
        "static inline double cdy_remainder(double a, double b)\n"
        "{\n"
        "    double m = fmod(a, b);\n"
        "    return m != 0 && (b < 0) != (m < 0) ? m + b : m;\n"
        "}\n"
        "static inline float cdy_remainderf(float a, float b)\n"
        "{\n"
        "    float m = fmodf(a, b);\n"
        "    return m != 0 && (b < 0) != (m < 0) ? m + b : m;\n"
        "}\n"},
    {"cdy_itruncdiv",
        "/* Integer division family; b == 0 never reaches a kernel (torch raises, the\n"
        " * op stays extern); b == -1 wraps like torch instead of trapping. */\n"
        "static inline int64_t cdy_itruncdiv(int64_t a, int64_t b)\n"
        "{\n"
        "    return b == -1 ? (int64_t)(0 - (uint64_t)a) : b == 0 ? 0 : a / b;\n"
        "}\n"},
    {"cdy_ifloordiv",
        "static inline int64_t cdy_ifloordiv(int64_t a, int64_t b)\n"
        "{\n"
        "    if (b == -1 || b == 0)\n"
        "        return cdy_itruncdiv(a, b);\n"
        "    int64_t q = a / b;\n"
        "    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;\n"
        "}\n"},
    {"cdy_ifmod",
        "static inline int64_t cdy_ifmod(int64_t a, int64_t b)\n"
        "{\n"
        "    return b == -1 || b == 0 ? 0 : a % b;\n"
        "}\n"},
    {"cdy_iremainder",
        "static inline int64_t cdy_iremainder(int64_t a, int64_t b)\n"
        "{\n"
        "    int64_t r = cdy_ifmod(a, b);\n"
        "    return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n"
        "}\n"},
    {"cdy_ipow",
        "/* Integer power with wrap-around; negative exponents as torch: 1, +-1 or 0. */\n"
        "static inline int64_t cdy_ipow(int64_t a, int64_t b)\n"
        "{\n"
        "    if (b < 0)\n"
        "        return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;\n"
        "    uint64_t r = 1, x = (uint64_t)a;\n"
        "    for (; b; b >>= 1, x *= x)\n"
        "        if (b & 1)\n"
        "            r *= x;\n"
        "    return (int64_t)r;\n"
        "}\n"},
    {"cdy_stream cdy_sfence",
        "/* n bytes from s (a kernel's L1 block) to d: the whole 64-byte lines of d by\n"
        " * non-temporal stores (no read for ownership, no cache line taken), the ragged\n"
        " * ends by plain copies; a thread's last cdy_stream is followed by cdy_sfence()\n"
        " * (stream.c).  Not inlined: called once per block of 1-8 KB, and each inlined\n"
        " * copy cost gelu(layer_norm)'s compile 30 of 230 ms. */\n"
        "#if defined(__x86_64__) && defined(__AVX__)\n"
        "typedef long long cdy_v4i __attribute__((vector_size(32)));\n"
        "#define CDY_NT_LINE(d, s) do { cdy_v4i a_, b_; __builtin_memcpy(&a_, s, 32); \\\n"
        "    __builtin_memcpy(&b_, (s) + 32, 32); __builtin_ia32_movntdq256((cdy_v4i *)(d), a_); \\\n"
        "    __builtin_ia32_movntdq256((cdy_v4i *)((d) + 32), b_); } while (0)\n"
        "#elif defined(__x86_64__)\n"
        "typedef long long cdy_v2i __attribute__((vector_size(16)));\n"
        "#define CDY_NT_LINE(d, s) do { for (int q_ = 0; q_ < 64; q_ += 16) { cdy_v2i a_; \\\n"
        "    __builtin_memcpy(&a_, (s) + q_, 16); __builtin_ia32_movntdq((cdy_v2i *)((d) + q_), a_); } \\\n"
        "    } while (0)\n"
        "#endif\n"
        "#ifdef CDY_NT_LINE\n"
        "static __attribute__((noinline, unused)) void cdy_stream(void *restrict d,\n"
        "                                                          const void *restrict s, int64_t n)\n"
        "{\n"
        "    char *dp = d;\n"
        "    const char *sp = s;\n"
        "    int64_t head = (int64_t)(-(uintptr_t)dp & 63);\n"
        "    head = head < n ? head : n;\n"
        "    __builtin_memcpy(dp, sp, head);\n"
        "    for (dp += head, sp += head, n -= head; n >= 64; n -= 64, dp += 64, sp += 64)\n"
        "        CDY_NT_LINE(dp, sp);\n"
        "    __builtin_memcpy(dp, sp, n);\n"
        "}\n"
        "#define cdy_sfence() __builtin_ia32_sfence()\n"
        "#else\n"
        "static inline void cdy_stream(void *restrict d, const void *restrict s, int64_t n)\n"
        "{\n"
        "    __builtin_memcpy(d, s, n);\n"
        "}\n"
        "#define cdy_sfence() ((void)0)\n"
        "#endif\n"},
    {"CDY_WF_DEF",
        "/* eager's row moments, element by element (rows.c's norms take them for a row\n"
        " * whose moments may overflow): ATen's RowwiseMoments (moments_utils.h) in its\n"
        " * AVX2 / AVX-512 builds, which take 32-byte vectors (V: 8 float, 4 double\n"
        " * lanes): per lane a Welford update over chunks of 16 vectors, the chunks'\n"
        " * moments merged in a cascade (AddMomentsVec), a scalar Welford over the last\n"
        " * N % V elements, then the lanes merged into it one by one (AddMoments), with\n"
        " * the multiply-adds ATen's build fuses.  bfloat16 / float16 rows (H = 2):\n"
        " * a vector holds 2V halves, converted to two float vectors that update two\n"
        " * lane sets, each merged into the cascade at a chunk's end, and the lanes\n"
        " * count 2n each (RowwiseMoments<BFloat16>).  Bit for bit eager's mean and\n"
        " * variance, also where they are inf or NaN (a row holding inf, or of |x| whose\n"
        " * squares overflow).  Up to 2^40 chunks (depth 40). */\n"
        "#define CDY_WF_DEF(T, S, FMA)                                                         \\\n"
        "typedef struct {                                                                      \\\n"
        "    int64_t N, nv, i, s0[40], t0;                                                     \\\n"
        "    int V, H, depth;                                                                  \\\n"
        "    T m1v[2][8], m2v[2][8], s1[40][8], s2[40][8], t1, t2;                             \\\n"
        "} cdy_wf_##S;                                                                         \\\n"
        "static __attribute__((noinline, cold))                                                \\\n"
        "void cdy_wf_init_##S(cdy_wf_##S *w, int64_t N, int V, int H)                          \\\n"
        "{                                                                                     \\\n"
        "    __builtin_memset(w, 0, sizeof(*w));                                               \\\n"
        "    w->N = N;                                                                         \\\n"
        "    w->V = V;                                                                         \\\n"
        "    w->H = H;                                                                         \\\n"
        "    w->nv = N / (V * H);                                                              \\\n"
        "    int64_t m = (w->nv + 15) / 16;                                                    \\\n"
        "    w->depth = m <= 2 ? 1 : 64 - __builtin_clzll((unsigned long long)(m - 1));        \\\n"
        "}                                                                                     \\\n"
        "static void cdy_wf_addv_##S(int V, int64_t a0, const T *a1, const T *a2, int64_t *m0,  \\\n"
        "                            T *m1, T *m2)                                             \\\n"
        "{                                                                                     \\\n"
        "    const int64_t n = *m0 + a0;                                                       \\\n"
        "    const T c = n == 0 ? (T)0 : (T)a0 / (T)n;                                         \\\n"
        "    for (int l = 0; l < V; l++) {                                                     \\\n"
        "        const T d = a1[l] - m1[l], t = m2[l] + a2[l], cd = c * d, md = d * (T)*m0;    \\\n"
        "        m1[l] = m1[l] + cd;                                                           \\\n"
        "        m2[l] = FMA(md, cd, t);                                                       \\\n"
        "    }                                                                                 \\\n"
        "    *m0 = n;                                                                          \\\n"
        "}                                                                                     \\\n"
        "static __attribute__((noinline, cold))                                                \\\n"
        "void cdy_wf_push_##S(cdy_wf_##S *w, T x)                                              \\\n"
        "{                                                                                     \\\n"
        "    const int64_t i = w->i++;                                                         \\\n"
        "    if (i >= w->nv * w->V * w->H) {                                                   \\\n"
        "        const T d = x - w->t1;                                                        \\\n"
        "        w->t0++;                                                                      \\\n"
        "        w->t1 += d / (T)w->t0;                                                        \\\n"
        "        w->t2 += d * (x - w->t1);                                                     \\\n"
        "        return;                                                                       \\\n"
        "    }                                                                                 \\\n"
        "    const int64_t v = i / (w->V * w->H), ch = v / 16;                                 \\\n"
        "    const int p = (int)(i % (w->V * w->H)), h = p / w->V, l = p % w->V;               \\\n"
        "    const int j = (int)(v % 16);                                                      \\\n"
        "    if (p == 0 && j == 0)                                                             \\\n"
        "        for (int k = 0; k < w->V; k++)                                                \\\n"
        "            w->m1v[0][k] = w->m2v[0][k] = w->m1v[1][k] = w->m2v[1][k] = 0;            \\\n"
        "    const T d = x - w->m1v[h][l];                                                     \\\n"
        "    w->m1v[h][l] = FMA((T)1 / (T)(j + 1), d, w->m1v[h][l]);                           \\\n"
        "    w->m2v[h][l] = FMA(d, x - w->m1v[h][l], w->m2v[h][l]);                            \\\n"
        "    const int64_t len = w->nv - ch * 16 < 16 ? w->nv - ch * 16 : 16;                  \\\n"
        "    if (p != w->V * w->H - 1 || j != len - 1)                                         \\\n"
        "        return;                                                                       \\\n"
        "    for (int q = 0; q < w->H; q++)                                                    \\\n"
        "        cdy_wf_addv_##S(w->V, len, w->m1v[q], w->m2v[q], &w->s0[0], w->s1[0],         \\\n"
        "                        w->s2[0]);                                                    \\\n"
        "    int64_t mask = ch + 1;                                                            \\\n"
        "    for (int k = 1; k < w->depth && (mask & 1) == 0; k++, mask >>= 1) {               \\\n"
        "        cdy_wf_addv_##S(w->V, w->s0[k - 1], w->s1[k - 1], w->s2[k - 1], &w->s0[k],    \\\n"
        "                        w->s1[k], w->s2[k]);                                          \\\n"
        "        w->s0[k - 1] = 0;                                                             \\\n"
        "        for (int q = 0; q < w->V; q++)                                                \\\n"
        "            w->s1[k - 1][q] = w->s2[k - 1][q] = 0;                                    \\\n"
        "    }                                                                                 \\\n"
        "}                                                                                     \\\n"
        "static __attribute__((noinline, cold))                                                \\\n"
        "void cdy_wf_end_##S(cdy_wf_##S *w, T *mean, T *var)                                   \\\n"
        "{                                                                                     \\\n"
        "    for (int k = 1; k < w->depth; k++)                                                \\\n"
        "        cdy_wf_addv_##S(w->V, w->s0[k], w->s1[k], w->s2[k], &w->s0[0], w->s1[0],      \\\n"
        "                        w->s2[0]);                                                    \\\n"
        "    int64_t m0 = w->t0;                                                               \\\n"
        "    T m1 = w->t1, m2 = w->t2;                                                         \\\n"
        "    for (int l = 0; l < w->V; l++) {                                                  \\\n"
        "        const int64_t n = m0 + w->nv * w->H;                                          \\\n"
        "        const T c = n == 0 ? (T)0 : (T)(w->nv * w->H) / (T)n, d = w->s1[0][l] - m1;   \\\n"
        "        m1 = FMA(c, d, m1);                                                           \\\n"
        "        m2 = m2 + FMA(d * d * c, (T)m0, w->s2[0][l]);                                 \\\n"
        "        m0 = n;                                                                       \\\n"
        "    }                                                                                 \\\n"
        "    *mean = m1;                                                                       \\\n"
        "    *var = m2 / (T)w->N;                                                              \\\n"
        "}\n"},
    {"cdy_wf_f32 cdy_wf_init_f32 cdy_wf_push_f32 cdy_wf_end_f32",
        "CDY_WF_DEF(float, f32, fmaf)\n"},
    {"cdy_wf_f64 cdy_wf_init_f64 cdy_wf_push_f64 cdy_wf_end_f64",
        "CDY_WF_DEF(double, f64, fma)\n"},
};

#define CG_NHELPERS ((int)(sizeof cg_helpers / sizeof cg_helpers[0]))

/* Whether names (blank-separated) lists the identifier [id, id + n). */
static int cg_names_have(const char *names, const char *id, size_t n)
{
    for (const char *p = names; *p; p += strspn(p, " ")) {
        size_t len = strcspn(p, " ");
        if (len == n && memcmp(p, id, n) == 0)
            return 1;
        p += len;
    }
    return 0;
}

/* Set use[i] for each helper section that text calls: its identifiers outside
 * comments (a comment may name a helper it does not call); first[ch]: some
 * helper's name starts with ch (the other identifiers are skipped at once). */
static void cg_mark_uses(const char *text, const unsigned char *first, unsigned char *use)
{
#define CG_IDCHAR(ch) (((ch) >= 'a' && (ch) <= 'z') || ((ch) >= 'A' && (ch) <= 'Z') || \
                       ((ch) >= '0' && (ch) <= '9') || (ch) == '_')
    for (const char *p = text; *p;) {
        if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
        } else if (CG_IDCHAR(*p)) {
            const char *id = p;
            while (CG_IDCHAR(*p))
                p++;
            for (int i = 0; i < CG_NHELPERS && first[(unsigned char)*id]; i++)
                if (!use[i] && cg_names_have(cg_helpers[i].names, id, (size_t)(p - id)))
                    use[i] = 1;
        } else {
            p++;
        }
    }
#undef CG_IDCHAR
}

void cg_emit_helpers(cdy_buf *out, const char *kernels)
{
    unsigned char use[CG_NHELPERS] = {0}, first[256] = {0};
    for (int i = 0; i < CG_NHELPERS; i++)
        for (const char *p = cg_helpers[i].names; *p; p++)
            if (p == cg_helpers[i].names || p[-1] == ' ')
                first[(unsigned char)*p] = 1;
    cg_mark_uses(kernels, first, use);
    for (int i = CG_NHELPERS - 1; i >= 0; i--)     /* a section calls only earlier ones */
        if (use[i])
            cg_mark_uses(cg_helpers[i].text, first, use);
    for (int i = 0; i < CG_NHELPERS; i++)
        if (use[i])
            cdy_buf_puts(out, cg_helpers[i].text);
}
