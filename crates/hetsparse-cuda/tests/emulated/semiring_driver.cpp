// Runs kernels-cuda/semiring.cu's kernels on the CPU (cuda_on_cpu.h) for the cases read from
// standard input, as the CUDA backend chains them (crates/hetsparse-cuda/src/spgemm/semiring.rs),
// and writes each C to standard output; tests/semiring_emulated.rs checks them against the
// reference backend. The unmasked structure, which the backend takes from the plus-times
// pipeline, is computed here on the host.
//
// A case: `semiring type mode lanes grid block heavy piece shared_cols launch_heavy` (the
// backend's constants for heavy rows, small here so that small matrices have heavy rows;
// launch_heavy 0 leaves the heavy rows' kernels out, a mutation the test must catch), then A
// and B as `nrows ncols nnz`, offsets, columns and values, then for mode `mask` or `complement`
// the mask as `nrows ncols nnz`, offsets and columns. Its output: `nnz`, C's offsets, columns
// and values, then the products of the unmasked product, the multiply-adds counted and the
// heavy rows' pieces.
#include <math.h>

#include "cuda_on_cpu.h"

// The dynamic shared memory of the block that runs (one at a time).
alignas(16) unsigned char hs_smem[48 * 1024];

#include "semiring.cu"

#include <dlfcn.h>

#include <cstdio>
#include <iostream>
#include <set>
#include <string>

typedef void (*numeric_fn)(u64, u32, const u64*, const u64*, const u32*, const void*, const u64*,
                           const u32*, const void*, const u64*, const u32*, void*, void*, u64*);
typedef void (*heavy_fn)(u32, const u64*, const u64*, u64, u64, const u64*, const u32*,
                         const void*, const u64*, const u32*, const void*, const u64*, const u32*,
                         void*, u64*);

struct Pattern {
    u64 nrows = 0, ncols = 0, nnz = 0;
    std::vector<u64> off;
    std::vector<u32> col;
};

static Pattern read_pattern(std::istream& in) {
    Pattern p;
    in >> p.nrows >> p.ncols >> p.nnz;
    p.off.resize(p.nrows + 1);
    p.col.resize(p.nnz);
    for (auto& o : p.off) in >> o;
    for (auto& c : p.col) in >> c;
    return p;
}

// Values read and written as text: floats as doubles, f16/bf16 through f32, bool as 0/1.
template <class T> struct io;
template <> struct io<float> {
    static float read(std::istream& in) { double d; in >> d; return (float)d; }
    static void write(float v) { printf(" %.9g", (double)v); }
};
template <> struct io<double> {
    static double read(std::istream& in) { double d; in >> d; return d; }
    static void write(double v) { printf(" %.17g", v); }
};
template <> struct io<hs_f16> {
    static hs_f16 read(std::istream& in) { double d; in >> d; return {hs_f32_to_f16((float)d)}; }
    static void write(hs_f16 v) { printf(" %.9g", (double)hs_f16_to_f32(v.bits)); }
};
template <> struct io<hs_bf16> {
    static hs_bf16 read(std::istream& in) { double d; in >> d; return {hs_f32_to_bf16((float)d)}; }
    static void write(hs_bf16 v) { printf(" %.9g", (double)hs_bf16_to_f32(v.bits)); }
};
template <> struct io<int> {
    static int read(std::istream& in) { long long v; in >> v; return (int)v; }
    static void write(int v) { printf(" %d", v); }
};
template <> struct io<i64> {
    static i64 read(std::istream& in) { long long v; in >> v; return v; }
    static void write(i64 v) { printf(" %lld", v); }
};
template <> struct io<u32> {
    static u32 read(std::istream& in) { unsigned long long v; in >> v; return (u32)v; }
    static void write(u32 v) { printf(" %u", v); }
};
template <> struct io<u64> {
    static u64 read(std::istream& in) { unsigned long long v; in >> v; return v; }
    static void write(u64 v) { printf(" %llu", v); }
};
template <> struct io<hs_bool> {
    static hs_bool read(std::istream& in) { int v; in >> v; return {(unsigned char)v}; }
    static void write(hs_bool v) { printf(" %d", (int)v.v); }
};

