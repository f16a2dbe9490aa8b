/*
 * test_safetensors.c: safetensors reading and writing (formats/formats.h).
 *
 * A round trip of several tensors (a scalar, an empty one, one larger than the
 * reader's conversion buffer) with metadata; headers built byte by byte here
 * with each defect pt_st_open promises to catch, each refused with a message
 * naming it; truncation at every length and every single-byte change of a
 * small file (no crash, no accepted truncation); exact F16, BF16 and F64
 * conversion of known values.
 */
#include "formats/formats.h"
#include "tests/common/test_util.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes [u64 header_len][header][data] to path. */
static void write_st(const char *path, uint64_t header_len, const char *header,
                     const void *data, size_t data_len)
{
    size_t hn = strlen(header);
    unsigned char *b = calloc(1, 8 + hn + data_len + 1);
    pt_put_le64(b, header_len);
    memcpy(b + 8, header, hn);
    if (data_len)
        memcpy(b + 8 + hn, data, data_len);
    CU_ASSERT_FATAL(write_raw(path, b, 8 + hn + data_len) == 0);
    free(b);
}

static int open_st(const char *path, pt_st_file **f, pt_err *err)
{
    *f = (pt_st_file *)1;
    int rc = pt_st_open(f, path, err);
    if (rc)
        CU_ASSERT(*f == NULL);
    return rc;
}

static float bits_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_round_trip(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "model.safetensors");
    float w[12], bias[4], scale = 3.25f;
    for (int i = 0; i < 12; i++)
        w[i] = (float)i * 0.5f - 1.0f;
    bias[0] = -0.0f;
    bias[1] = INFINITY;
    bias[2] = bits_float(0x7fc00001u); /* a NaN with a payload */
    bias[3] = 1e-42f;                  /* subnormal */
    size_t big_n = 300000;             /* 1.2 MB: more than one conversion chunk */
    float *big = malloc(big_n * sizeof *big);
    for (size_t i = 0; i < big_n; i++)
        big[i] = (float)i / 7.0f;
    int64_t w_shape[] = {3, 4}, b_shape[] = {4}, e_shape[] = {0, 5}, big_shape[] = {big_n};
    pt_st_tensor t[] = {{"blocks.0.attn.qkv.weight", 2, w_shape, w},
                        {"bias", 1, b_shape, bias},
                        {"scale", 0, NULL, &scale},
                        {"empty", 2, e_shape, NULL},
                        {"big", 1, big_shape, big}};
    const char *meta[] = {"format", "pt", "note", "a \"quoted\" \\ \xe2\x98\x83\n\t", NULL};
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_st_write(path, t, 5, meta, &err) == 0);
    CU_ASSERT(count_entries(dir) == 1);

    size_t raw_n;
    unsigned char *raw = read_raw(path, &raw_n);
    uint64_t header_len = pt_get_le64(raw);
    CU_ASSERT(header_len % 8 == 0);
    CU_ASSERT(raw_n == 8 + header_len + (12 + 4 + 1 + big_n) * 4);
    free(raw);

    pt_st_file *f;
    CU_ASSERT_FATAL(open_st(path, &f, &err) == 0);
    CU_ASSERT_FATAL(pt_st_count(f) == 5);
    for (int i = 0; i < 5; i++) {
        const pt_st_entry *e = pt_st_entry_at(f, i);
        CU_ASSERT_STRING_EQUAL(e->name, t[i].name);
        CU_ASSERT_STRING_EQUAL(e->dtype, "F32");
        CU_ASSERT(e->ndim == t[i].ndim);
        for (int d = 0; d < e->ndim; d++)
            CU_ASSERT(e->shape[d] == t[i].shape[d]);
        CU_ASSERT(pt_st_find(f, t[i].name) == i);
        uint64_t numel = pt_st_numel(e);
        CU_ASSERT(e->end - e->begin == numel * 4);
        float *got = malloc((numel + 1) * sizeof *got);
        CU_ASSERT(pt_st_read_f32(f, i, got, (size_t)numel, &err) == 0);
        CU_ASSERT(numel == 0 || memcmp(got, t[i].data, (size_t)numel * 4) == 0);
        free(got);
    }
    CU_ASSERT(pt_st_entry_at(f, 0)->begin == 0);
    CU_ASSERT(pt_st_entry_at(f, 2)->end - pt_st_entry_at(f, 2)->begin == 4); /* scalar: 1 element */
    CU_ASSERT(pt_st_entry_at(f, 5) == NULL && pt_st_entry_at(f, -1) == NULL);
    CU_ASSERT(pt_st_find(f, "nope") == -1);
    CU_ASSERT_STRING_EQUAL(pt_st_metadata(f, "format"), "pt");
    CU_ASSERT_STRING_EQUAL(pt_st_metadata(f, "note"), meta[3]);
    CU_ASSERT(pt_st_metadata(f, "missing") == NULL);

    float few[11];
    CU_ASSERT(pt_st_read_f32(f, 0, few, 11, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "tensor 'blocks.0.attn.qkv.weight'") != NULL);
    CU_ASSERT(strstr(err.msg, "expected 11 elements") != NULL);
    CU_ASSERT(strstr(err.msg, "shape [3, 4] (12 elements)") != NULL);
    CU_ASSERT(strstr(err.msg, "model.safetensors") != NULL);
    CU_ASSERT(pt_st_read_f32(f, 9, few, 1, &err) == PT_EINTERNAL);
    pt_st_close(f);
    pt_st_close(NULL);

    /* nothing at all is a valid file too */
    CU_ASSERT_FATAL(pt_st_write(path, NULL, 0, NULL, &err) == 0);
    CU_ASSERT_FATAL(open_st(path, &f, &err) == 0);
    CU_ASSERT(pt_st_count(f) == 0 && pt_st_find(f, "x") == -1 && !pt_st_metadata(f, "x"));
    pt_st_close(f);
    free(big);
    free(path);
    free_temp_dir(dir);
}

