//! The PTX modules built from `kernels-cuda/*.cu` by `cargo xtask kernels`, embedded so that
//! building the crate needs no CUDA toolkit. One line per module: (file stem, PTX).

pub(crate) const MODULES: &[(&str, &str)] = &[
    ("spgemm", include_str!("../../../kernels-cuda/spgemm.ptx")),
    ("spmv", include_str!("../../../kernels-cuda/spmv.ptx")),
    ("spmm", include_str!("../../../kernels-cuda/spmm.ptx")),
    ("dia", include_str!("../../../kernels-cuda/dia.ptx")),
    ("bsr", include_str!("../../../kernels-cuda/bsr.ptx")),
];
