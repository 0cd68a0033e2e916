//! OpenCL C sources (in `kernels-opencl/`, embedded) and the prelude that specialises them to a
//! scalar type and a semiring.

use hetsparse_core::{Error, Operation, Result, ScalarType, SemiringKind, SpgemmAlgorithm};

use crate::device::DeviceDescription;
use crate::BACKEND;

const COMMON: &str = include_str!("../../../kernels-opencl/common.cl");
const SCAN: &str = include_str!("../../../kernels-opencl/scan.cl");
const SORT: &str = include_str!("../../../kernels-opencl/sort.cl");
const ESC: &str = include_str!("../../../kernels-opencl/esc.cl");
const SPMV: &str = include_str!("../../../kernels-opencl/spmv.cl");
const BSR: &str = include_str!("../../../kernels-opencl/bsr.cl");
const MASKED: &str = include_str!("../../../kernels-opencl/masked.cl");

/// Work-items per group of the lane-based kernels (CSR vector, ELLR-T).
pub(crate) const LANE_WG: usize = 256;
/// Work-items per row in the CSR vector kernel.
pub(crate) const VEC_LANES: usize = 32;
/// Work-items per row in the ELLR-T kernels (Ortega's T).
pub(crate) const ELL_T: usize = 4;
/// Columns of C each ELLR-T SpMM work-item keeps (Ortega's L_c).
pub(crate) const ELL_LC: usize = 4;
/// Work-items per group of the local tile sort.
pub(crate) const SORT_WG: usize = 256;
/// Elements per group of the scan and compression kernels (SCAN_WG · SCAN_ITEMS in scan.cl).
pub(crate) const SCAN_BLOCK: usize = 1024;
/// Work-items per group of the scan and compression kernels.
pub(crate) const SCAN_WG: usize = 256;
/// Work-group size of the expansion (`EXP_WG` in esc.cl).
pub(crate) const EXP_WG: usize = 256;
/// Products each expansion work-group makes (`EXP_CHUNK` in esc.cl).
pub(crate) const EXP_CHUNK: usize = EXP_WG * 8;
/// Work-group size of the numeric phase's long rows (`NUM_WG` in esc.cl): one group per row.
pub(crate) const NUM_WG: usize = 256;
/// Products above which a row of a planned product is no longer short: its numeric phase
/// leaves the one-work-item kernel (`spgemm_numeric_rows`, where each product is a bisection
/// over C's row in global memory and the work-item's neighbours wait for its longest row) for
/// [`MEDIUM_LANES`] work-items (`spgemm_numeric_medium`). 32 bounds a short row's serial walk
/// (and so the tail its warp waits for) at 32 products, and keeps rows of a handful of
/// products, whose 32 lanes would mostly idle through the medium kernel's staging and
/// barriers, on one work-item.
pub(crate) const MEDIUM_ROW_PRODUCTS: u32 = 32;
/// Products above which a row of a planned product is long: its numeric phase runs on
/// work-groups (`spgemm_numeric_segments`, one per segment of the row) instead of
/// [`MEDIUM_LANES`] work-items. Was 256 before the medium tier existed; rows up to 512 products
/// have at most 512 entries in C, so several of them still share a medium work-group's local
/// memory (about 380 entries each on a power-law product, R-MAT scale 15) and each lane makes
/// at most ~16 products, while longer rows (their C rows average over 700 entries there) would
/// leave most lanes of a medium group idle, and a work-group of their own keeps all 256 busy.
pub(crate) const LONG_ROW_PRODUCTS: u32 = 512;
/// Work-items per row of the numeric phase's medium rows (`MED_LANES` in esc.cl): a warp on
/// NVIDIA, so a row's lanes branch together and rows of one group diverge only across warps.
pub(crate) const MEDIUM_LANES: usize = 32;
/// Medium rows per work-group at most (`NUM_WG / MED_LANES` in esc.cl).
pub(crate) const MEDIUM_ROWS: usize = NUM_WG / MEDIUM_LANES;

/// A semiring as OpenCL C macros over the accumulator type: `ADD(a, b)`, `MUL(a, b)`,
/// `MUL_AT(a, b, k)` (the product knowing the inner index `k`, the column of A's entry and the
/// row of B's), `ZERO` (the additive identity), `ONE` and `IS_ZERO(v)`. Each is the OpenCL
/// form of the reference's [`hetsparse_core::semiring`] type of the same name, so that the
/// device computes what the reference does: `min`/`max` are `fmin`/`fmax` (NaN loses to a
/// number, as `f32::min` does), "any" keeps the last product of a run as the reference keeps
/// the last in its order, and `any_secondi` gives `k` as a value (`Semiring::mul_at`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelSemiring(SemiringKind);