static void test_writer_refuses_bad_arguments(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "bad.safetensors");
    float v[2] = {1, 2};
    int64_t shape[] = {2}, negative[] = {-2}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    char long_name[200];
    memset(long_name, 'n', 128);
    long_name[128] = '\0';
    struct { pt_st_tensor t[2]; int n; const char *const *meta; const char *phrase; } cases[] = {
        {{{"a", 1, shape, v}, {"a", 1, shape, v}}, 2, NULL, "'a' is used twice"},
        {{{long_name, 1, shape, v}}, 1, NULL, "shorter than 128 bytes"},
        {{{"__metadata__", 1, shape, v}}, 1, NULL, "not \"__metadata__\""},
        {{{"bad\xff", 1, shape, v}}, 1, NULL, "valid UTF-8"},
        {{{NULL, 1, shape, v}}, 1, NULL, "has no name"},
        {{{"a", 1, negative, v}}, 1, NULL, "shape[0] is -2"},
        {{{"a", 9, nine, v}}, 1, NULL, "ndim 9"},
        {{{"a", 1, NULL, v}}, 1, NULL, "shape is missing"},
        {{{"a", 1, shape, NULL}}, 1, NULL, "has no data"},
        {{{"a", 1, shape, v}}, 1, (const char *const[]){"k", NULL}, "has no value"},
        {{{"a", 1, shape, v}}, -1, NULL, "-1 tensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pt_err err = {0};
        int rc = pt_st_write(path, cases[i].t, cases[i].n, cases[i].meta, &err);
        int ok = rc == PT_EINPUT && strstr(err.msg, cases[i].phrase) != NULL;
        if (!ok)
            printf("\n  writer case %zu: rc %d: %s\n", i, rc, err.msg);
        CU_ASSERT(ok);
        CU_ASSERT(count_entries(dir) == 0);
    }
    free(path);
    free_temp_dir(dir);
}

typedef struct bad_header {
    const char *json;
    size_t data_len;
    const char *phrase;
} bad_header;