static std::vector<u64> exclusive_scan(const std::vector<u64>& counts) {
    std::vector<u64> off(counts.size() + 1, 0);
    for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
    return off;
}

template <class T>
static int run_case(std::istream& in, const std::string& semiring, const std::string& type,
                    const std::string& mode, u32 g, unsigned grid, unsigned block, u64 heavy,
                    u64 piece, u64 shared_cols, bool launch_heavy) {
    Pattern a = read_pattern(in);
    std::vector<T> a_val(a.nnz);
    for (auto& v : a_val) v = io<T>::read(in);
    Pattern b = read_pattern(in);
    std::vector<T> b_val(b.nnz);
    for (auto& v : b_val) v = io<T>::read(in);
    Pattern m;
    if (mode != "none") m = read_pattern(in);
    const u64 n = a.nrows;

    // The heavy rows' pieces, as the backend finds them (for the mask's hits, and for the
    // values where the type has a heavy kernel).
    u64 counts[3] = {0, 0, 0};
    std::vector<u64> pieces(n, 0);
    hs_launch(grid, block, [&] {
        sr_row_pieces(n, g, a.off.data(), a.col.data(), b.off.data(), heavy, piece, block / 32,
                      pieces.data(), counts);
    });
    const u64 products = counts[0];
    // The heavy kernels' lanes per entry of A: the heavy rows' mean products per entry, a
    // power of two up to a warp (the backend's heavy_lanes).
    u64 mean = counts[2] > 0 ? (counts[1] + counts[2] - 1) / counts[2] : 1;
    u32 heavy_g = 1;
    while (heavy_g < 32 && heavy_g < mean) heavy_g <<= 1;
    std::vector<u64> piece_off = exclusive_scan(pieces);
    const u64 npieces = piece_off[n];
    std::vector<u64> piece_row(npieces);
    hs_launch(grid, block, [&] { sr_piece_rows(n, piece_off.data(), piece_row.data()); });
    if (shared_cols * 4 > sizeof(hs_smem)) {
        fprintf(stderr, "shared_cols %llu beyond the emulated shared memory\n",
                (unsigned long long)shared_cols);
        return 2;
    }

    // C's structure.
    Pattern c;
    c.nrows = n;
    c.ncols = b.ncols;
    if (mode == "mask") {
        std::vector<unsigned char> hit(m.nnz, 0);
        std::vector<u64> counts(n, 0);
        hs_launch(grid, block, [&] {
            sr_mask_hits(n, g, piece_off.data(), a.off.data(), a.col.data(), b.off.data(),
                         b.col.data(), m.off.data(), m.col.data(), hit.data());
        });
        if (npieces > 0 && launch_heavy) {
            hs_launch(grid, block, [&] {
                sr_mask_hits_heavy(heavy_g, piece_off.data(), piece_row.data(), npieces,
                                   shared_cols, a.off.data(), a.col.data(), b.off.data(),
                                   b.col.data(), m.off.data(), m.col.data(), hit.data());
            });
        }
        hs_launch(grid, block, [&] { sr_hits_count(n, g, m.off.data(), hit.data(), counts.data()); });
        c.off = exclusive_scan(counts);
        c.nnz = c.off[n];
        c.col.resize(c.nnz);
        hs_launch(grid, block, [&] {
            sr_hits_compact(n, g, m.off.data(), m.col.data(), hit.data(), c.off.data(), c.col.data());
        });
    } else {
        // The unmasked structure (the plus-times pipeline's on the GPU).
        Pattern full;
        full.off.push_back(0);
        for (u64 i = 0; i < n; ++i) {
            std::set<u32> cols;
            for (u64 q = a.off[i]; q < a.off[i + 1]; ++q) {
                u32 k = a.col[q];
                for (u64 r = b.off[k]; r < b.off[k + 1]; ++r) cols.insert(b.col[r]);
            }
            full.col.insert(full.col.end(), cols.begin(), cols.end());
            full.off.push_back(full.col.size());
        }
        if (mode == "complement") {
            std::vector<u64> counts(n, 0);
            hs_launch(grid, block, [&] {
                sr_filter_count(n, g, 0, full.off.data(), full.col.data(), m.off.data(), m.col.data(),
                                counts.data());
            });
            c.off = exclusive_scan(counts);
            c.nnz = c.off[n];
            c.col.resize(c.nnz);
            hs_launch(grid, block, [&] {
                sr_filter_compact(n, g, 0, full.off.data(), full.col.data(), m.off.data(),
                                  m.col.data(), c.off.data(), c.col.data());
            });
        } else {
            c.off = full.off;
            c.col = full.col;
            c.nnz = full.col.size();
        }
    }

    // Values, with the accumulator in C's values where the backend puts it there.
    std::string name = "sr_numeric_" + semiring + "_" + type;
    numeric_fn f = (numeric_fn)dlsym(RTLD_DEFAULT, name.c_str());
    if (!f) {
        fprintf(stderr, "no kernel %s\n", name.c_str());
        return 2;
    }
    // The heavy rows' kernel, where the type has one (its accumulator is C's values).
    std::string heavy_name = "sr_numeric_heavy_" + semiring + "_" + type;
    heavy_fn hf = (heavy_fn)dlsym(RTLD_DEFAULT, heavy_name.c_str());
    typedef typename sr_scalar<T>::acc Acc;
    std::vector<T> c_val(c.nnz);
    std::vector<Acc> acc;
    bool separate = sizeof(Acc) != sizeof(T) || type == "bool";
    if (separate) acc.resize(c.nnz);
    if (hf && separate) {
        fprintf(stderr, "%s has a separate accumulator\n", heavy_name.c_str());
        return 2;
    }
    void* acc_ptr = separate ? (void*)acc.data() : (void*)c_val.data();
    u64 work = 0;
    bool masked = mode != "none";
    bool split = hf && npieces > 0;
    if (c.nnz > 0) {
        hs_launch(grid, block, [&] {
            f(n, g, split ? piece_off.data() : nullptr, a.off.data(), a.col.data(), a_val.data(),
              b.off.data(), b.col.data(), b_val.data(), c.off.data(), c.col.data(), acc_ptr,
              c_val.data(), masked ? &work : nullptr);
        });
        if (split && launch_heavy) {
            hs_launch(grid, block, [&] {
                hf(heavy_g, piece_off.data(), piece_row.data(), npieces, shared_cols,
                   a.off.data(), a.col.data(), a_val.data(), b.off.data(), b.col.data(),
                   b_val.data(), c.off.data(), c.col.data(), c_val.data(),
                   masked ? &work : nullptr);
            });
        }
    }
    printf("%llu\n", (unsigned long long)c.nnz);
    for (auto o : c.off) printf(" %llu", (unsigned long long)o);
    printf("\n");
    for (auto x : c.col) printf(" %u", x);
    printf("\n");
    for (auto& v : c_val) io<T>::write(v);
    printf("\n%llu %llu %llu\n", (unsigned long long)products, (unsigned long long)work,
           (unsigned long long)npieces);
    fflush(stdout);
    return 0;
}