impl KernelSemiring {
    /// Plain arithmetic, what every program but the semiring ones is built with.
    pub(crate) const PLUS_TIMES: KernelSemiring = KernelSemiring(SemiringKind::PlusTimes);

    /// The kernels' form of `kind` over `ty`; [`Error::Unsupported`] where the semiring is
    /// not defined over the type ([`SemiringKind::is_defined_for`]).
    pub(crate) fn new(kind: SemiringKind, ty: ScalarType) -> Result<Self> {
        let why = if !kind.is_defined_for(ty) {
            format!("the {kind} semiring is not defined over {ty}")
        } else if KernelSemiring(kind).macros("").is_none() {
            format!("the {kind} semiring has no OpenCL kernels yet")
        } else {
            return Ok(KernelSemiring(kind));
        };
        Err(Error::Unsupported {
            backend: BACKEND,
            op: Operation::Spgemm(SpgemmAlgorithm::Esc),
            scalar: ty,
            detail: Some(why),
        })
    }

    /// `(ADD, MUL, ZERO)` of this semiring, `times` being the accumulator's `×`; `None` for a
    /// semiring the kernels do not know (one added to [`SemiringKind`] later). `+`, `×`,
    /// `min`, `max` and the bounds are the type's macros (`PLUS`, `MINOF`, `ACC_MAX`, ... of
    /// [`type_defines`]): wrapping for the integers, `or` and `and` for `bool`, `fmin`/`fmax`
    /// and ±∞ for the floats.
    fn macros(self, times: &'static str) -> Option<(&'static str, &'static str, &'static str)> {
        use SemiringKind as K;
        Some(match self.0 {
            K::PlusTimes => ("PLUS((a), (b))", times, "((ACC)(0))"),
            K::PlusPair => ("PLUS((a), (b))", "ONE", "((ACC)(0))"),
            K::PlusFirst => ("PLUS((a), (b))", "(a)", "((ACC)(0))"),
            K::PlusSecond => ("PLUS((a), (b))", "(b)", "((ACC)(0))"),
            // "any" of a run: its last product, as the reference keeps its last.
            K::AnyPair => ("(b)", "ONE", "((ACC)(0))"),
            K::AnySecondI => ("(b)", "((ACC)(0))", "((ACC)(0))"),
            K::MinPlus => ("MINOF((a), (b))", "PLUS((a), (b))", "ACC_MAX"),
            K::MaxPlus => ("MAXOF((a), (b))", "PLUS((a), (b))", "ACC_MIN"),
            K::MinFirst => ("MINOF((a), (b))", "(a)", "ACC_MAX"),
            K::MinSecond => ("MINOF((a), (b))", "(b)", "ACC_MAX"),
            K::MaxTimes => ("MAXOF((a), (b))", "TIMES((a), (b))", "ACC_MIN"),
            K::MaxMin => ("MAXOF((a), (b))", "MINOF((a), (b))", "ACC_MIN"),
            // "Is not zero" as 1 or 0 (NaN is not zero), as the reference's LorLand.
            K::LorLand => (
                "(((a) != 0 || (b) != 0) ? (ACC)(1) : (ACC)(0))",
                "(((a) != 0 && (b) != 0) ? (ACC)(1) : (ACC)(0))",
                "((ACC)(0))",
            ),
            _ => return None,
        })
    }

    /// The macros, for a complex accumulator (`float2`/`double2`) when `complex`. Only the
    /// semirings that need `+` and `1` are defined over complex types ([`KernelSemiring::new`]
    /// refuses the others), so `fmin`/`fmax` and the comparisons only ever see real values.
    fn defines(self, complex: bool) -> String {
        let (one, is_zero, times) = if complex {
            (
                "((ACC)(1, 0))",
                "((v).x == 0 && (v).y == 0)",
                "cmul((a), (b))",
            )
        } else {
            ("((ACC)(1))", "((v) == (ACC)(0))", "TIMES((a), (b))")
        };
        // `new` made sure the semiring is one the kernels know.
        let (add, mul, zero) =
            self.macros(times)
                .unwrap_or(("PLUS((a), (b))", times, "((ACC)(0))"));
        let mul_at = if self.0 == SemiringKind::AnySecondI {
            "((ACC)(k))"
        } else {
            "MUL(a, b)"
        };
        let mut s = String::new();
        if complex {
            s.push_str(
                "inline ACC cmul(ACC a, ACC b) { return (ACC)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }\n",
            );
        }
        s.push_str(&format!(
            "#define ONE {one}\n#define ZERO {zero}\n#define IS_ZERO(v) {is_zero}\n\
             #define ADD(a, b) {add}\n#define MUL(a, b) {mul}\n#define MUL_AT(a, b, k) {mul_at}\n"
        ));
        s
    }
}