#define T8 "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"
static const bad_header bad_headers[] = {
    {"{\"t\":", 8, "header (5 bytes, from byte 8): line 1, column 5"},
    {"[]", 0, "the header is an array, not a JSON object"},
    {"{\"t\":5}", 0, "tensor 't': its entry is a number, not an object"},
    {"{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 't': has no \"dtype\""},
    {"{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "has no \"shape\""},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "has no \"data_offsets\""},
    {"{\"t\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     "\"dtype\" is a number, not a string"},
    {"{\"t\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'F31'"},
    /* \u0000 is valid JSON (Python writes it) and kept; a dtype holding
     * one is no dtype (as a C string it would read as "F32") */
    {"{\"t\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     "unknown dtype 'F32' (then a NUL character)"},
    {"{\"t\":{\"dtype\":\"VERYLONGTYPE\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     "unknown dtype 'VERYLONGTYPE'"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
     "\"shape\" is a number, not an array"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
     "shape[0]: 2 is written as a real number, not an integer"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
     "shape[0]: expected an integer, found a string"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
     "shape[0] is -2; it must be >= 0"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
     "\"shape\" has 9 dimensions; at most 8"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
     "\"data_offsets\":[0,8]}}", 8, "shape [4294967296, 4294967296, 4294967296] is too large"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
     "\"data_offsets\" has 1 elements; it must have 2"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "has 3 elements"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8,
     "\"data_offsets\" is an object, not an array"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,8]}}", 8,
     "data_offsets[0] is -1"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8e0]}}", 8,
     "data_offsets[1]: 8 is written as a real number, not an integer"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}", 8,
     "too big integer"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8,
     "data_offsets [8, 0]: begin is after end"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
     "data_offsets end 16 is past the end of the data section (8 bytes)"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     "data_offsets [0, 8] span 8 bytes but shape [3] of F32 needs 12"},
    {"{\"t\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     "span 8 bytes but shape [2] of F16 needs 4"},
    {"{\"a\":{" T8 "},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
     "tensors 'a' and 'b' overlap: bytes [0, 8) and [4, 12)"},
    {"{\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[5,8]},\"a\":{" T8 "}}", 8,
     "tensors 'a' and 'b' overlap"},
    /* the data section must be tiled: no gap before, between or after the tensors */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
     "bytes [4, 8) of the data section belong to no tensor (the next, 'b', begins at 8)"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
     "bytes [0, 4) of the data section belong to no tensor (the next, 't', begins at 4)"},
    {"{\"t\":{" T8 "}}", 12,
     "the last 4 bytes of the data section (from byte 8, after tensor 't') belong to no tensor"},
    {"{\"__metadata__\":{}}", 4, "the last 4 bytes of the data section (from byte 0) belong"},
    {"{\"t\":{" T8 "},\"t\":{" T8 "}}", 8, "duplicate object key near '\"t\"'"},
    {"{\"__metadata__\":[],\"t\":{" T8 "}}", 8, "\"__metadata__\" is an array, not an object"},
    {"{\"__metadata__\":{\"k\":1},\"t\":{" T8 "}}", 8,
     "\"__metadata__\" value of 'k' is a number, not a string"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate object key near '\"__metadata__\"'"},
    {"", 8, "line 1, column 0 (byte 0)"},
};