int main() {
    std::string semiring, type, mode;
    u32 g;
    unsigned grid, block;
    u64 heavy, piece, shared_cols;
    int launch_heavy;
    while (std::cin >> semiring >> type >> mode >> g >> grid >> block >> heavy >> piece >>
           shared_cols >> launch_heavy) {
        int rc;
#define CASE_ARGS \
    std::cin, semiring, type, mode, g, grid, block, heavy, piece, shared_cols, launch_heavy != 0
        if (type == "f32") rc = run_case<float>(CASE_ARGS);
        else if (type == "f64") rc = run_case<double>(CASE_ARGS);
        else if (type == "f16") rc = run_case<hs_f16>(CASE_ARGS);
        else if (type == "bf16") rc = run_case<hs_bf16>(CASE_ARGS);
        else if (type == "i32") rc = run_case<int>(CASE_ARGS);
        else if (type == "i64") rc = run_case<i64>(CASE_ARGS);
        else if (type == "u32") rc = run_case<u32>(CASE_ARGS);
        else if (type == "u64") rc = run_case<u64>(CASE_ARGS);
        else if (type == "bool") rc = run_case<hs_bool>(CASE_ARGS);
        else {
            fprintf(stderr, "unknown type %s\n", type.c_str());
            return 2;
        }
        if (rc != 0) return rc;
    }
    return 0;
}