/// Bytes of the accumulator of `ty` on the device.
pub(crate) fn acc_bytes(ty: ScalarType) -> usize {
    match ty {
        ScalarType::F16 | ScalarType::Bf16 | ScalarType::F32 => 4,
        ScalarType::F64 | ScalarType::C32 => 8,
        ScalarType::C64 => 16,
        // The integers accumulate in their own type; `bool` (a byte in memory) in a `uint`,
        // 0 or 1, the narrowest type OpenCL's atomics act on.
        ScalarType::Bool => 4,
        ScalarType::I32 | ScalarType::I64 | ScalarType::U32 | ScalarType::U64 => ty.size_bytes(),
    }
}

/// Type macros: storage, accumulator, loads and stores (f16/bf16 stored as 16 bits and widened
/// to f32, since few devices do arithmetic in half precision; `bool` stored as a byte and
/// accumulated in a `uint`, which atomics can `or` into).
fn type_defines(ty: ScalarType) -> String {
    let (store, acc, real, ncomp, load, store_at) = match ty {
        ScalarType::F32 => ("float", "float", "float", 1, "((p)[i])", "((p)[i] = (v))"),
        ScalarType::F64 => (
            "double",
            "double",
            "double",
            1,
            "((p)[i])",
            "((p)[i] = (v))",
        ),
        ScalarType::C32 => ("float2", "float2", "float", 2, "((p)[i])", "((p)[i] = (v))"),
        ScalarType::C64 => (
            "double2",
            "double2",
            "double",
            2,
            "((p)[i])",
            "((p)[i] = (v))",
        ),
        ScalarType::F16 => (
            "ushort",
            "float",
            "float",
            1,
            "vload_half((i), (__global const half*)(p))",
            "vstore_half_rte((v), (i), (__global half*)(p))",
        ),
        ScalarType::Bf16 => (
            "ushort",
            "float",
            "float",
            1,
            "as_float((uint)((p)[i]) << 16)",
            "((p)[i] = f32_to_bf16(v))",
        ),
        ScalarType::I32 => ("int", "int", "int", 1, "((p)[i])", "((p)[i] = (v))"),
        ScalarType::I64 => ("long", "long", "long", 1, "((p)[i])", "((p)[i] = (v))"),
        ScalarType::U32 => ("uint", "uint", "uint", 1, "((p)[i])", "((p)[i] = (v))"),
        ScalarType::U64 => ("ulong", "ulong", "ulong", 1, "((p)[i])", "((p)[i] = (v))"),
        // A `uchar` in memory, 0 or 1 (the host uploads `bool`s as they are and reads any
        // byte but 0 back as `true`); loaded as a `uint` 0 or 1 whatever byte it finds, and
        // stored as 0 or 1, so that the device only ever writes bytes that are `bool`s.
        ScalarType::Bool => (
            "uchar",
            "uint",
            "uint",
            1,
            "((uint)((p)[i] != 0))",
            "((p)[i] = (uchar)((v) != 0))",
        ),
    };
    let mut s = String::new();
    if matches!(ty, ScalarType::F64 | ScalarType::C64) {
        s.push_str("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define REAL_IS_DOUBLE 1\n");
    } else {
        s.push_str("#define REAL_IS_DOUBLE 0\n");
    }
    s.push_str(&format!(
        "#define STORE {store}\n#define ACC {acc}\n#define REAL {real}\n#define NCOMP {ncomp}\n\
         #define LOAD(p, i) {load}\n#define STORE_AT(p, i, v) {store_at}\n"
    ));
    // The accumulator's `+`, `×`, `min`, `max` and bounds (the identities of min and max).
    // Integers wrap on overflow, as the reference's `Wrapping` does: a signed sum or product is
    // computed on the unsigned bits (signed overflow is undefined in OpenCL C, as in C), and
    // their bounds stand for ±∞. Over `bool` (0 or 1 in a `uint`), as the reference's
    // `Boolean`: `+` and `max` are `or`, `×` and `min` are `and`, and true and false are the
    // bounds (`false < true`).
    let (plus, times, min, max, upper, lower) = match ty {
        ScalarType::I32 => (
            "as_int(as_uint(a) + as_uint(b))",
            "as_int(as_uint(a) * as_uint(b))",
            "min((a), (b))",
            "max((a), (b))",
            "INT_MAX",
            "INT_MIN",
        ),
        ScalarType::I64 => (
            "as_long(as_ulong(a) + as_ulong(b))",
            "as_long(as_ulong(a) * as_ulong(b))",
            "min((a), (b))",
            "max((a), (b))",
            "LONG_MAX",
            "LONG_MIN",
        ),
        ScalarType::U32 => (
            "(a) + (b)",
            "(a) * (b)",
            "min((a), (b))",
            "max((a), (b))",
            "UINT_MAX",
            "0",
        ),
        ScalarType::U64 => (
            "(a) + (b)",
            "(a) * (b)",
            "min((a), (b))",
            "max((a), (b))",
            "ULONG_MAX",
            "0",
        ),
        ScalarType::Bool => (
            "(a) | (b)",
            "(a) & (b)",
            "((a) & (b))",
            "((a) | (b))",
            "1",
            "0",
        ),
        _ => (
            "(a) + (b)",
            "(a) * (b)",
            "fmin((a), (b))",
            "fmax((a), (b))",
            "INFINITY",
            "-INFINITY",
        ),
    };
    s.push_str(&format!(
        "#define REAL_IS_INT {}\n#define REAL_IS_WIDE_INT {}\n#define REAL_IS_BOOL {}\n\
         #define PLUS(a, b) ({plus})\n#define TIMES(a, b) ({times})\n\
         #define MINOF(a, b) {min}\n#define MAXOF(a, b) {max}\n\
         #define ACC_MAX ((ACC)({upper}))\n#define ACC_MIN ((ACC)({lower}))\n",
        u8::from(ty.is_exact()),
        u8::from(matches!(ty, ScalarType::I64 | ScalarType::U64)),
        u8::from(ty == ScalarType::Bool)
    ));
    if ty == ScalarType::Bf16 {
        // Round to nearest even, NaN kept quiet: what `half::bf16::from_f32` does.
        s.push_str(
            "inline ushort f32_to_bf16(float f) {\n\
             \x20   uint u = as_uint(f);\n\
             \x20   if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);\n\
             \x20   return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n}\n",
        );
    }
    s
}