static void test_hand_built_defects(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "forged.safetensors");
    unsigned char zeros[64] = {0};

    /* sanity: the base entry and a few legal oddities are accepted */
    const char *good[] = {
        "{\"t\":{" T8 "}}",
        "{\"t\":{" T8 ",\"extra\":true}}", /* unknown fields are ignored */
        "{\"t\":{" T8 "},\"e\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[4,4]}}",
        "{\"t\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}", /* I64 scalar */
        /* the most dimensions there may be (9: bad_headers) */
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}",
        " {\"t\":{" T8 "}}   ",
        /* a metadata value holding \u0000: valid JSON, and read as absent */
        "{\"__metadata__\":{\"k\":\"a\\u0000\",\"j\":\"b\"},\"t\":{" T8 "}}",
        /* a key holding \u0000 (jansson holds none): read with U+FFFD there */
        "{\"a\\u0000b\":{" T8 "}}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        write_st(path, strlen(good[i]), good[i], zeros, 8);
        pt_st_file *f;
        pt_err err = {0};
        int rc = open_st(path, &f, &err);
        if (rc)
            printf("\n  good case %zu: %s\n", i, err.msg);
        CU_ASSERT(rc == 0);
        if (rc == 0 && strstr(good[i], "a\\u0000b"))
            CU_ASSERT(pt_st_find(f, "a\xEF\xBF\xBD" "b") == 0);
        if (rc == 0 && strstr(good[i], "__metadata__")) {
            CU_ASSERT(pt_st_metadata(f, "k") == NULL);
            CU_ASSERT(pt_st_metadata(f, "j") && strcmp(pt_st_metadata(f, "j"), "b") == 0);
        }
        pt_st_close(f);
    }

    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        const bad_header *c = &bad_headers[i];
        write_st(path, strlen(c->json), c->json, zeros, c->data_len);
        pt_st_file *f;
        pt_err err = {0};
        int rc = open_st(path, &f, &err);
        int ok = rc == PT_EINPUT && strstr(err.msg, c->phrase) && strstr(err.msg, path);
        if (!ok)
            printf("\n  case %zu: rc %d: %s\n", i, rc, err.msg);
        CU_ASSERT(ok);
        if (!rc)
            pt_st_close(f);
    }
    /* a name of exactly 128 bytes: one too long for pt_st_entry.name */
    char name[129], json[512];
    memset(name, 'n', 128);
    name[128] = '\0';
    snprintf(json, sizeof json, "{\"%s\":{" T8 "}}", name);
    write_st(path, strlen(json), json, zeros, 8);
    pt_st_file *f;
    pt_err err = {0};
    CU_ASSERT(open_st(path, &f, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "is 128 bytes; names must be shorter than 128 bytes") != NULL);
    name[127] = '\0'; /* 127 is fine */
    snprintf(json, sizeof json, "{\"%s\":{" T8 "}}", name);
    write_st(path, strlen(json), json, zeros, 8);
    CU_ASSERT_FATAL(open_st(path, &f, &err) == 0);
    CU_ASSERT(pt_st_find(f, name) == 0);
    pt_st_close(f);
    free(path);
    free_temp_dir(dir);
}

/* A header of 1.4 million members that are no tensors ("a":0): refused
 * for its first member, naming it, under an address-space limit that holds
 * the parsed JSON but not a table of an entry per member (about 300 MB,
 * which the reader took before it looked at any: "out of memory", exit 1
 * instead of the file's fault). In a child with RLIMIT_AS; not under
 * AddressSanitizer, which reserves far more address space than any limit
 * here would leave. */
static void test_many_members_that_are_no_tensors(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return;
#endif
#endif
    char *dir = make_temp_dir();
    char *path = join_path(dir, "many.safetensors");
    enum { MEMBERS = 1400000 };
    char *json = malloc((size_t)MEMBERS * 12 + 16);
    CU_ASSERT_FATAL(json != NULL);
    size_t n = 0;
    json[n++] = '{';
    for (int i = 0; i < MEMBERS; i++) {
        char key[8];
        int k = 0;
        for (int v = i; k == 0 || v > 0; v /= 36)
            key[k++] = "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36];
        n += (size_t)sprintf(json + n, "%s\"%.*s\":0", i ? "," : "", k, key);
    }
    json[n++] = '}';
    json[n] = '\0';
    write_st(path, n, json, NULL, 0);
    free(json);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        /* what the process maps now, plus room for the parsed header */
        long pages = 0;
        FILE *statm = fopen("/proc/self/statm", "r");
        if (!statm || fscanf(statm, "%ld", &pages) != 1)
            _exit(3);
        fclose(statm);
        const rlim_t limit = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)400 << 20);
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
        pt_st_file *f = NULL;
        pt_err err = {0};
        const int rc = pt_st_open(&f, path, &err);
        if (rc != PT_EINPUT || !strstr(err.msg, "tensor '0'")) {
            fprintf(stderr, "\n  rc %d: %s\n", rc, err.msg);
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    CU_ASSERT_FATAL(waitpid(pid, &status, 0) == pid);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(path);
    free_temp_dir(dir);
}