/// Entries of a row of C that one work-group of the numeric phase's long rows accumulates in
/// local memory (`NUM_SEG` in esc.cl): an accumulator and a column index each, in the device's
/// local memory (at most 48 KiB of it, 2 KiB left spare), a multiple of 64.
pub(crate) fn numeric_segment(ty: ScalarType, device: &DeviceDescription) -> usize {
    let local = (device.local_memory_bytes as usize).min(48 * 1024);
    let usable = local.saturating_sub(2048);
    (usable / (acc_bytes(ty) + 4) / 64 * 64).max(64)
}

/// Entries of C that one work-group of the numeric phase's medium rows accumulates in local
/// memory for all its rows together (`MED_SEG` in esc.cl): half of [`numeric_segment`]'s
/// budget, so the medium kernel never takes more local memory than the long-row kernel, and on
/// a GPU twice as many of its groups stay resident (their rows are short: latency, not local
/// memory, bounds them). A multiple of 64, at least 64 (as the long-row kernel's segments).
pub(crate) fn numeric_medium_entries(ty: ScalarType, device: &DeviceDescription) -> usize {
    let local = (device.local_memory_bytes as usize).min(48 * 1024);
    let usable = local.saturating_sub(2048) / 2;
    (usable / (acc_bytes(ty) + 4) / 64 * 64).max(64)
}

/// Largest power-of-two tile (256 to 1024 entries) whose two key and payload buffers fit in
/// local memory with room to spare.
pub(crate) fn sort_tile(device: &DeviceDescription, payload_bytes: usize) -> usize {
    let local = (device.local_memory_bytes as usize).min(48 * 1024);
    let usable = local.saturating_sub(4 * 1024);
    let per_entry = 2 * (8 + payload_bytes);
    let mut tile = 1024;
    while tile > SORT_WG && tile * per_entry > usable {
        tile /= 2;
    }
    tile
}

/// Source of the scalar program (ESC SpGEMM, SpMV, SpMM) for `ty`.
pub(crate) fn scalar_program(
    ty: ScalarType,
    semiring: KernelSemiring,
    device: &DeviceDescription,
) -> String {
    let atomics = has_atomics(ty, device);
    let mut s = type_defines(ty);
    if atomics_are_64_bit(ty) && atomics {
        s.push_str("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable\n");
    }
    s.push_str(&semiring.defines(ty.is_complex()));
    s.push_str(&format!(
        "#define HAS_ATOMICS {}\n#define NUM_SEG {}\n#define MED_SEG {}\n#define MED_LANES {MEDIUM_LANES}\n\
         #define PAYLOAD ACC\n\
         #define EXPAND_VALUE(ea, eb, k) MUL_AT(LOAD(a_vals, ea), LOAD(b_vals, eb), k)\n#define SORT_TILE {}\n#define SORT_WG {SORT_WG}\n\
         #define LANE_WG {LANE_WG}\n#define VEC_LANES {VEC_LANES}\n#define ELL_T {ELL_T}\n#define ELL_LC {ELL_LC}\n",
        u8::from(atomics),
        numeric_segment(ty, device),
        numeric_medium_entries(ty, device),
        sort_tile(device, acc_bytes(ty)),
    ));
    for part in [COMMON, SCAN, SORT, ESC, SPMV] {
        s.push_str(part);
        s.push('\n');
    }
    s
}

/// Whether the scalar program of `ty` has the CSPR kernel on this device.
pub(crate) fn has_cspr_kernel(ty: ScalarType, device: &DeviceDescription) -> bool {
    has_atomics(ty, device)
}

/// Whether the scalar program of `ty` has atomic adds (`HAS_ATOMICS`) on this device, and with
/// them the CSPR kernel and the numeric phase's medium- and long-row kernels: double and the
/// 64-bit integers need 64-bit atomics (`cl_khr_int64_base_atomics`: compare-and-swap for
/// double, add for the integers).
pub(crate) fn has_atomics(ty: ScalarType, device: &DeviceDescription) -> bool {
    !atomics_are_64_bit(ty) || device.int64_atomics
}

/// Whether the atomic adds of `ty`'s accumulator act on 64-bit words.
fn atomics_are_64_bit(ty: ScalarType) -> bool {
    matches!(
        ty,
        ScalarType::F64 | ScalarType::C64 | ScalarType::I64 | ScalarType::U64
    )
}

/// Bytes of the block program's sort payload: the two operand block indices.
pub(crate) const BLOCK_PAYLOAD_BYTES: usize = 16;

/// Source of the block SpGEMM program for `ty`: the sort carries operand indices (ulong2).
pub(crate) fn block_program(
    ty: ScalarType,
    semiring: KernelSemiring,
    device: &DeviceDescription,
) -> String {
    let mut s = type_defines(ty);
    s.push_str(&semiring.defines(ty.is_complex()));
    s.push_str(&format!(
        "#define HAS_ATOMICS 0\n#define PAYLOAD ulong2\n#define EXPAND_VALUE(ea, eb, k) ((ulong2)((ea), (eb)))\n#define SORT_TILE {}\n#define SORT_WG {SORT_WG}\n",
        sort_tile(device, BLOCK_PAYLOAD_BYTES)
    ));
    for part in [COMMON, SCAN, SORT, ESC, BSR] {
        s.push_str(part);
        s.push('\n');
    }
    s
}

/// Source of the masked SpGEMM program for `ty` over `semiring` (masked.cl, with the scan
/// that turns its row counts into offsets): a program of its own, so that a masked product
/// compiles only these few kernels, and the scalar program of a semiring stays the same
/// whether or not a mask is used with it.
pub(crate) fn masked_program(ty: ScalarType, semiring: KernelSemiring) -> String {
    let mut s = type_defines(ty);
    s.push_str(&semiring.defines(ty.is_complex()));
    s.push_str("#define HAS_ATOMICS 0\n");
    for part in [COMMON, SCAN, MASKED] {
        s.push_str(part);
        s.push('\n');
    }
    s
}