static void test_header_length_field(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "len.safetensors");
    const char *json = "{\"t\":{" T8 "}}";
    unsigned char zeros[8] = {0};
    struct { uint64_t len; const char *phrase; } cases[] = {
        {UINT64_MAX, "header length 18446744073709551615 is larger than the limit of 16777216"},
        {16777217, "larger than the limit"},
        {16777216, "runs past the end of the file"},
        {strlen(json) + 9, "runs past the end of the file"},
        {strlen(json) - 1, "'}' expected near end of file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(path, cases[i].len, json, zeros, 8);
        pt_st_file *f;
        pt_err err = {0};
        CU_ASSERT(open_st(path, &f, &err) == PT_EINPUT);
        if (!strstr(err.msg, cases[i].phrase))
            printf("\n  length case %zu: %s\n", i, err.msg);
        CU_ASSERT(strstr(err.msg, cases[i].phrase) != NULL);
    }
    CU_ASSERT_FATAL(write_raw(path, "\x10\0\0\0\0", 5) == 0);
    pt_st_file *f;
    pt_err err = {0};
    CU_ASSERT(open_st(path, &f, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "5 bytes is too short") != NULL);
    char *missing = join_path(dir, "missing");
    CU_ASSERT(open_st(missing, &f, &err) == PT_ESYS);
    CU_ASSERT(open_st(dir, &f, &err) == PT_EINPUT);
    free(missing);
    free(path);
    free_temp_dir(dir);
}

/* Writes a small valid file and returns its bytes. */
static unsigned char *small_file(const char *path, size_t *n)
{
    float a[3] = {1, 2, 3}, s = 4;
    int64_t shape[] = {3};
    pt_st_tensor t[] = {{"a", 1, shape, a}, {"s", 0, NULL, &s}};
    const char *meta[] = {"k", "v", NULL};
    pt_err err = {0};
    CU_ASSERT_FATAL(pt_st_write(path, t, 2, meta, &err) == 0);
    unsigned char *bytes = read_raw(path, n);
    CU_ASSERT_FATAL(bytes != NULL);
    return bytes;
}

static void test_truncation_at_every_length(void)
{
    char *dir = make_temp_dir();
    char *path = join_path(dir, "full.safetensors");
    char *cut = join_path(dir, "cut.safetensors");
    size_t n;
    unsigned char *full = small_file(path, &n);
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        CU_ASSERT_FATAL(write_raw(cut, full, len) == 0);
        pt_st_file *f;
        pt_err err = {0};
        refused += open_st(cut, &f, &err) == PT_EINPUT && err.msg[0];
    }
    CU_ASSERT(refused == (int)n);
    free(full);
    free(cut);
    free(path);
    free_temp_dir(dir);
}

static void test_every_single_byte_change_is_safe(void)
{
    /* no checksum here, so some changes are legal files; none may crash, and
     * whatever opens must read back within its own bounds */
    char *dir = make_temp_dir();
    char *path = join_path(dir, "full.safetensors");
    char *bad = join_path(dir, "bad.safetensors");
    size_t n;
    unsigned char *full = small_file(path, &n);
    int opened = 0, refused = 0;
    for (size_t pos = 0; pos < n; pos++) {
        full[pos] ^= 0x41;
        CU_ASSERT_FATAL(write_raw(bad, full, n) == 0);
        full[pos] ^= 0x41;
        pt_st_file *f;
        pt_err err = {0};
        int rc = open_st(bad, &f, &err);
        refused += rc == PT_EINPUT;
        if (rc)
            continue;
        opened++;
        for (int i = 0; i < pt_st_count(f); i++) {
            uint64_t numel = pt_st_numel(pt_st_entry_at(f, i));
            float *out = malloc((size_t)numel * sizeof *out + 1);
            int r = pt_st_read_f32(f, i, out, (size_t)numel, &err);
            CU_ASSERT(r == 0 || r == PT_EINPUT);
            free(out);
        }
        pt_st_close(f);
    }
    CU_ASSERT(opened + refused == (int)n);
    CU_ASSERT(refused > 0);
    free(full);
    free(bad);
    free(path);
    free_temp_dir(dir);
}

static void test_conversions(void)
{
    static const uint16_t f16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00,
                                   0xFC00, 0x7E00, 0x8000, 0x3555, 0x3800};
    const float f16_want[] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-8f,
                              6.0975551605224609375e-5f, 6.103515625e-5f, INFINITY, -INFINITY,
                              NAN, -0.0f, 0.333251953125f, 0.5f};
    static const uint16_t bf16[] = {0x3F80, 0xC040, 0x4049, 0x7F80, 0x0001, 0xFF80, 0x7FC0,
                                    0x8000};
    const float bf16_want[] = {1.0f, -3.0f, 3.140625f, INFINITY, bits_float(0x00010000u),
                               -INFINITY, NAN, -0.0f};
    const double f64[] = {1.0 / 3.0, 1e300, -1e300, 1e-50, 0.1, 0x1p-140, -2.5};
    const float f64_want[] = {(float)(1.0 / 3.0), INFINITY, -INFINITY, 0.0f, 0.1f, 0x1p-140f,
                              -2.5f};
    enum { N16 = 12, NB = 8, N64 = 7 };
    unsigned char data[2 * N16 + 2 * NB + 8 * N64 + 4];
    size_t at = 0;
    for (int i = 0; i < N16; i++, at += 2)
        data[at] = (unsigned char)f16[i], data[at + 1] = (unsigned char)(f16[i] >> 8);
    for (int i = 0; i < NB; i++, at += 2)
        data[at] = (unsigned char)bf16[i], data[at + 1] = (unsigned char)(bf16[i] >> 8);
    for (int i = 0; i < N64; i++, at += 8) {
        uint64_t bits;
        memcpy(&bits, &f64[i], 8);
        pt_put_le64(data + at, bits);
    }
    pt_put_le32(data + at, 0x3FC00000u); /* 1.5f */
    const char *json = "{\"h\":{\"dtype\":\"F16\",\"shape\":[12],\"data_offsets\":[0,24]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[24,40]},"
                       "\"d\":{\"dtype\":\"F64\",\"shape\":[7,1],\"data_offsets\":[40,96]},"
                       "\"f\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[96,100]},"
                       "\"i\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[100,100]}}";
    char *dir = make_temp_dir();
    char *path = join_path(dir, "types.safetensors");
    write_st(path, strlen(json), json, data, sizeof data);
    pt_st_file *f;
    pt_err err = {0};
    CU_ASSERT_FATAL(open_st(path, &f, &err) == 0);
    float out[N16];
    CU_ASSERT_FATAL(pt_st_read_f32(f, pt_st_find(f, "h"), out, N16, &err) == 0);
    for (int i = 0; i < N16; i++) {
        int ok = isnan(f16_want[i]) ? isnan(out[i]) : same_bits(out[i], f16_want[i]);
        if (!ok)
            printf("\n  F16 0x%04x: got %.9g, want %.9g\n", f16[i], out[i], f16_want[i]);
        CU_ASSERT(ok);
    }
    CU_ASSERT_FATAL(pt_st_read_f32(f, pt_st_find(f, "b"), out, NB, &err) == 0);
    for (int i = 0; i < NB; i++)
        CU_ASSERT(isnan(bf16_want[i]) ? isnan(out[i]) : same_bits(out[i], bf16_want[i]));
    CU_ASSERT_FATAL(pt_st_read_f32(f, pt_st_find(f, "d"), out, N64, &err) == 0);
    for (int i = 0; i < N64; i++)
        CU_ASSERT(same_bits(out[i], f64_want[i]));
    CU_ASSERT(pt_st_read_f32(f, pt_st_find(f, "f"), out, 1, &err) == 0 && out[0] == 1.5f);
    CU_ASSERT(pt_st_read_f32(f, pt_st_find(f, "i"), out, 0, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "dtype I8 cannot be read as float") != NULL);

    /* the file shrinking after open is an error on read, not a crash */
    CU_ASSERT_FATAL(truncate(path, 8 + (off_t)strlen(json) + 50) == 0);
    CU_ASSERT(pt_st_read_f32(f, pt_st_find(f, "d"), out, N64, &err) == PT_EINPUT);
    CU_ASSERT(strstr(err.msg, "unexpected end of file") != NULL);
    pt_st_close(f);
    free(path);
    free_temp_dir(dir);
}

static const pt_test safetensors_tests[] = {
    {"round_trip", test_round_trip},
    {"writer_refuses_bad_arguments", test_writer_refuses_bad_arguments},
    {"hand_built_defects", test_hand_built_defects},
    {"many_members_that_are_no_tensors", test_many_members_that_are_no_tensors},
    {"header_length_field", test_header_length_field},
    {"truncation_at_every_length", test_truncation_at_every_length},
    {"every_single_byte_change_is_safe", test_every_single_byte_change_is_safe},
    {"conversions", test_conversions},
    {NULL, NULL}};

static const pt_test_suite suites[] = {{"safetensors", safetensors_tests}, {NULL, NULL}};
